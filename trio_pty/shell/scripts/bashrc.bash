# trio-pty shell integration for bash, read as the session's --rcfile (see docs/shell.md).
#
# trio-pty writes a copy of this file into a private directory, below a header that sets
# __tp_nonce (this session's random nonce), __tp_rc (1: read the user's startup files) and
# __tp_login (1: read what a login shell reads), and deletes it at the first prompt. The
# user's own files are only read, never written.
#
# Marks (OSC 133, each carrying the nonce so that program output cannot forge one):
#   A, B  around the prompt (PS1)              C  after a command line is read (PS0)
#   D;<status>;...;cwd=<dir>  first thing before each prompt (PROMPT_COMMAND), with a
#                             standard OSC 7 after it for terminals
# Everything runs inside the shell: no fork per prompt or per command.

if [[ ${__tp_rc-} == 1 ]]; then
    if [[ ${__tp_login-} == 1 ]]; then
        # bash ignores --rcfile in a login shell, so the session is a normal interactive
        # shell that reads what a login shell would, in the same order.
        [[ -r /etc/profile ]] && builtin source /etc/profile
        if [[ -r ~/.bash_profile ]]; then
            builtin source ~/.bash_profile
        elif [[ -r ~/.bash_login ]]; then
            builtin source ~/.bash_login
        elif [[ -r ~/.profile ]]; then
            builtin source ~/.profile
        fi
    elif [[ -r ~/.bashrc ]]; then
        builtin source ~/.bashrc
    fi
fi

__tp_install() {
    # PS0 (the C mark) appeared in bash 4.4.
    if (( BASH_VERSINFO[0] < 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] < 4) )); then
        builtin printf 'trio-pty: shell integration needs bash 4.4 or newer, this is %s\n' \
            "$BASH_VERSION" >&2
        builtin return 1
    fi
    __tp_A=$'\e]133;A;tp='"$__tp_nonce"$'\a'
    __tp_B=$'\e]133;B;tp='"$__tp_nonce"$'\a'
    __tp_C=$'\e]133;C;tp='"$__tp_nonce"$'\a'
    # What __tp_wrap last set: a value neither variable can hold before the first prompt.
    __tp_ps1=$__tp_A
    __tp_ps0=$__tp_A
    # The user's hooks run between ours: the report first (it must see the command's $?,
    # and print D before anything else is printed for the prompt), the wrap last (a
    # theme may set PS1 in its own hook).
    if (( BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1) )); then
        PROMPT_COMMAND=(__tp_report ${PROMPT_COMMAND[@]+"${PROMPT_COMMAND[@]}"} __tp_wrap)
    else
        PROMPT_COMMAND=$'__tp_report\n'"${PROMPT_COMMAND-}"$'\n__tp_wrap'
    fi
}

__tp_report() {
    # Must stay the first command: it reads the status of the command that just ended,
    # and hands the same status on to the hooks after it.
    # (`builtin local` parses its words as arguments, not assignments: quote them.)
    builtin local s="$?" dir="$PWD"
    if [[ $dir == *[%\;?#[:cntrl:]]* ]]; then
        __tp_encode "$dir"
        dir=$__tp_out
    fi
    builtin printf '\e]133;D;%s;tp=%s;cwd=%s\a\e]7;file://%s%s\a' \
        "$s" "$__tp_nonce" "$dir" "${HOSTNAME-}" "$dir"
    builtin return "$s"
}

__tp_wrap() {
    builtin local s="$?"
    if [[ ${PS1-} != "$__tp_ps1" ]]; then
        # A new PS1 (a theme's hook, or the user): drop our old marks, wrap it again.
        PS1=${PS1-}
        PS1=${PS1//"\[$__tp_A\]"/}
        PS1=${PS1//"\[$__tp_B\]"/}
        __tp_ps1="\[$__tp_A\]$PS1\[$__tp_B\]"
        PS1=$__tp_ps1
        builtin export -n PS1  # a shell started from this one must not print our marks
    fi
    if [[ ${PS0-} != "$__tp_ps0" ]]; then
        __tp_ps0=${PS0-}
        __tp_ps0=${__tp_ps0//"$__tp_C"/}$__tp_C
        PS0=$__tp_ps0
        builtin export -n PS0
    fi
    builtin return "$s"
}

__tp_encode() {
    # Percent-encode what would end or split a mark: %, ;, ?, # and control characters.
    builtin local LC_ALL=C text="$1" char i
    __tp_out=
    for (( i = 0; i < ${#text}; i++ )); do
        char=${text:i:1}
        case $char in
            [%\;?#[:cntrl:]]) builtin printf -v char '%%%02X' "'$char" ;;
        esac
        __tp_out+=$char
    done
}

__tp_install
builtin unset -f __tp_install
