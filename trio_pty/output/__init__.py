"""Pure output data structures: the byte ring, the clean line log, RE2 search, and the
terminal query responder. No I/O and no trio here: plain classes that tests drive directly."""

from .buffer import OutputBuffer
from .lines import LineLog, TextCleaner
from .ring import ByteRing
from .search import CompiledPattern, compile_pattern
from .stubber import QueryResponder

__all__ = [
    "ByteRing",
    "CompiledPattern",
    "LineLog",
    "OutputBuffer",
    "QueryResponder",
    "TextCleaner",
    "compile_pattern",
]
