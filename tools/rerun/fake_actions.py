"""The Actions part of the fake GitHub: workflow runs as GitHub records them, dispatches, re-runs.

What a run carries follows GitHub, not what would be convenient for the bot:

* ``head_sha`` / ``head_branch``: a ``pull_request`` run has the PR's head commit and branch; a
  run of ``pull_request_target``, ``issue_comment`` or ``workflow_dispatch`` (and ``schedule``,
  ``push``) has the commit and name of the branch the workflow ran from, the base/default branch
  for the first two and the dispatched ``ref`` for the last. So the runs API filtered by a PR's
  head SHA never lists that PR's ``pull_request_target`` runs.
* ``display_title``: the workflow's ``run-name`` evaluated against the run's contexts
  (`tools.rerun.fake_expressions`; ``github.event``/``github.event_name`` for an event,
  ``inputs`` for a dispatch), else the workflow's name.
* ``created_at``: when the fake created it (UTC, second precision); ``GET .../runs`` honours
  ``created=>=TIME``, ``event``, ``head_sha``, ``per_page`` (at most 100) and ``page``, newest
  first, and at most 1,000 results when filtered, as GitHub documents.

``GET .../runs/{id}/artifacts`` lists a run's artifacts (``name``, ``per_page``, ``page``), as
GitHub's "list workflow run artifacts"; ``GET .../artifacts/{id}/zip`` answers 302 to the archive
(GitHub's signed storage URL; here the fake's own ``/_fake/artifact-blobs/{id}``, served without
the token by `FakeGitHub.respond`), 410 once the artifact expired, as GitHub's "download an
artifact" documents.

``POST .../dispatches``: ``ref`` must be a branch the fake knows (else 422, as GitHub's "No ref
found"), at most 25 string ``inputs``; answers 204, or with ``return_run_details: true`` 200 and
``{workflow_run_id, run_url, html_url}`` (GitHub's published contract).
"""

from __future__ import annotations

import io
import itertools
import threading
import time
import zipfile
from dataclasses import dataclass, field
from typing import Any, Callable

from tools.rerun.fake_expressions import render

MAX_DISPATCH_INPUTS = 25  # since 2025-12-04 (10 before)
MAX_FILTERED_RESULTS = 1000  # GitHub's cap on a filtered runs listing
BASE_SHA = "ba5e" * 10  # the default branch's head in the fake
BASE_BRANCH_EVENTS = frozenset({"pull_request_target", "issue_comment", "workflow_dispatch", "schedule", "push"})
Response = tuple[int, dict[str, str], Any]


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class FakeRun:
    id: int
    name: str
    display_title: str
    event: str
    status: str
    conclusion: str | None
    head_sha: str
    workflow: str
    attempt: int = 1
    head_branch: str = "main"
    created_at: str = field(default_factory=now_iso)

    def to_json(self, repo: str) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "display_title": self.display_title, "event": self.event,
                "status": self.status, "conclusion": self.conclusion, "head_sha": self.head_sha,
                "head_branch": self.head_branch, "path": f".github/workflows/{self.workflow}",
                "run_attempt": self.attempt, "created_at": self.created_at,
                "html_url": f"https://github.com/{repo}/actions/runs/{self.id}",
                "url": f"https://api.github.com/repos/{repo}/actions/runs/{self.id}"}


@dataclass
class FakeArtifact:
    """One artifact of a run: its zip archive's bytes (``data``), as uploaded."""

    id: int
    run_id: int
    name: str
    data: bytes
    expired: bool = False
    created_at: str = field(default_factory=now_iso)

    def to_json(self, repo: str) -> dict[str, Any]:
        url = f"https://api.github.com/repos/{repo}/actions/artifacts/{self.id}"
        return {"id": self.id, "name": self.name, "size_in_bytes": len(self.data), "expired": self.expired,
                "url": url, "archive_download_url": f"{url}/zip", "created_at": self.created_at,
                "updated_at": self.created_at, "expires_at": None, "workflow_run": {"id": self.run_id}}


BLOB_PATH = "/_fake/artifact-blobs/"  # where the fake's 302 sends an archive download


def zipped(files: dict[str, str]) -> bytes:
    """A zip archive of ``files`` (name -> text), as upload-artifact stores a folder."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return out.getvalue()


class FakeActions:
    """Mixin of `tools.rerun.fake_github.FakeGitHub`: runs, dispatches and re-runs. Needs the host's
    ``lock``, ``repo`` and ``default_branch``."""

    lock: threading.RLock
    repo: str
    default_branch: str

    def _init_actions(self, run_names: dict[str, str] | None, dispatch_run_name: str | None) -> None:
        self.branches: dict[str, str] = {}  # branch -> head SHA, besides the default one (at BASE_SHA)
        self.run_names = dict(run_names or {})  # workflow file -> run-name template
        self.dispatch_run_name = dispatch_run_name  # for dispatched workflows without their own entry
        self.dispatches: list[dict[str, Any]] = []
        self.runs: list[FakeRun] = []
        self.reruns: list[int] = []
        self._run_ids = itertools.count(7_000_000)
        self.artifacts: list[FakeArtifact] = []
        self._artifact_ids = itertools.count(900_000)

    def branch_sha(self, branch: str) -> str | None:
        """The head commit of ``branch`` (the default branch's is `BASE_SHA`), None if unknown."""
        return BASE_SHA if branch == self.default_branch else self.branches.get(branch)

    # -- setup -----------------------------------------------------------------------------------
    def add_run(self, head_sha: str, name: str, status: str = "completed", conclusion: str | None = "failure",
                workflow: str = "pr.yml", event: str = "pull_request", head_branch: str = "feature") -> FakeRun:
        """A ``pull_request`` run (or another event that carries the PR head) of ``head_sha``. The
        events that run on the base branch carry its SHA instead: use `trigger` for those."""
        if event in BASE_BRANCH_EVENTS:
            raise ValueError(f"a {event} run carries the base branch's SHA, not {head_sha[:12]}: use trigger()")
        return self._new_run(name, name, event, status, conclusion, head_sha, head_branch, workflow)

    def trigger(self, workflow: str, event: str, payload: dict[str, Any], status: str = "completed",
                conclusion: str | None = "failure") -> FakeRun:
        """The run GitHub starts for ``event`` (``pull_request_target`` or ``issue_comment``, with
        its webhook ``payload``) of a workflow on the default branch: the base branch's SHA and
        name, and the workflow's run-name evaluated against the event."""
        if event not in BASE_BRANCH_EVENTS - {"workflow_dispatch"}:
            raise ValueError(f"trigger() is for events that run on the base branch, not {event!r}")
        contexts = {"github": {"event": payload, "event_name": event, "ref": f"refs/heads/{self.default_branch}",
                               "sha": BASE_SHA}}
        title = render(self.run_names[workflow], contexts) if workflow in self.run_names else workflow
        return self._new_run(workflow, title, event, status, conclusion, BASE_SHA, self.default_branch, workflow)

    def add_artifact(self, run: FakeRun, name: str, data: bytes, expired: bool = False) -> FakeArtifact:
        """An artifact of ``run`` whose archive is ``data`` (`zipped`, or any bytes: a broken one)."""
        with self.lock:
            artifact = FakeArtifact(next(self._artifact_ids), run.id, name, data, expired)
            self.artifacts.append(artifact)
            return artifact

    def artifact_blob(self, path: str) -> Response:
        """The archive at ``BLOB_PATH + id``: 200 and its bytes, else 404."""
        tail = path.removeprefix(BLOB_PATH)
        with self.lock:
            found = next((a for a in self.artifacts if tail.isdigit() and a.id == int(tail) and not a.expired), None)
        if found is None:
            return 404, {}, {"message": "BlobNotFound"}
        return 200, {"Content-Type": "application/zip"}, found.data

    def _new_run(self, name: str, title: str, event: str, status: str, conclusion: str | None, head_sha: str,
                 head_branch: str, workflow: str) -> FakeRun:
        with self.lock:
            run = FakeRun(next(self._run_ids), name, title, event, status, conclusion, head_sha, workflow,
                          head_branch=head_branch)
            self.runs.append(run)
            return run

    # -- routing ---------------------------------------------------------------------------------
    def _route_actions(self, method: str, tail: str, query: dict[str, list[str]], body: Any) -> Response | None:
        """Answer ``/repos/{repo}/actions/...`` (``tail`` is what follows ``/actions``), or None."""
        parts = tail.strip("/").split("/")
        if method == "POST" and len(parts) == 3 and parts[0] == "workflows" and parts[2] == "dispatches":
            return self._dispatch(parts[1], body)
        if method == "GET" and len(parts) == 3 and parts[0] == "workflows" and parts[2] == "runs":
            event = query.get("event", [None])[0]
            return self._runs(lambda r: r.workflow == parts[1] and event in (None, r.event), query)
        if method == "GET" and parts == ["runs"]:
            sha, event = query.get("head_sha", [None])[0], query.get("event", [None])[0]
            return self._runs(lambda r: sha in (None, r.head_sha) and event in (None, r.event), query)
        if method == "GET" and len(parts) == 2 and parts[0] == "runs" and parts[1].isdigit():
            run = self._find_run(int(parts[1]))
            return (200, {}, run.to_json(self.repo)) if run else (404, {}, {"message": "Not Found"})
        if method == "GET" and len(parts) == 3 and parts[0] == "runs" and parts[1].isdigit() \
                and parts[2] == "artifacts":
            return self._run_artifacts(int(parts[1]), query)
        if method == "GET" and len(parts) == 3 and parts[0] == "artifacts" and parts[1].isdigit():
            return self._download(int(parts[1]), parts[2])
        if method == "POST" and len(parts) == 3 and parts[0] == "runs" and parts[1].isdigit() \
                and parts[2] == "rerun-failed-jobs":
            return self._rerun(int(parts[1]))
        return None

    def _dispatch(self, workflow: str, body: Any) -> Response:
        if not isinstance(body, dict) or not isinstance(body.get("ref"), str):
            return 422, {}, {"message": "Invalid request.\n\n\"ref\" wasn't supplied."}
        ref = body["ref"].removeprefix("refs/heads/")
        sha = self.branch_sha(ref)
        if sha is None:
            return 422, {}, {"message": f"No ref found for: {body['ref']}"}
        inputs = body.get("inputs") or {}
        if not isinstance(inputs, dict) or len(inputs) > MAX_DISPATCH_INPUTS:
            return 422, {}, {"message": f"you may only define up to {MAX_DISPATCH_INPUTS} `inputs` for a "
                                        f"workflow_dispatch event"}
        if not all(isinstance(v, str) for v in inputs.values()):
            return 422, {}, {"message": "inputs must be strings"}
        details = body.get("return_run_details", False)
        if not isinstance(details, bool):
            return 422, {}, {"message": "return_run_details must be a boolean"}
        template = self.run_names.get(workflow, self.dispatch_run_name)
        title = render(template, {"inputs": inputs, "github": {"event_name": "workflow_dispatch"}}) if template \
            else workflow
        with self.lock:
            self.dispatches.append({"workflow": workflow, **body, "at": time.monotonic()})
            run = self._new_run(workflow, title, "workflow_dispatch", "queued", None, sha, ref, workflow).to_json(self.repo)
        if not details:
            return 204, {}, None
        return 200, {}, {"workflow_run_id": run["id"], "run_url": run["url"], "html_url": run["html_url"]}

    def _runs(self, keep: Callable[[FakeRun], bool], query: dict[str, list[str]]) -> Response:
        try:
            per_page = min(int(query.get("per_page", ["30"])[0]), 100)
            page = int(query.get("page", ["1"])[0])
        except ValueError:
            return 422, {}, {"message": "per_page and page must be integers"}
        created = query.get("created", [None])[0]
        if created is not None and not created.startswith(">="):
            return 422, {}, {"message": f"the fake only knows created=>=TIME, got {created!r}"}
        since = created[2:] if created else None
        filtered = any(k in query for k in ("actor", "branch", "check_suite_id", "created", "event", "head_sha",
                                            "status"))
        with self.lock:
            runs = [r for r in reversed(self.runs)  # newest first, as GitHub lists them
                    if keep(r) and (since is None or r.created_at >= since)]
            total = len(runs)
            if filtered:
                runs = runs[:MAX_FILTERED_RESULTS]
            chunk = [r.to_json(self.repo) for r in runs[(page - 1) * per_page: page * per_page]]
        return 200, {}, {"total_count": total, "workflow_runs": chunk}

    def _run_artifacts(self, run_id: int, query: dict[str, list[str]]) -> Response:
        if self._find_run(run_id) is None:
            return 404, {}, {"message": "Not Found"}
        name = query.get("name", [None])[0]
        per_page, page = min(int(query.get("per_page", ["30"])[0]), 100), int(query.get("page", ["1"])[0])
        with self.lock:
            found = [a for a in reversed(self.artifacts) if a.run_id == run_id and name in (None, a.name)]
            chunk = [a.to_json(self.repo) for a in found[(page - 1) * per_page: page * per_page]]
        return 200, {}, {"total_count": len(found), "artifacts": chunk}

    def _download(self, artifact_id: int, archive_format: str) -> Response:
        with self.lock:
            found = next((a for a in self.artifacts if a.id == artifact_id), None)
        if found is None or archive_format != "zip":
            return 404, {}, {"message": "Not Found"}
        if found.expired:
            return 410, {}, {"message": "Artifact has expired"}
        return 302, {"Location": f"{BLOB_PATH}{artifact_id}"}, None

    def _find_run(self, run_id: int) -> FakeRun | None:
        with self.lock:
            return next((r for r in self.runs if r.id == run_id), None)

    def _rerun(self, run_id: int) -> Response:
        run = self._find_run(run_id)
        if run is None:
            return 404, {}, {"message": "Not Found"}
        with self.lock:
            if run.status != "completed" or run.conclusion not in ("failure", "timed_out", "cancelled"):
                return 403, {}, {"message": f"This workflow run cannot be rerun ({run.status}, {run.conclusion})"}
            run.status, run.conclusion, run.attempt = "queued", None, run.attempt + 1
            self.reruns.append(run_id)
        return 201, {}, {}


__all__ = ["BASE_BRANCH_EVENTS", "BASE_SHA", "BLOB_PATH", "FakeActions", "FakeArtifact", "FakeRun", "zipped", "MAX_DISPATCH_INPUTS", "now_iso"]
