"""Shell sessions: bash and zsh that report each command's output, exit code and cwd.

- `scripts/`: the bash rcfile and the zsh startup files that print the marks (package data)
- `launch.py`: which shell, its arguments, its private startup files
- `marks.py`: the OSC 133 mark parser (pure; the reader's per-chunk cost)
- `history.py`: command records and prompt state, driven by the marks (pure)
- `pages.py`, `text.py`: a command's output as numbered clean lines (pure)

`Manager.spawn_shell`, `run` and `commands` build on `Manager.spawn`. See docs/shell.md.
"""
