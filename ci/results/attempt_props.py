"""The JUnit testcase properties that carry a rerun test's failed attempts: `ci.pytest_attempts`
writes them in the pytest process, `ci.results.junit` reads them back. A module of its own so a
pytest process imports these names without the report reader (and its XML parser)."""

# How much of a failure's text an `ci.results.junit.Attempt` keeps (the end: the exception line is last).
MAX_DETAIL_CHARS = 4000
# Testcase properties `ci.pytest_attempts` writes on each failed attempt.
ATTEMPT_OUTCOME, ATTEMPT_ERROR, ATTEMPT_TEXT = "ci.attempt.outcome", "ci.attempt.error", "ci.attempt.text"
