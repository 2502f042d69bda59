"""A dispatched culprit probe's error signature, from the JUnit its run publishes (docs/culprit.md).

rerun-test-dispatch.yml uploads ``reports/`` (``junit-rerun.xml``, ``runner.txt``) as the run's
artifact. `failed_signature` lists the run's artifacts (GitHub's "list workflow run artifacts"),
downloads each archive ("download an artifact": a zip) and reads its XML reports with
`ci.commands.culprit_local.junit_signature`, the local runner's reader, so both runners give one
signature for one failure. A run without a readable report is pass/fail evidence only: the
signature is "" and the problem says why, in words the answer prints. That is said only on a
definitive answer (none published, expired, over the limit, not a zip, no report); a GitHub call
that still fails after the client's retries (a 5xx, a reset, a timeout) is `ArtifactUnavailable`:
the caller leaves the run unread, to be read again.

At most `MAX_ARCHIVES` archives are downloaded per run (the workflow uploads one per attempt), so
a failed run costs at most `SIGNATURE_REQUESTS` GitHub requests (`tools.rerun.budget`). A member is
read through a bounded stream: never more than ``limit`` bytes of it reach the disk, and never more
than ``limit`` bytes of one archive are unpacked in all, whatever sizes its headers declare.
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ci.commands.culprit_local import junit_signature
from ci.regular_file import MAX_REPORT_BYTES
from tools.rerun.github import GitHubAPI, GitHubError

MAX_ARCHIVES = 2
SIGNATURE_REQUESTS = 1 + MAX_ARCHIVES  # list the run's artifacts, download up to MAX_ARCHIVES
_CHUNK = 1 << 16


class ArtifactUnavailable(RuntimeError):
    """GitHub did not answer whether a run has a readable artifact (the client's retries ran out on
    a transient failure): nothing is known yet, so nothing should be journalled for good."""


@dataclass(frozen=True)
class Signature:
    """A failed run's error signature (`junit_signature`), "" when none could be read, and then why."""

    signature: str
    problem: str = ""


def failed_signature(client: GitHubAPI, repo: str, run_id: int, limit: int = MAX_REPORT_BYTES) -> Signature:
    """The error signature of the first failed test in run ``run_id``'s JUnit artifact. A missing,
    expired, oversized (``limit`` bytes, the archive or what it unpacks to) or unreadable artifact,
    or a report that names no failure with text, is a `Signature` with a problem. A GitHub call that
    failed transiently even after the client's retries raises `ArtifactUnavailable`."""
    try:
        artifacts = [a for a in client.run_artifacts(repo, run_id) if not a.expired]
    except GitHubError as exc:
        if exc.transient:
            raise ArtifactUnavailable(f"its artifacts could not be listed ({exc})") from None
        return Signature("", f"its artifacts could not be listed ({exc})")
    if not artifacts:
        return Signature("", "it published no JUnit artifact (none, or expired)")
    problems = []
    for artifact in artifacts[:MAX_ARCHIVES]:
        if artifact.size > limit:
            problems.append(f"artifact {artifact.name} is over {_size(limit)}")
            continue
        try:
            found = _archive_signature(client.download_artifact(repo, artifact.id), limit)
        except GitHubError as exc:
            if exc.transient:
                raise ArtifactUnavailable(f"artifact {artifact.name} could not be downloaded ({exc})") from None
            problems.append(f"artifact {artifact.name} could not be downloaded ({exc.reason or exc})")
            continue
        except _OverLimit:
            problems.append(f"artifact {artifact.name} unpacks to over {_size(limit)}")
            continue
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            problems.append(f"artifact {artifact.name} is not a readable zip ({exc})")
            continue
        if found:
            return Signature(found)
        problems.append(f"artifact {artifact.name} holds no JUnit report naming a failed test")
    return Signature("", "; ".join(problems))


class _OverLimit(Exception):
    """An archive unpacks to more than the limit."""


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"


def _archive_signature(data: bytes, limit: int) -> str:
    """The signature of the first XML report in the zip ``data`` that names a failure, else "".
    `_OverLimit` when the reports read up to there declare more than ``limit`` bytes, or once more
    than that came out of the stream, whatever they declared."""
    left = limit
    with zipfile.ZipFile(io.BytesIO(data)) as archive, tempfile.TemporaryDirectory(prefix="culprit-junit-") as tmp:
        for member in sorted(archive.infolist(), key=lambda m: m.filename):
            if member.is_dir() or not member.filename.endswith(".xml"):
                continue
            if member.file_size > left:
                raise _OverLimit()
            report = Path(tmp) / "report.xml"
            with archive.open(member) as stream, report.open("wb") as out:
                while chunk := stream.read(min(_CHUNK, left + 1)):
                    left -= len(chunk)
                    if left < 0:
                        raise _OverLimit()
                    out.write(chunk)
            if found := junit_signature(report):
                return found
    return ""


__all__ = ["ArtifactUnavailable", "MAX_ARCHIVES", "SIGNATURE_REQUESTS", "Signature", "failed_signature"]
