"""One deliberate bug: where it goes, what it breaks, and which tests must catch it."""

from __future__ import annotations

import textwrap

import attrs


class CodeMoved(Exception):
    """A mutation's text is not in its file exactly once: the code changed since the entry
    was written, and the entry must follow it."""


@attrs.frozen
class Mutation:
    name: str
    """Short and unique: `--only` takes it, docs/guarantees.md cites it."""
    guarantee: str
    """The promise the bug breaks."""
    path: str
    """The file it patches, relative to the repository."""
    old: str
    """Text that must occur exactly once in `path`."""
    new: str
    """What replaces it: the bug."""
    tests: tuple[str, ...]
    """pytest node ids (files or single tests) of which at least one must fail."""
    quick: bool = False
    """Part of the fixed subset CI runs (`--quick`)."""

    def apply(self, text: str) -> str:
        """`text` (the file's content) with the bug in it; CodeMoved when the text to
        replace is not there exactly once."""
        found = text.count(self.old)
        if found != 1:
            raise CodeMoved(
                f"mutation {self.name!r}: {self.path} holds {found} copies of the text it "
                "replaces (it needs exactly one): the code moved. Update the entry in "
                "tests/mutations/catalogue.py. It looked for:\n"
                + textwrap.indent(self.old, "    | ", lambda line: True)
            )
        return text.replace(self.old, self.new)
