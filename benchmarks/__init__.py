"""trio-pty benchmarks: `python -m benchmarks` (full) or `python -m benchmarks --quick`.

One module per scenario (teardown, spawn_latency, throughput, reading, rpc, memory), a
shared harness (Context, Result, progress), stats (summaries, interleaving), process
accounting (procs), the runner, and the report (docs/benchmarks.md and its plot).
"""
