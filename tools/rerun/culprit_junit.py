"""A dispatched culprit probe's error signature, from the JUnit its run publishes (docs/culprit.md).

rerun-test-dispatch.yml uploads ``reports/`` (``junit-rerun.xml``, ``runner.txt``) as the run's
artifact. `failed_signature` lists the run's artifacts (GitHub's "list workflow run artifacts"),
downloads each archive ("download an artifact": a zip) and reads its XML reports with
`ci.commands.culprit_local.junit_signature`, the local runner's reader, so both runners give one
signature for one failure. A run without a readable report is pass/fail evidence only: the
signature is "" and the problem says why, in words the answer prints.
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


@dataclass(frozen=True)
class Signature:
    """A failed run's error signature (`junit_signature`), "" when none could be read, and then why."""

    signature: str
    problem: str = ""


def failed_signature(client: GitHubAPI, repo: str, run_id: int) -> Signature:
    """The error signature of the first failed test in run ``run_id``'s JUnit artifact. Never raises
    for what GitHub answers: a missing, expired, oversized or unreadable artifact, or a report that
    names no failure with text, is a `Signature` with a problem."""
    try:
        artifacts = [a for a in client.run_artifacts(repo, run_id) if not a.expired]
    except GitHubError as exc:
        return Signature("", f"its artifacts could not be listed ({exc})")
    if not artifacts:
        return Signature("", "it published no JUnit artifact (none, or expired)")
    problems = []
    for artifact in artifacts:
        if artifact.size > MAX_REPORT_BYTES:
            problems.append(f"artifact {artifact.name} is over {MAX_REPORT_BYTES >> 20} MiB")
            continue
        try:
            found = _archive_signature(client.download_artifact(repo, artifact.id))
        except GitHubError as exc:
            problems.append(f"artifact {artifact.name} could not be downloaded ({exc.reason or exc})")
            continue
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            problems.append(f"artifact {artifact.name} is not a readable zip ({exc})")
            continue
        if found:
            return Signature(found)
        problems.append(f"artifact {artifact.name} holds no JUnit report naming a failed test")
    return Signature("", "; ".join(problems))


def _archive_signature(data: bytes) -> str:
    """The signature of the first XML report in the zip ``data`` that names a failure, else ""."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive, tempfile.TemporaryDirectory(prefix="culprit-junit-") as tmp:
        for member in sorted(archive.infolist(), key=lambda m: m.filename):
            if member.is_dir() or not member.filename.endswith(".xml") or member.file_size > MAX_REPORT_BYTES:
                continue
            report = Path(tmp) / "report.xml"
            report.write_bytes(archive.read(member))
            if found := junit_signature(report):
                return found
    return ""


__all__ = ["Signature", "failed_signature"]
