"""The history schema, as numbered migrations (one text for SQLite and PostgreSQL).

Contract: `MIGRATIONS[i]` takes the schema from version i to i + 1; a migration is never edited
once released, only followed by a new one. ``{id}`` and ``{float}`` are the only dialect tokens
(`ci.history.store.Dialect` fills them); everything else is SQL both databases accept.

Tables: ``reports`` (one row per ingested JUnit file with its run's identity; ``report_key`` is
unique and makes ingest idempotent), ``nodes`` (a test node id once), ``cases`` (one row per
attempt of a test in a report), ``schema_version``. ``cases`` is keyed report first, so a report's
rows are appended at the end of the key: keyed node first, every report would touch one index page
per test (measured: 14,000 rows/s against 68,000 at 300,000 rows on SQLite, and falling). A node's
history is read as one key lookup per report instead, and only for the nodes the partial index
``cases_failed`` names. ``cases`` carries no foreign keys: its rows are written only with
their report, in one transaction, and ids come from the same transaction; a key check per row
would halve PostgreSQL's ingest rate (measured: bench/history.py) for nothing.

Migration 2 (verdicts, docs/history.md#verdicts): ``reports.author`` (who pushed or opened the pull
request), ``reports.base_sha`` (a pull request's merge base, '' when unknown) and ``reports.scored``
(1: the report may enter flakiness scores, quarantine and runner health; 0: its JUnit was written by
code nobody reviewed yet, a pull request's, and serves only that run's verdicts);
``cases.error`` (the first meaningful error line, as written, bounded) and ``cases.infra`` (the
runner-level cause it names, `ci.history.errors.infra_kind`, '' for none), with a partial index on
the infra failures so a runner's health is read without scanning every case.

Migration 3 (runtime dependency maps, docs/selection.md): ``depmaps`` (one row per ingested map
file) and ``depmap_tests`` (one row per test file in it).

Migration 4 (line-level maps, map format version 2): ``depmaps.map_version``, ``depmaps.map_sha``
(the commit the map's line numbers are of, '' when unknown), ``depmaps.shared`` and
``depmap_tests.lines`` (JSON objects of path -> line ranges, '' for a version-1 map).

Migration 5 (a map's facts, format version 3, `ci observe`): ``depmap_tests.duration_s`` (NULL
when the map has none), ``depmap_tests.outcome`` ('' for none) and ``depmap_tests.skip_reasons``
(a JSON list of strings, '' for none).

Migration 6 (culprit searches, docs/culprit.md#automatic-requests-ci-culprit-requests): ``culprits``,
one row per searched window (repo, tier, test, good, bad: unique, so a window is requested once),
written when the search is requested (``requested_at``; '' for a search started by hand) and
completed with its answer (``culprit`` '' until then).

Migration 7 (merge queues, docs/history.md#merge-queues): ``reports.batch``, a merge_group run's
pull request numbers, space-separated ('' for every other run, and for a batch not known).

Migration 8 (lines per node id, map format version 4, `ci observe --by-test`):
``depmap_tests.by_test`` (the entry's ``by_test`` object as the map writes it, '' for none).
"""

from __future__ import annotations

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE reports (
            id {id},
            report_key TEXT NOT NULL UNIQUE,
            content_hash TEXT NOT NULL,
            source TEXT NOT NULL,
            repo TEXT NOT NULL,
            sha TEXT NOT NULL,
            pr INTEGER,
            event TEXT NOT NULL,
            tier TEXT NOT NULL,
            runner TEXT NOT NULL,
            shard TEXT NOT NULL,
            run_id TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            run_url TEXT NOT NULL,
            cases INTEGER NOT NULL,
            attempts INTEGER NOT NULL,
            ingested_at TEXT NOT NULL
        )""",
        "CREATE INDEX reports_sha ON reports (repo, sha)",
        """CREATE TABLE nodes (
            id {id},
            node TEXT NOT NULL UNIQUE,
            file TEXT NOT NULL
        )""",
        """CREATE TABLE cases (
            node_id BIGINT NOT NULL,
            report_id BIGINT NOT NULL,
            attempt INTEGER NOT NULL,
            outcome TEXT NOT NULL,
            kind TEXT NOT NULL,
            time {float} NOT NULL,
            retried INTEGER NOT NULL,
            fingerprint TEXT NOT NULL,
            message TEXT NOT NULL,
            PRIMARY KEY (report_id, node_id, attempt)
        )""",
        "CREATE INDEX cases_failed ON cases (node_id) WHERE kind = 'fail'",
    ),
    (
        "ALTER TABLE reports ADD COLUMN author TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE reports ADD COLUMN base_sha TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE reports ADD COLUMN scored INTEGER NOT NULL DEFAULT 1",
        "CREATE INDEX reports_pr ON reports (pr) WHERE pr IS NOT NULL",
        "ALTER TABLE cases ADD COLUMN error TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE cases ADD COLUMN infra TEXT NOT NULL DEFAULT ''",
        "CREATE INDEX cases_infra ON cases (report_id) WHERE infra <> ''",
    ),
    # Runtime dependency maps (`ci.history.depmaps`): one row per ingested map file, one per test
    # file in it; ``executed`` / ``opened`` are newline-joined repo-relative paths.
    (
        """CREATE TABLE depmaps (
            id {id},
            map_key TEXT NOT NULL UNIQUE,
            source TEXT NOT NULL,
            repo TEXT NOT NULL,
            sha TEXT NOT NULL,
            event TEXT NOT NULL,
            tier TEXT NOT NULL,
            shard TEXT NOT NULL,
            run_id TEXT NOT NULL,
            run_url TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            ingested_at TEXT NOT NULL
        )""",
        "CREATE INDEX depmaps_tier ON depmaps (tier, recorded_at)",
        """CREATE TABLE depmap_tests (
            map_id BIGINT NOT NULL,
            test_file TEXT NOT NULL,
            complete INTEGER NOT NULL,
            items INTEGER NOT NULL,
            ran INTEGER NOT NULL,
            executed TEXT NOT NULL,
            opened TEXT NOT NULL,
            PRIMARY KEY (map_id, test_file)
        )""",
    ),
    (
        "ALTER TABLE depmaps ADD COLUMN map_version INTEGER NOT NULL DEFAULT 1",
        "ALTER TABLE depmaps ADD COLUMN map_sha TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE depmaps ADD COLUMN shared TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE depmap_tests ADD COLUMN lines TEXT NOT NULL DEFAULT ''",
    ),
    (
        "ALTER TABLE depmap_tests ADD COLUMN duration_s {float}",
        "ALTER TABLE depmap_tests ADD COLUMN outcome TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE depmap_tests ADD COLUMN skip_reasons TEXT NOT NULL DEFAULT ''",
    ),
    (
        """CREATE TABLE culprits (
            id {id},
            repo TEXT NOT NULL,
            tier TEXT NOT NULL,
            test TEXT NOT NULL,
            good TEXT NOT NULL,
            bad TEXT NOT NULL,
            budget INTEGER NOT NULL,
            runners INTEGER NOT NULL,
            candidates INTEGER NOT NULL,
            requested_at TEXT NOT NULL,
            culprit TEXT NOT NULL DEFAULT '',
            probability {float},
            runs INTEGER NOT NULL DEFAULT 0,
            stop TEXT NOT NULL DEFAULT '',
            found INTEGER NOT NULL DEFAULT 0,
            run_url TEXT NOT NULL DEFAULT '',
            run_links TEXT NOT NULL DEFAULT '',
            answered_at TEXT NOT NULL DEFAULT '',
            UNIQUE (repo, tier, test, good, bad)
        )""",
    ),
    ("ALTER TABLE reports ADD COLUMN batch TEXT NOT NULL DEFAULT ''",),
    ("ALTER TABLE depmap_tests ADD COLUMN by_test TEXT NOT NULL DEFAULT ''",),
)

SCHEMA_VERSION = len(MIGRATIONS)
