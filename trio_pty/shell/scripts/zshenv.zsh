# trio-pty shell integration for zsh (see docs/shell.md).
#
# The session starts zsh with ZDOTDIR pointing at a private directory that holds this file
# and .zprofile, .zshrc and .zlogin; trio-pty deletes it at the first prompt. The header
# above this line sets __tp_nonce (this session's random nonce), __tp_rc (1: read the
# user's startup files), __tp_dir (the private directory) and the user's own ZDOTDIR
# (__tp_zdotdir, __tp_zdotdir_set, __tp_zdotdir_export). Each of our files lets the user's
# file of the same name run with ZDOTDIR as the user has it, then points ZDOTDIR back here
# so that zsh reads our next file; the last one restores the user's ZDOTDIR for good. The
# user's files are only read, never written.
#
# Marks (OSC 133, each carrying the nonce so that program output cannot forge one):
#   A, B  around the prompt (PS1)        C;...;cmd=<line>  last thing before a command runs
#   D;<status>;...;cwd=<dir>;paste=<0|1>  first thing before each prompt (with a standard
#         OSC 7 after it); paste says whether the line editor will take bracketed paste
# zsh prints PROMPT_SP's end-of-line mark before any precmd hook runs, which would put it
# inside the previous command's output; so the session turns PROMPT_SP off and prints the
# same thing itself, right after D. Everything runs inside the shell: no fork per prompt.

__tp_enter() {
    # ZDOTDIR as the user has it, while one of their files runs.
    if (( __tp_zdotdir_set )); then
        ZDOTDIR=$__tp_zdotdir
        (( __tp_zdotdir_export )) && export ZDOTDIR
    else
        unset ZDOTDIR
    fi
}

__tp_leave() {
    # Remember the user's ZDOTDIR (their file may have set it: zsh would read the rest of
    # their files from there), then point it back here for our next file.
    if (( ${+ZDOTDIR} )); then
        __tp_zdotdir=$ZDOTDIR
        __tp_zdotdir_set=1
        if [[ ${(t)ZDOTDIR} == *export* ]]; then __tp_zdotdir_export=1; else __tp_zdotdir_export=0; fi
    else
        __tp_zdotdir_set=0
    fi
    ZDOTDIR=$__tp_dir
}

__tp_source() {
    # The user's startup file $1, at top level through the caller; 0 when it should run.
    (( __tp_rc )) && [[ -r ${ZDOTDIR-$HOME}/$1 ]]
}

__tp_finish() {
    # After the last startup file: the user's ZDOTDIR for good, our helpers gone.
    __tp_enter
    unset __tp_dir __tp_zdotdir __tp_zdotdir_set __tp_zdotdir_export __tp_rc
    unfunction __tp_enter __tp_leave __tp_source __tp_finish __tp_install __tp_take_prompt_sp
}

__tp_install() {
    # Called after the user's .zshrc (and again after .zlogin): our hooks at both ends.
    emulate -L zsh
    typeset -g __tp_A=$'\e]133;A;tp='$__tp_nonce$'\a'
    typeset -g __tp_B=$'\e]133;B;tp='$__tp_nonce$'\a'
    (( ${+__tp_ps1} )) || typeset -g __tp_ps1=$__tp_A  # never equal to PS1 before the wrap
    (( ${+__tp_prompt_sp} )) || typeset -g __tp_prompt_sp=0
    if (( ${+functions[precmd]} )); then
        # zsh runs a function named precmd before the hook array: move it behind our
        # report, so the status it sees and the output it prints are the prompt's.
        functions[__tp_user_precmd]=$functions[precmd]
        unfunction precmd
        precmd_functions=(__tp_user_precmd $precmd_functions)
    fi
    __tp_order
}

__tp_take_prompt_sp() {
    # Called at top level: any caller under emulate -L would turn PROMPT_SP back on when
    # it returns (local options are restored as they were when it was entered).
    if [[ -o prompt_sp ]]; then
        typeset -g __tp_prompt_sp=1
        unsetopt prompt_sp
    fi
}

__tp_order() {
    # The report first (it must see the command's $? and print D before anything else
    # is printed for the prompt), the wrap last (themes set PS1 in their own hooks), and
    # C last of all before a command. A plugin may add hooks later: checked every time.
    emulate -L zsh
    if [[ ${precmd_functions[1]-} != __tp_report || ${precmd_functions[-1]-} != __tp_wrap ]]; then
        precmd_functions=(__tp_report ${precmd_functions:#__tp_(report|wrap)} __tp_wrap)
    fi
    if [[ ${preexec_functions[-1]-} != __tp_preexec ]]; then
        preexec_functions=(${preexec_functions:#__tp_preexec} __tp_preexec)
    fi
}

__tp_report() {
    local s=$? paste=0  # first: the status of the command that just ended
    [[ -o zle ]] && (( ${#zle_bracketed_paste[@]} == 2 )) && paste=1  # before emulate resets zle
    emulate -L zsh
    local dir=$PWD
    if [[ $dir == *[%\;\?\#[:cntrl:]]* ]]; then
        __tp_encode $dir
        dir=$REPLY
    fi
    builtin printf '\e]133;D;%s;tp=%s;cwd=%s;paste=%s\a\e]7;file://%s%s\a' \
        $s $__tp_nonce $dir $paste $HOST $dir
    if (( __tp_prompt_sp )); then
        # What PROMPT_SP prints: the mark, then enough blanks to wrap to a new line only if
        # the output did not end with one, then back to column 0.
        setopt extended_glob
        local mark=${PROMPT_EOL_MARK-%B%S%#%s%b}
        local shown=${(%)mark}
        shown=${shown//$'\e'\[[0-9;]#m/}
        builtin print -Pn -- $mark
        builtin printf '%*s\r \r' $(( COLUMNS - ${#shown} )) ''
    fi
    return s
}

__tp_wrap() {
    local s=$? percent=0
    [[ -o prompt_percent ]] && percent=1  # the user's option, before emulate resets it
    emulate -L zsh
    if [[ $PS1 != "$__tp_ps1" ]]; then
        local open=$__tp_A close=$__tp_B
        if (( percent )); then
            open="%{$__tp_A%}"
            close="%{$__tp_B%}"
        fi
        PS1=${PS1//"$open"/}
        PS1=${PS1//"$close"/}
        typeset -g __tp_ps1=$open$PS1$close
        PS1=$__tp_ps1
    fi
    return s
}

__tp_preexec() {
    # $1 is the command line as typed; long ones are left out (run() knows its own).
    emulate -L zsh
    __tp_order
    local line=$1
    if (( ${#line} > 1000 )); then
        builtin printf '\e]133;C;tp=%s\a' $__tp_nonce
        return
    fi
    if [[ $line == *[%\;\?\#[:cntrl:]]* ]]; then
        __tp_encode $line
        line=$REPLY
    fi
    builtin printf '\e]133;C;tp=%s;cmd=%s\a' $__tp_nonce $line
}

__tp_encode() {
    # Percent-encode what would end or split a mark: %, ;, ?, # and control characters.
    emulate -L zsh
    local LC_ALL=C char
    REPLY=
    for char in "${(@s::)1}"; do
        case $char in
            ([%\;\?\#[:cntrl:]]) char=%${(l:2::0:)$(( [##16] #char ))} ;;
        esac
        REPLY+=$char
    done
}

__tp_enter
if __tp_source .zshenv; then
    builtin source -- "${ZDOTDIR-$HOME}/.zshenv"
fi
__tp_leave
