"""Summaries and interleaving: the only statistics the benchmarks use.

Every scenario runs its variants interleaved (A B C, then B C A, then C A B, ...) so that
machine noise, which comes in bursts, falls on all variants alike, and then reports the
median with the min and max of each. Ratios are always taken between medians measured in
the same run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max and count of `values` (NaN figures when there are none)."""
    if not values:
        nan = math.nan
        return {"median": nan, "min": nan, "max": nan, "n": 0}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when that means nothing."""
    if denominator == 0 or math.isnan(numerator) or math.isnan(denominator):
        return math.nan
    return numerator / denominator


def rotations(names: Sequence[str], rounds: int) -> list[list[str]]:
    """The order of variants in each round: A B C, B C A, C A B, ..."""
    count = len(names)
    return [[names[(r + i) % count] for i in range(count)] for r in range(rounds)]


def _schedule(
    names: Sequence[str], rounds: int, progress: Callable[[str], None] | None, label: str
) -> Iterator[str]:
    """The variants to run, one after another, announcing each."""
    for number, order in enumerate(rotations(names, rounds), start=1):
        for name in order:
            if progress is not None:
                progress(f"{label}round {number}/{rounds} {name}")
            yield name


async def interleave(
    variants: Mapping[str, Callable[[], Awaitable[T]]],
    rounds: int,
    *,
    progress: Callable[[str], None] | None = None,
    label: str = "",
) -> dict[str, list[T]]:
    """Run each variant once per round, in rotated order; return the samples by variant."""
    samples: dict[str, list[T]] = {name: [] for name in variants}
    for name in _schedule(list(variants), rounds, progress, label):
        samples[name].append(await variants[name]())
    return samples


def interleave_sync(
    variants: Mapping[str, Callable[[], T]],
    rounds: int,
    *,
    progress: Callable[[str], None] | None = None,
    label: str = "",
) -> dict[str, list[T]]:
    """`interleave` for plain functions."""
    samples: dict[str, list[T]] = {name: [] for name in variants}
    for name in _schedule(list(variants), rounds, progress, label):
        samples[name].append(variants[name]())
    return samples


def column(samples: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    """One figure out of a list of sample records (records without it are skipped)."""
    return [float(s[key]) for s in samples if s.get(key) is not None]
