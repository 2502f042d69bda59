"""The test history: every JUnit report with its run's identity, and what it says about flakiness.

`store` (one schema and query set for SQLite and PostgreSQL, versioned migrations), `ingest`
(idempotent, one transaction per report), `classify` (broken vs failed, failure fingerprints),
`beta` (the Beta distribution's quantiles, standard library only), `flaky` (the evidence rule
and the score) and `quarantine` (what `ci quarantine` should change). See docs/history.md.
"""
