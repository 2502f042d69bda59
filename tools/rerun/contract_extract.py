"""Build `tools/rerun/github_contract/`: the part of GitHub's published API description the fake serves.

``python -m tools.rerun.contract_extract`` downloads the three pinned npm packages (`PINNED`; the
tarball's sha512 must match the ``integrity`` the npm registry publishes for that version), caches
them under ``.ci-cache/npm/`` and writes:

* ``openapi.json``: from ``@octokit/openapi``'s ``generated/api.github.com.deref.json`` (every
  ``$ref`` resolved), only the `OPERATIONS` the fake answers, each with its parameters, JSON
  request body schema, and per status its JSON response schema and GitHub's example answer.
  Schemas keep what validation reads (types, ``required``, ``enum``, ``nullable``, ...) and lose
  prose (``description``, ``title``, ``example`` ...), which keeps the file small;
* ``webhook_examples.json``: from ``@octokit/webhooks-examples``, every ``issue_comment`` example
  and those of `WEBHOOK_EXAMPLES`' other events, as ``[{"event", "payload"}]``;
* ``webhooks.json``: from ``@octokit/openapi-webhooks``' ``generated/api.github.com.json``, the
  payload schema of each of `WEBHOOK_SCHEMAS` (``{"<event>.<action>": schema}``), every ``$ref``
  resolved (a recursive one becomes ``{}``) and prose dropped;
* ``PINNED.json``: the packages, versions and integrity the files came from.

``tests/rerun/test_rerun_contract_extract.py`` rebuilds them from the packages and compares; to
bump a package, change `PINNED` (version and the registry's ``integrity``) and run the module.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "github_contract"
CACHE = ROOT / ".ci-cache" / "npm"
REGISTRY = "https://registry.npmjs.org"

PINNED = {
    "@octokit/openapi": {
        "version": "23.0.2",
        "integrity": "sha512-pV8M7L9GY23AybNvTmo2nyjmpmnt6+2sRE/tqr0ZLQcPS4lnw7u5eZGNmwRNkBC3D7gZXbFx5AHzLUVRBXGDhg==",
        "file": "package/generated/api.github.com.deref.json"},
    "@octokit/webhooks-examples": {
        "version": "7.6.1",
        "integrity": "sha512-De6U3XB6O3DtCa7bKgCMzTHdeopqqZ6SNivMYJnK65ierKL1AnNIA0tkRYCRS7lwGT792d+Ps1WbfHlso6MynQ==",
        "file": "package/api.github.com/index.json"},
    "@octokit/openapi-webhooks": {
        "version": "12.1.0",
        "integrity": "sha512-Z5eDsLCUNbx1zHpZb1LNQirADqdMTvWJQ/deahi0ws+tWWnwHXB+Pr4jfmM9OrETS9Y5iW8ZRu1fdbudObhLrg==",
        "file": "package/generated/api.github.com.json"},
}

# (method, path template): every operation tools/rerun/fake_github.py answers.
OPERATIONS = [
    ("get", "/repos/{owner}/{repo}"),
    ("get", "/repos/{owner}/{repo}/collaborators/{username}/permission"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("get", "/repos/{owner}/{repo}/commits/{commit_sha}/pulls"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("get", "/repos/{owner}/{repo}/issues/comments/{comment_id}"),
    ("patch", "/repos/{owner}/{repo}/issues/comments/{comment_id}"),
    ("post", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"),
    ("get", "/repos/{owner}/{repo}/hooks/{hook_id}/deliveries"),
    ("post", "/repos/{owner}/{repo}/hooks/{hook_id}/deliveries/{delivery_id}/attempts"),
    ("get", "/app/hook/deliveries"),
    ("post", "/app/hook/deliveries/{delivery_id}/attempts"),
    ("post", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches"),
    ("get", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs"),
    ("get", "/repos/{owner}/{repo}/actions/runs"),
    ("get", "/repos/{owner}/{repo}/actions/runs/{run_id}"),
    ("post", "/repos/{owner}/{repo}/actions/runs/{run_id}/rerun-failed-jobs"),
    ("get", "/repos/{owner}/{repo}/actions/runs/{run_id}/artifacts"),
    ("get", "/repos/{owner}/{repo}/actions/artifacts/{artifact_id}/{archive_format}"),
]

# event -> how many of its examples to keep (None: all); issue_comment is the bot's own event.
WEBHOOK_EXAMPLES = {"issue_comment": None, "ping": None, "pull_request": 2, "workflow_run": 2}

# "<event>.<action>" -> the webhook of @octokit/openapi-webhooks whose payload schema is kept.
WEBHOOK_SCHEMAS = {"workflow_run.completed": "workflow-run-completed"}

_PROSE = {"description", "title", "example", "examples", "externalDocs", "summary", "deprecated", "readOnly",
          "writeOnly", "discriminator"}


def tarball(package: str, cache: Path = CACHE) -> Path:
    """The pinned tarball of ``package``, downloaded once into ``cache`` and integrity-checked."""
    pin = PINNED[package]
    name = package.split("/")[-1]
    path = cache / f"{name}-{pin['version']}.tgz"
    if not path.exists() or _integrity(path.read_bytes()) != pin["integrity"]:
        url = f"{REGISTRY}/{package}/-/{name}-{pin['version']}.tgz"
        with urllib.request.urlopen(url, timeout=120) as answer:
            data = answer.read()
        if _integrity(data) != pin["integrity"]:
            raise ValueError(f"{url}: sha512 {_integrity(data)} is not the pinned {pin['integrity']}")
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


def _integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def _member(package: str, cache: Path) -> Any:
    with tarfile.open(tarball(package, cache)) as tar:
        member = tar.extractfile(PINNED[package]["file"])
        assert member is not None
        return json.load(member)


def _schema(schema: Any) -> Any:
    """A schema without its prose; ``properties`` keep every name (a field may be called ``title``)."""
    if isinstance(schema, list):
        return [_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in _PROSE or key.startswith("x-"):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: _schema(sub) for name, sub in value.items()}
        else:
            out[key] = _schema(value)
    return out


def _resolved(schema: Any, components: dict[str, Any], seen: tuple[str, ...] = ()) -> Any:
    """``schema`` with every ``#/components/schemas/`` reference replaced by its target."""
    if isinstance(schema, list):
        return [_resolved(s, components, seen) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return {} if name in seen else _resolved(components[name], components, seen + (name,))
    return {key: _resolved(value, components, seen) for key, value in schema.items()}


def _operation(op: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": op["operationId"]}
    out["parameters"] = [{"name": p["name"], "in": p["in"], "required": p.get("required", False),
                          "schema": _schema(p.get("schema", {}))} for p in op.get("parameters", [])]
    body = ((op.get("requestBody") or {}).get("content") or {}).get("application/json")
    if body is not None:
        out["requestBody"] = {"required": op["requestBody"].get("required", False),
                              "content": {"application/json": {"schema": _schema(body.get("schema", {}))}}}
    responses = {}
    for status, answer in op["responses"].items():
        content = (answer.get("content") or {}).get("application/json")
        if content is None:
            responses[status] = {}
            continue
        kept: dict[str, Any] = {"schema": _schema(content.get("schema", {}))}
        example = next(iter((content.get("examples") or {}).values()), {}).get("value")
        if example is not None and status.startswith("2"):
            kept["example"] = example
        responses[status] = {"content": {"application/json": kept}}
    out["responses"] = responses
    return out


def build(cache: Path = CACHE) -> dict[str, str]:
    """file name -> its text, for every file of the extract."""
    spec = _member("@octokit/openapi", cache)
    paths: dict[str, dict[str, Any]] = {}
    for method, template in OPERATIONS:
        paths.setdefault(template, {})[method] = _operation(spec["paths"][template][method])
    openapi = {"openapi": spec["openapi"], "info": {"title": spec["info"]["title"], "version": spec["info"]["version"]},
               "paths": paths}
    events = {e["name"]: e["examples"] for e in _member("@octokit/webhooks-examples", cache)}
    hooks = [{"event": name, "payload": payload}
             for name, keep in WEBHOOK_EXAMPLES.items() for payload in events[name][:keep]]
    described = _member("@octokit/openapi-webhooks", cache)
    webhooks = {key: _schema(_resolved(described["webhooks"][name]["post"]["requestBody"]["content"]
                                       ["application/json"]["schema"], described["components"]["schemas"]))
                for key, name in WEBHOOK_SCHEMAS.items()}
    pinned = {name: {k: v for k, v in pin.items()} for name, pin in PINNED.items()}
    return {"openapi.json": _dump(openapi), "webhook_examples.json": _dump(hooks), "webhooks.json": _dump(webhooks),
            "PINNED.json": _dump(pinned)}


def _dump(value: Any) -> str:
    return json.dumps(value, indent=0, separators=(",", ":"), sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.rerun.contract_extract", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the folder to write (default: %(default)s)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in build().items():
        (args.out / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
