"""A curated mutation harness: deliberate bugs, each in a place where a guarantee lives, and
the tests that must catch them.

`python -m tests.mutations` copies the repository to a temporary directory, checks that the
chosen tests pass there, then applies one mutation at a time (a small patch matched exactly:
if the code it names moved, the run stops and says which entry and what text it looked for),
runs only that mutation's tests against the mutated copy, and puts the code back. It prints
a table and a last line `mutations: N/M caught`; the exit status is 0 only when every
mutation was caught. `--quick` runs the fixed subset CI runs, `--only NAME` some entries,
`--list` shows the catalogue (`tests/mutations/catalogue.py`; docs/guarantees.md names the
mutation behind each promise).

Why not mutmut: it generates mutations by operator (thousands, mostly in code no guarantee
depends on) and runs them through its own trampolines in the imported modules; ours are a
short list of bugs someone could plausibly write, each aimed at one promise, and the code
under test runs for real in subprocesses (`trio-pty serve`, the keeper, setsid children),
which import the package from disk: a plain copy of the tree with the patched file in it is
the simplest thing that every one of them sees.
"""
