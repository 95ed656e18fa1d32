"""`python -m trio_pty ...` is `trio-pty ...`."""

from trio_pty.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
