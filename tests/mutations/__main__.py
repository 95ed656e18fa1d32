"""`python -m tests.mutations [--quick] [--only NAME ...] [--list] [--timeout S]`"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .catalogue import MUTATIONS
from .harness import REPO, Outcome, baseline, check_imports, environment, make_copy, run_one
from .mutation import CodeMoved, Mutation


def choose(*, quick: bool, only: Sequence[str]) -> list[Mutation]:
    names = {mutation.name for mutation in MUTATIONS}
    unknown = sorted(set(only) - names)
    if unknown:
        raise SystemExit(f"unknown mutations: {', '.join(unknown)} (see --list)")
    return [
        mutation
        for mutation in MUTATIONS
        if (not only or mutation.name in only) and (not quick or mutation.quick)
    ]


def check_all(mutations: Sequence[Mutation]) -> None:
    """Every chosen patch applies to the code as it is: fail before anything runs."""
    problems = []
    for mutation in mutations:
        try:
            mutation.apply((REPO / mutation.path).read_text())
        except (CodeMoved, OSError) as exc:
            problems.append(str(exc))
    if problems:
        raise SystemExit("\n\n".join(problems))


def row(outcome: Outcome) -> str:
    name = outcome.mutation.name if outcome.mutation is not None else "(baseline)"
    detail = outcome.detail if len(outcome.detail) <= 240 else outcome.detail[:237] + "..."
    return f"| {name} | {outcome.verdict} | {outcome.seconds:.1f} s | {detail} |"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutations", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the fixed subset CI runs")
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME", help="these entries")
    parser.add_argument("--list", action="store_true", help="show the catalogue and stop")
    parser.add_argument(
        "--timeout", type=float, default=300, help="seconds per mutation (default 300)"
    )
    args = parser.parse_args(argv)
    chosen = choose(quick=args.quick, only=args.only)
    if args.list:
        for mutation in chosen:
            quick = " (quick)" if mutation.quick else ""
            print(f"{mutation.name}{quick}: {mutation.guarantee}")
            print(f"    {mutation.path}; caught by {', '.join(mutation.tests)}")
        return 0
    check_all(chosen)
    with tempfile.TemporaryDirectory(prefix="trio-pty-mutations-") as scratch:
        copy = make_copy(Path(scratch))
        env = environment(copy, Path(scratch) / "pycache")
        check_imports(copy, env)
        print("| mutation | verdict | time | what caught it |", flush=True)
        print("| --- | --- | --- | --- |", flush=True)
        first = baseline(copy, chosen, env)
        print(row(first), flush=True)
        if first.verdict != "passed":
            print("the tests fail without any mutation: no verdict would mean anything")
            return 2
        outcomes = []
        for mutation in chosen:
            outcome = run_one(copy, mutation, env, timeout=args.timeout)
            outcomes.append(outcome)
            print(row(outcome), flush=True)
    missed = [o.mutation.name for o in outcomes if not o.caught and o.mutation is not None]
    if missed:
        print(f"not caught: {', '.join(missed)}")
    print(f"mutations: {len(outcomes) - len(missed)}/{len(outcomes)} caught")
    return 0 if not missed else 1


sys.exit(main(sys.argv[1:]))
