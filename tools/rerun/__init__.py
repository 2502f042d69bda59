"""The pull-request bot: ``python -m tools.rerun {handle,serve,report}``.

Modules, one job each. Grammar: `comment_lines` (which lines are commands, look-alikes),
`commands` (arguments, ``--help``). Rules: `policy` (who may run what). Commands, one module each
over the `github.GitHubAPI` protocol: `cmd_rerun_test`, `cmd_rerun_tier`, `cmd_rerun_failed`
(planning into a `work.Work`), `dispatch` (dispatches with unique run-names, never sent twice);
``/culprit``: `cmd_culprit` (checked, one culprit.yml dispatch), `culprit_reply` (its reply, from
the claim to the answer), `culprit_dispatch` (the search's runner and the answer's writer).
Flow: `event` (the payload's fields), `handler` (claim, carry out, edit the reply), `replies` and
`runs_table` (every comment the bot writes), `report` (JUnit results into the reply), `headline`
(the reply's first sentence, from its rows), `verdicts` (the verdict column, from the history),
`wrap` (break opportunities, so the table fits a comment), `fit` (under GitHub's length). GitHub:
`rest` (timeouts, retries, redaction), `github` (typed endpoints), `secrets_file` (token files).
Server: `server` (HTTP, journal hand-off), `journal` (SQLite WAL), `workers` and
`worker_process` (handler threads, in a child process for ``serve``), `sync`. Test doubles:
`fake_github` (a stateful GitHub) and `fake_server` (over real HTTP, in a thread or a process).
"""
