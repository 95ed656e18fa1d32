"""`trio-pty completion bash|zsh`: a completion script, generated from the parsers (so it
never lists a verb or an option that is not there): verbs, each verb's options, and where a
verb takes a session, the owner's session ids and names (from `trio-pty list`, asked at the
moment of completing).

    eval "$(trio-pty completion bash)"      # in ~/.bashrc
    eval "$(trio-pty completion zsh)"       # in ~/.zshrc (after compinit)
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from typing import Final

__all__ = ["SHELLS", "completion_script"]

SHELLS: Final = ("bash", "zsh")

# An option in a usage line: `[--owner OWNER]`, `[-i]`, `--url URL |`.
_OPTION: Final = re.compile(r"(?<=[\[ |(])(--?[A-Za-z][\w-]*)")

# A verb's session argument in its usage line: `id`, or `[id]`.
_SESSION: Final = re.compile(r"[ \[]id\]?(?: |$)", re.MULTILINE)

_TOP_OPTIONS: Final = "--url --token --json --help"

_BASH: Final = r"""# trio-pty completion (bash): eval "$(trio-pty completion bash)"
_trio_pty() {
    local cur=${COMP_WORDS[COMP_CWORD]} verb="" at=0 i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
            --url | --token) ((i++)) ;;
            -*) ;;
            *) verb=${COMP_WORDS[i]}; at=$i; break ;;
        esac
    done
    COMPREPLY=()
    if [[ -z $verb ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "@TOP@" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "@VERBS@" -- "$cur"))
        fi
        return 0
    fi
    if [[ $cur == -* ]]; then
        case $verb in
@OPTIONS@
        esac
        return 0
    fi
    if ((COMP_CWORD == at + 1)); then
        case $verb in
            completion) COMPREPLY=($(compgen -W "@SHELLS@" -- "$cur")) ;;
            @SESSION_VERBS@)
                local sessions
                sessions=$(trio-pty list 2>/dev/null |
                    awk 'NR > 1 { print $1; if ($2 != "-") print $2 }')
                COMPREPLY=($(compgen -W "$sessions" -- "$cur"))
                ;;
        esac
    fi
    return 0
}
complete -o default -F _trio_pty trio-pty
"""

_ZSH_PREAMBLE: Final = (
    '# trio-pty completion (zsh): eval "$(trio-pty completion zsh)" after compinit\n'
    "autoload -Uz bashcompinit && bashcompinit\n"
)


def _options(parser: argparse.ArgumentParser) -> list[str]:
    found = dict.fromkeys(_OPTION.findall(parser.format_usage()))
    return sorted(found)


def _takes_a_session(parser: argparse.ArgumentParser) -> bool:
    """Its first positional is a session (`ID`, or `[ID]` for attach)."""
    return _SESSION.search(parser.format_usage()) is not None


def completion_script(shell: str, verbs: Mapping[str, argparse.ArgumentParser]) -> str:
    """The script for `shell` ("bash" or "zsh": zsh runs the bash one through its
    bashcompinit), from the verbs' parsers."""
    session_verbs = [name for name, parser in verbs.items() if _takes_a_session(parser)]
    cases = "\n".join(
        f'            {name}) COMPREPLY=($(compgen -W "{" ".join(_options(parser))}" -- "$cur")) ;;'
        for name, parser in verbs.items()
    )
    script = (
        _BASH.replace("@TOP@", _TOP_OPTIONS)
        .replace("@VERBS@", " ".join(verbs))
        .replace("@OPTIONS@", cases)
        .replace("@SHELLS@", " ".join(SHELLS))
        .replace("@SESSION_VERBS@", " | ".join(session_verbs))
    )
    return script if shell == "bash" else _ZSH_PREAMBLE + script
