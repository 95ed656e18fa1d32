"""The protocol fuzzer of `tests/test_rpc_fuzz.py` (helpers only; the tests are there).

Hypothesis drives the fuzz from a worker thread (`trio.from_thread.run`), so one server and
one guard session live through all the examples of a test, and each example is a batch of
frames sent on one connection (reused while it stays open). The server only allows `cat`,
`true` and bash to run (a RulesAuthorizer), and bash only to be sent `true` or `cat` (so
`pty.run`, `pty.commands`, reads of a command and prompt waits meet a real shell, and nothing
else runs), with small waits and grace periods, so nothing the fuzz sends can start
anything heavy or wait long. Each batch gets its own owner, `cat` and shell session (named
through placeholders in the generated frames), removed after it.
"""
