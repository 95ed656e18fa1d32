"""Telling a write's echo from its output (pure): what each written line echoes as."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trio_pty.output.echo import after_echo, echo_lines


def test_echo_lines() -> None:
    assert echo_lines(b"sleep 2; echo DONE\n") == ["sleep 2; echo DONE", ""]
    assert echo_lines(b"a\r\nb\rc\nd") == ["a", "b", "c", "d"]
    assert echo_lines(b"y") == ["y"]
    assert echo_lines(b"helo\x1b[D\x1b[Dl\x03\x7f\n") == ["helol", ""]  # keys do not echo


def test_after_echo() -> None:
    assert after_echo("qa$ sleep 2; echo DONE", "qa$ ", "sleep 2; echo DONE") == ""
    assert after_echo("qa$ sleep 2; ec", "qa$ ", "sleep 2; echo DONE") is None  # arriving
    assert after_echo("DONE", "", "") == "DONE"
    assert after_echo("Password: ", "Password: ", "secret") is None
    assert after_echo("unrelated output", "qa$ ", "ls") == "unrelated output"
    assert after_echo("Continue? y", "Continue? ", "y") == ""
    assert after_echo("Continue? yes, going on", "Continue? ", "y") == "es, going on"


@given(st.text(max_size=30), st.text(max_size=30))
def test_output_after_a_full_echo_is_kept_whole(output: str, prefix: str) -> None:
    written = "some command --flag"
    assert after_echo(prefix + written + output, prefix, written) == output
