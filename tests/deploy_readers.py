"""Readers for the deployment files under deploy/ and for docs/deploy.md (no tests here).

Each reader understands only what those files use and raises `ReadError` on anything else,
so a construct it does not know fails the tests instead of being skipped.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Sequence
from typing import Any

import attrs


class ReadError(ValueError):
    """A file uses syntax these readers do not understand."""


# --------------------------------------------------------------------------------------------
# systemd units


def read_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """Sections of a unit file, each a list of (key, value) in order (keys may repeat)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.strip()
        while line.endswith("\\"):  # a continuation line
            line = line[:-1] + " " + next(lines, "").strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
        elif "=" in line and current is not None:
            key, value = line.split("=", 1)
            current.append((key.strip(), value.strip()))
        else:
            raise ReadError(f"not a unit file line: {raw!r}")
    return sections


def unit_value(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> str | None:
    """The value systemd uses for a single-valued key: the last assignment wins."""
    values = [value for name, value in unit.get(section, []) if name == key]
    return values[-1] if values else None


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|sec|min|m|h)?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}


def seconds(value: str) -> float:
    """A duration as systemd and Nomad write the simple ones: "30", "30s", "5min", "1h 30s"."""
    parts = value.split()
    if not parts:
        raise ReadError("an empty duration")
    total = 0.0
    for part in parts:
        match = _DURATION.fullmatch(part)
        if match is None:
            raise ReadError(f"not a duration: {value!r}")
        total += float(match[1]) * _UNIT_SECONDS[match[2] or "s"]
    return total


# --------------------------------------------------------------------------------------------
# HCL (the subset the Nomad job uses)


@attrs.frozen
class HclBlock:
    type: str
    labels: tuple[str, ...]
    body: HclBody


@attrs.frozen
class HclBody:
    attributes: dict[str, Any]
    blocks: tuple[HclBlock, ...]

    def all(self, type: str) -> list[HclBlock]:
        return [block for block in self.blocks if block.type == type]

    def one(self, type: str) -> HclBlock:
        found = self.all(type)
        if len(found) != 1:
            raise ReadError(f"expected one {type} block, found {len(found)}")
        return found[0]


_HCL_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r]+)
    | (?P<comment>(\#|//)[^\n]*)
    | (?P<newline>\n)
    | (?P<string>"(?:[^"\\\n]|\\.)*")
    | (?P<number>-?\d+(?:\.\d+)?)
    | (?P<word>[A-Za-z_][A-Za-z0-9_-]*)
    | (?P<punct>[{}\[\]=,])
    """,
    re.VERBOSE,
)


def _hcl_tokens(text: str) -> list[tuple[str, str]]:
    tokens = []
    position = 0
    while position < len(text):
        match = _HCL_TOKEN.match(text, position)
        if match is None:
            line = text.count("\n", 0, position) + 1
            raise ReadError(f"line {line}: unsupported HCL: {text[position : position + 20]!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind not in ("space", "comment"):
            tokens.append((kind, match[0]))
        position = match.end()
    tokens.append(("end", ""))
    return tokens


def _unquote(token: str) -> str:
    # HCL string escapes are JSON's for everything this file uses (\" and \\).
    value: str = json.loads(token)
    return value


class _HclParser:
    def __init__(self, text: str) -> None:
        self.tokens = _hcl_tokens(text)
        self.at = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at]

    def take(self, kind: str, text: str | None = None) -> str:
        got_kind, got = self.tokens[self.at]
        if got_kind != kind or (text is not None and got != text):
            raise ReadError(f"expected {text or kind}, found {got!r}")
        self.at += 1
        return got

    def skip_newlines(self) -> None:
        while self.peek()[0] == "newline":
            self.at += 1

    def body(self, closing: str | None) -> HclBody:
        attributes: dict[str, Any] = {}
        blocks: list[HclBlock] = []
        while True:
            self.skip_newlines()
            kind, text = self.peek()
            if closing is None and kind == "end":
                break
            if closing is not None and (kind, text) == ("punct", closing):
                self.at += 1
                break
            name = self.take("word")
            if self.peek() == ("punct", "="):
                self.at += 1
                if name in attributes:
                    raise ReadError(f"attribute {name} set twice")
                attributes[name] = self.value()
                if self.peek() != ("punct", "}"):
                    self.take("newline")  # one attribute per line, as HCL requires
            else:
                labels = []
                while self.peek()[0] == "string":
                    labels.append(_unquote(self.take("string")))
                self.take("punct", "{")
                blocks.append(HclBlock(name, tuple(labels), self.body("}")))
        return HclBody(attributes, tuple(blocks))

    def value(self) -> Any:
        kind, text = self.peek()
        if kind == "string":
            self.at += 1
            return _unquote(text)
        if kind == "number":
            self.at += 1
            return float(text) if "." in text else int(text)
        if kind == "word" and text in ("true", "false"):
            self.at += 1
            return text == "true"
        if (kind, text) == ("punct", "["):
            self.at += 1
            items: list[Any] = []
            while True:
                self.skip_newlines()
                if self.peek() == ("punct", "]"):
                    self.at += 1
                    return items
                items.append(self.value())
                self.skip_newlines()
                if self.peek() == ("punct", ","):
                    self.at += 1
        raise ReadError(f"unsupported HCL value: {text!r}")


def read_hcl(text: str) -> HclBody:
    """Blocks (with string labels), and attributes whose values are strings, numbers, booleans
    or lists of those. Heredocs, objects, expressions and functions raise ReadError."""
    return _HclParser(text).body(None)


# --------------------------------------------------------------------------------------------
# Containerfiles


@attrs.frozen
class Instruction:
    stage: int  # 0 for the first FROM, 1 for the second, ...
    keyword: str
    arguments: str

    def exec_form(self) -> list[str]:
        """The JSON array of an exec-form ENTRYPOINT or CMD."""
        try:
            value = json.loads(self.arguments)
        except json.JSONDecodeError:
            raise ReadError(f"{self.keyword} is not in exec form: {self.arguments}") from None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ReadError(f"{self.keyword} is not a JSON array of strings")
        return value


def read_containerfile(text: str) -> list[Instruction]:
    instructions: list[Instruction] = []
    stage = -1
    logical = ""
    for raw in [*text.splitlines(), ""]:
        line = raw.strip()
        if line.startswith("#") and not logical:
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        if logical.strip():
            keyword, _, arguments = logical.strip().partition(" ")
            keyword = keyword.upper()
            if keyword == "FROM":
                stage += 1
            if stage < 0:
                raise ReadError(f"{keyword} before the first FROM")
            instructions.append(Instruction(stage, keyword, arguments.strip()))
        logical = ""
    return instructions


# --------------------------------------------------------------------------------------------
# Command lines and markdown


def option_values(argv: Sequence[str]) -> dict[str, list[str]]:
    """`--name value` and `--name=value` options of an argv, by name (flags map to [""])."""
    options: dict[str, list[str]] = {}
    index = 0
    while index < len(argv):
        item = argv[index]
        if not item.startswith("--"):
            raise ReadError(f"not an option: {item!r} in {list(argv)}")
        name, equals, value = item.partition("=")
        if not equals:
            following = argv[index + 1] if index + 1 < len(argv) else None
            if following is not None and not following.startswith("--"):
                value = following
                index += 1
        options.setdefault(name, []).append(value)
        index += 1
    return options


def markdown_section(text: str, heading: str) -> str:
    """The text under a `## heading` up to the next heading of the same or a higher level."""
    match = re.search(rf"^(#+) {re.escape(heading)}\s*$", text, re.MULTILINE)
    if match is None:
        raise ReadError(f"no heading {heading!r}")
    level = len(match[1])
    rest = text[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def markdown_tables(section: str) -> Iterator[list[list[str]]]:
    """Each table of a section as rows of cells (the header row first, the rule left out)."""
    rows: list[list[str]] = []
    for line in [*section.splitlines(), ""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
            if not all(set(cell) <= set("-: ") for cell in cells):
                rows.append(cells)
        elif rows:
            yield rows
            rows = []


def code_spans(text: str) -> list[str]:
    """Every fenced code block's logical lines (continuations joined) and every inline span."""
    found: list[str] = []
    fenced = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
    for block in fenced.findall(text):
        found.extend(line for line in block.replace("\\\n", " ").splitlines() if line.strip())
    outside = fenced.sub("", text)
    found.extend(re.findall(r"`([^`\n]+)`", outside.replace("\n", " ")))
    return found


_TRIO_PTY_COMMAND = re.compile(r"(?<![\w/.-])trio-pty[ \t]+([a-z][a-z-]*)(.*)")


def trio_pty_invocations(span: str) -> Iterator[tuple[str, list[str]]]:
    """(subcommand, its --options) for each `trio-pty SUBCOMMAND ...` in a span of code."""
    for match in _TRIO_PTY_COMMAND.finditer(span):
        words = shlex.split(match[2].replace("[", " ").replace("]", " "), comments=False)
        yield match[1], [word.split("=", 1)[0] for word in words if word.startswith("--")]
