# trio-pty: read for login shells only; see zshenv.zsh.
__tp_enter
if __tp_source .zprofile; then
    builtin source -- "${ZDOTDIR-$HOME}/.zprofile"
fi
__tp_leave
