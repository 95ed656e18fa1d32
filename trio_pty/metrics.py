"""What the manager counts for operators, and the Prometheus text format it is scraped in.

Pure (no trio, no I/O). The manager keeps `ManagerStats` (spawns by outcome, the teardown
histogram, the output of removed sessions); the server adds what only it knows and serves
`render(...)` at `GET /metrics` (docs/deploy.md lists the metrics).

The text format (Prometheus exposition format 0.0.4) is written here by hand, ~40 lines:
per family `# HELP`, `# TYPE`, then one line per sample, `name{label="value"} number`, label
values escaping backslash, double quote and newline; a histogram's cumulative
`_bucket{le="..."}` lines end with `le="+Inf"`, then `_sum` and `_count`. prometheus-client
was tried and not taken: importing it costs 60-75 ms here and registers process, platform
and gc collectors in its global registry; its own counters add `_created` series unless an
environment variable turns them off process-wide; and the counts belong to the manager (a
library that must not depend on it), so it would only have formatted these lines. It runs no
thread, and trio was no obstacle.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Literal

import attrs

__all__ = [
    "CONTENT_TYPE",
    "TEARDOWN_BUCKETS",
    "Family",
    "Histogram",
    "ManagerStats",
    "Sample",
    "render",
]

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
TEARDOWN_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Histogram:
    """Observations counted into fixed buckets (upper bounds), with their sum and count."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(sorted(buckets))
        self._counts = [0] * len(self.buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self._counts[index] += 1
                break
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it), +Inf last."""
        found, total = [], 0
        for bound, count in zip(self.buckets, self._counts, strict=True):
            total += count
            found.append((bound, total))
        found.append((math.inf, self.count))
        return found


@attrs.define
class ManagerStats:
    """The manager's counters: spawns by outcome ("started", or the kind of the error that
    refused it), the teardown time of killed sessions, and the output of sessions that were
    removed (the live ones' is read from them: the reader's hot path counts nothing)."""

    spawns: collections.Counter[str] = attrs.Factory(collections.Counter)
    teardown: Histogram = attrs.Factory(lambda: Histogram(TEARDOWN_BUCKETS))
    removed_output_bytes: int = 0


@attrs.frozen
class Sample:
    value: float
    labels: tuple[tuple[str, str], ...] = ()
    suffix: str = ""  # "_bucket", "_sum", "_count" of a histogram


@attrs.frozen
class Family:
    name: str
    type: Literal["counter", "gauge", "histogram"]
    help: str
    samples: tuple[Sample, ...]

    @classmethod
    def of(
        cls,
        name: str,
        type: Literal["counter", "gauge"],
        help: str,
        values: float | Mapping[tuple[tuple[str, str], ...], float],
    ) -> Family:
        """A family of one unlabelled value, or of values by their labels."""
        if isinstance(values, Mapping):
            samples = tuple(Sample(value, labels) for labels, value in values.items())
        else:
            samples = (Sample(values),)
        return cls(name, type, help, samples)

    @classmethod
    def histogram(cls, name: str, help: str, histogram: Histogram) -> Family:
        samples = [
            Sample(count, (("le", _number(bound)),), "_bucket")
            for bound, count in histogram.cumulative()
        ]
        samples += [Sample(histogram.sum, (), "_sum"), Sample(histogram.count, (), "_count")]
        return cls(name, "histogram", help, tuple(samples))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def render(families: Iterable[Family]) -> str:
    lines: list[str] = []
    for family in families:
        text = family.help.replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"# HELP {family.name} {text}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            labels = ",".join(f'{key}="{_escape(value)}"' for key, value in sample.labels)
            shown = f"{{{labels}}}" if labels else ""
            lines.append(f"{family.name}{sample.suffix}{shown} {_number(sample.value)}")
    return "\n".join(lines) + "\n"
