"""The test history: every JUnit report with its run's identity, what it says about flakiness, and
whose each failure is.

`store` (one schema and query set for SQLite and PostgreSQL, versioned migrations), `ingest`
(idempotent, one transaction per report), `classify` (broken vs failed, failure fingerprints),
`errors` (a failure's meaningful line, generic or not, its infra cause), `beta` (the Beta
distribution's quantiles, standard library only), `flaky` (the evidence rule and the score),
`quarantine` (what `ci quarantine` should change), `verdict` (broken on main, flaky, infra or new,
with `mainline`, `runners` and `run_results`). See docs/history.md.
"""
