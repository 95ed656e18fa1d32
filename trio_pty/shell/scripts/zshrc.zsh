# trio-pty: see zshenv.zsh. The user's .zshrc, then our hooks.
__tp_enter
if __tp_source .zshrc; then
    builtin source -- "${ZDOTDIR-$HOME}/.zshrc"
fi
__tp_leave
__tp_take_prompt_sp
__tp_install
[[ -o login ]] || __tp_finish  # otherwise .zlogin comes last
