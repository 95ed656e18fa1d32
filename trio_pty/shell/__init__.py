"""Shell sessions: bash and zsh that report each command's output, exit code and cwd.

- `scripts/`: the bash rcfile and the zsh startup files that print the marks (package data)
- `launch.py`: which shell, its arguments, its private startup files
- `marks.py`: the OSC 133 mark parser (pure; the reader's per-chunk cost)
- `history.py`: command records and prompt state, driven by the marks (pure)

What drives a shell session lives above session.py: starting one in `trio_pty/spawning.py`,
`run` and `commands` in `trio_pty/commands.py`; a command's output as numbered clean lines
in `trio_pty/output/pages.py`. See docs/shell.md.
"""
