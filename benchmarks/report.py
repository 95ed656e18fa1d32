"""docs/benchmarks.md and docs/images/benchmarks.png, regenerated from a results file.

`python -m benchmarks.report [results.json]` regenerates both without measuring anything.
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

from .harness import REPO, SCENARIOS, module

DOC = os.path.join(REPO, "docs", "benchmarks.md")
IMAGE = os.path.join(REPO, "docs", "images", "benchmarks.png")
BUSY_WARNING = 0.10  # background CPU share above which the figures are flagged as noisy

COMMON_METHOD = """\
Each scenario runs in a fresh child process of the runner (so memory, descriptors and the
child-subreaper flag of one scenario cannot leak into the next, and "this process's CPU" is
the scenario's own). Within a scenario, the variants run **interleaved**: one sample of each
per round, the order rotated every round (A B C, B C A, ...), so the bursts of noise a shared
machine produces fall on every variant alike. Tables give the **median**, min and max over the
samples; a **ratio** is always the median of a variant over the median of the baseline *from
the same run*, never against a figure from another machine or day. Goals are judged on the
median, with the spread shown next to it.

Every process a benchmark starts carries a per-run tag in its environment. After each
teardown the teardown scenario checks that nothing tagged survives and no descriptor stays
open; after each scenario the runner looks for anything tagged, anywhere, kills it by pid
and fails the run. `--quick` uses smaller sizes and fewer rounds; its timings are not meant
to be read, but its correctness checks (no leftover process, no lost byte) are strict, and
it exits non-zero when one fails.
"""


def _num(value: Any, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if unit in ("ms", "KiB"):
        return f"{value:.2f}" if value < 10 else f"{value:.1f}"
    if unit == "s":
        return f"{value:.3f}"
    if unit == "MB/s":
        return f"{value:.1f}"
    if unit == "count":
        return f"{value:g}"
    return f"{value:.2f}"


def _met(value: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "n/a"}[value]


def _load_text(meta: dict[str, Any]) -> str:
    before = meta.get("background_busy_before") or 0.0
    after = meta.get("background_busy_after") or 0.0
    load = meta.get("loadavg_before") or [math.nan]
    text = (
        f"Background CPU use (this run idle, whole machine) was {before:.0%} just before the run "
        f"and {after:.0%} just after; load average {load[0]:.2f} at the start."
    )
    cpus = meta.get("cpu_count") or 1
    if max(before, after) > BUSY_WARNING or load[0] > cpus / 2:
        text += (
            " **The machine was busy with other work during this run: treat the timings as "
            "noisy and regenerate them on a quiet machine before quoting them.**"
        )
    if meta.get("note"):
        text += f"\n\nNote on this run: {meta['note']}"
    return text


def _summary(scenarios: dict[str, Any]) -> list[str]:
    lines = [
        "| Scenario | Goal | Measured (median unless said) | Met |",
        "|---|---|---|---|",
    ]
    for result in scenarios.values():
        for goal in result.get("goals", []):
            measured = str(goal["measured"]).replace("|", "\\|")
            lines.append(
                f"| {result['title']} | {goal['goal']} | {measured} | {_met(goal['met'])} |"
            )
    return lines


def _rows(result: dict[str, Any]) -> list[str]:
    rows = result.get("rows", [])
    if not rows:
        return []
    lines = [
        "| Measure | Variant | Median | Min | Max | n | Ratio (median / baseline) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        unit = row["unit"]
        if row.get("display"):
            median = low = high = row["display"]
        else:
            median, low, high = (_num(row[k], unit) for k in ("median", "min", "max"))
        ratio = row.get("ratio")
        ratio_text = (
            f"{ratio:.2f}x {row['baseline']}"
            if ratio is not None and row["variant"] != row["baseline"]
            else ("baseline" if row["variant"] == row.get("baseline") else "")
        )
        lines.append(
            f"| {row['group']} ({unit}) | {row['variant']} | {median} | {low} | {high} "
            f"| {row['n']} | {ratio_text} |"
        )
    return lines


def _scenario_section(number: int, name: str, result: dict[str, Any]) -> list[str]:
    scenario = module(name)
    lines = [f"## {number}. {result['title']}", "", scenario.METHOD.strip(), ""]
    params = result.get("params") or {}
    if params:
        shown = ", ".join(f"`{key}` = {value}" for key, value in params.items())
        lines += [f"Parameters of this run: {shown}.", ""]
    busy = result.get("machine_busy")
    if busy is not None:
        lines += [
            f"Machine CPU busy while it ran (all processes, ours included): {busy:.0%}; "
            f"it took {result.get('elapsed_s') or 0:.0f} s.",
            "",
        ]
    lines += _rows(result)
    if result.get("rows"):
        lines.append("")
    for goal in result.get("goals", []):
        lines.append(f"- Goal: {goal['goal']}: {_met(goal['met'])}. {goal['measured']}.")
    failed = [c for c in result.get("checks", []) if not c["ok"]]
    checks = result.get("checks", [])
    if checks:
        lines.append(
            f"- Correctness checks: {len(checks) - len(failed)}/{len(checks)} passed."
            + "".join(f" FAILED: {c['check']} ({c['detail']})." for c in failed)
        )
    for note in result.get("notes", []):
        if "Traceback" not in note:
            lines.append(f"- {note}")
    lines.append("")
    return lines


def markdown(payload: dict[str, Any], results_path: str) -> str:
    meta = payload["meta"]
    scenarios = payload["scenarios"]
    relative = os.path.relpath(results_path, REPO)
    versions = ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items())
    lines = [
        "# Benchmarks",
        "",
        f"<!-- Generated by `python -m benchmarks` from `{relative}`; do not edit by hand. "
        "`python -m benchmarks.report` regenerates this file and the plot from the JSON. -->",
        "",
        "What trio-pty costs, measured against the raw kernel limit and against its peers "
        "**in the same run**. Run them yourself:",
        "",
        "```",
        "python -m benchmarks          # full, a few minutes: results/latest.json, this page, plot",
        "python -m benchmarks --quick  # under a minute: fails on a leftover process or lost byte",
        "python -m benchmarks --only teardown,spawn   # a subset",
        "```",
        "",
        "(Install the extra first: `pip install -e '.[bench]'`.)",
        "",
        "## This run",
        "",
        f"{meta.get('date')}, {meta.get('mode')} mode, {meta.get('duration_s', 0):.0f} s; "
        f"{meta.get('cpu_count')} CPUs ({meta.get('cpu_model')}), {meta.get('memory_gb')} GB, "
        f"Linux {meta.get('kernel')}, Python {meta.get('python')}, PID 1 is "
        f"`{meta.get('pid_1')}`; {versions}; commit {meta.get('git_commit') or '?'} "
        "(plus uncommitted changes, if any).",
        "",
        _load_text(meta),
        "",
        "## Summary",
        "",
        *_summary(scenarios),
        "",
        f"![teardown time against session count, and throughput ratios]"
        f"({os.path.relpath(IMAGE, os.path.dirname(DOC))})",
        "",
        "## Method",
        "",
        COMMON_METHOD.strip(),
        "",
    ]
    for number, name in enumerate(SCENARIOS, start=1):
        if name in scenarios:
            lines += _scenario_section(number, name, scenarios[name])
    return "\n".join(lines).rstrip() + "\n"


# ----------------------------------------------------------------------------- plot


def plot(payload: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = payload["scenarios"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    teardown = scenarios.get("teardown", {}).get("data", {})
    by_n = teardown.get("by_n", {})
    grace = teardown.get("grace", 0.0)
    if by_n:
        sizes = sorted(int(n) for n in by_n)
        series = [("trio_pty", "trio-pty: every process reaped, every fd closed", "o-")]
        if all("crash" in by_n[str(n)] for n in sizes):
            series.append(
                ("crash", "crash: the manager's process SIGKILLed, its keeper ends all", "^-")
            )
        for key, label, style in (
            *series,
            (
                "naive",
                "naive: SIGTERM/SIGKILL the leader, PID 1 reaps\n"
                "(time of the last process that did go; numbers: left running)",
                "s--",
            ),
        ):
            # The crash case and the naive way run at the smaller sizes only.
            ran = [n for n in sizes if by_n[str(n)][key]["n"]]
            past = [(by_n[str(n)][key]["median"] - grace) * 1000 for n in ran]
            lows = [
                p - (by_n[str(n)][key]["min"] - grace) * 1000
                for n, p in zip(ran, past, strict=True)
            ]
            highs = [
                (by_n[str(n)][key]["max"] - grace) * 1000 - p
                for n, p in zip(ran, past, strict=True)
            ]
            left.errorbar(ran, past, yerr=[lows, highs], fmt=style, capsize=4, label=label)
            if key == "naive":
                for n, value in zip(ran, past, strict=True):
                    running = max(by_n[str(n)]["naive_left_behind"])
                    left.annotate(
                        f"{running} left running",
                        (n, value),
                        fontsize=7,
                        textcoords="offset points",
                        xytext=(4, -12),
                    )
        left.axhline(50, color="green", linewidth=0.8, linestyle="--", label="goal: grace + 50 ms")
        if 1024 in sizes:
            left.plot([1024], [150], "g*", markersize=10, label="goal at N = 1,024: grace + 150 ms")
        if len(series) > 1:
            left.axhline(
                100,
                color="purple",
                linewidth=0.8,
                linestyle=":",
                label="crash goal: grace + 100 ms",
            )
        left.set_xscale("log", base=2)
        left.set_xticks(sizes, [str(n) for n in sizes])
        left.set_ylim(bottom=0)
        left.legend(fontsize=7, loc="upper left")
    left.set_xlabel("sessions torn down at once (N)")
    left.set_ylabel(f"ms past the grace ({grace:g} s) until all gone")
    left.set_title("Teardown stress: cancel to all gone (median, min-max)")

    ratios = scenarios.get("throughput", {}).get("data", {}).get("ratios", {})
    if ratios:
        bars = [
            ("trio-pty\nzeros", ratios.get("zeros"), 0.9),
            ("trio-pty\ntext", ratios.get("text"), 0.8),
            ("trio-pty\n16 at once*", ratios.get("16 sessions"), None),
            ("ptyprocess\nzeros", ratios.get("ptyprocess zeros"), None),
            ("ptyprocess\ntext", ratios.get("ptyprocess text"), None),
        ]
        names = [b[0] for b in bars]
        values = [b[1] if b[1] is not None else 0.0 for b in bars]
        colours = ["tab:blue"] * 3 + ["tab:grey"] * 2
        right.bar(names, values, color=colours)
        for index, (_, value, goal) in enumerate(bars):
            if value is not None:
                right.text(index, value + 0.02, f"{value:.2f}x", ha="center", fontsize=8)
            if goal is not None:
                right.plot(
                    [index - 0.4, index + 0.4],
                    [goal, goal],
                    color="green",
                    linestyle="--",
                    linewidth=1,
                )
        right.axhline(1.0, color="black", linewidth=0.8)
        right.set_ylim(0, max(1.15, max(values) + 0.15))
    right.set_ylabel("throughput / raw os.read loop, same run")
    right.set_xlabel("* 16 sessions at once: against one raw epoll loop over 16 PTYs", fontsize=8)
    right.set_title("Output throughput ratios (green: goals)")
    meta = payload["meta"]
    figure.suptitle(
        f"trio-pty benchmarks, {meta.get('mode')} mode, {meta.get('date')}, "
        f"{meta.get('cpu_count')} CPUs",
        fontsize=10,
    )
    figure.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_docs(results_path: str) -> None:
    with open(results_path) as handle:
        payload = json.load(handle)
    with open(DOC, "w") as handle:
        handle.write(markdown(payload, results_path))
    plot(payload, IMAGE)
    print(f"wrote {os.path.relpath(DOC)} and {os.path.relpath(IMAGE)}", file=sys.stderr)


if __name__ == "__main__":
    write_docs(
        sys.argv[1]
        if len(sys.argv) > 1
        else os.path.join(REPO, "benchmarks", "results", "latest.json")
    )
