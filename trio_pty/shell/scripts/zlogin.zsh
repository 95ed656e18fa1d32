# trio-pty: read for login shells only, last; see zshenv.zsh.
__tp_enter
if __tp_source .zlogin; then
    builtin source -- "${ZDOTDIR-$HOME}/.zlogin"
fi
__tp_leave
__tp_take_prompt_sp
__tp_install
__tp_finish
