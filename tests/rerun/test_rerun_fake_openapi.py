"""The dev-time contract check of the fake GitHub (`tools.rerun.fake_openapi`), on a small
OpenAPI description written here; ``$RERUN_GITHUB_OPENAPI`` runs the rerun tests against GitHub's."""

from __future__ import annotations

import json
from pathlib import Path

import requests

from tools.rerun.fake_github import FakeGitHub
from tools.rerun.fake_openapi import Contract
from tools.rerun.fake_server import serve

from rerun_support import TOKEN

RUN = {"type": "object", "required": ["id", "head_sha"],
       "properties": {"id": {"type": "integer"}, "head_sha": {"type": "string"},
                      "conclusion": {"type": "string", "nullable": True}}}
SPEC = {"openapi": "3.0.3", "paths": {
    "/repos/{owner}/{repo}/actions/runs/{run_id}": {"get": {
        "parameters": [{"name": "exclude_pull_requests", "in": "query", "schema": {"type": "boolean"}}],
        "responses": {"200": {"content": {"application/json": {"schema": RUN}}}, "404": {}}}},
    "/repos/{owner}/{repo}/actions/runs/{run_id}/rerun-failed-jobs": {"post": {
        "requestBody": {"content": {"application/json": {"schema": {
            "type": "object", "properties": {"enable_debug_logging": {"type": "boolean"}}}}}},
        "responses": {"201": {"content": {"application/json": {"schema": {"type": "object"}}}}}}}}}


def test_the_contract_names_every_disagreement() -> None:
    contract = Contract(SPEC)
    path = "/repos/o/r/actions/runs/7"
    assert contract.check("GET", path, {}, None, 200, {"id": 7, "conclusion": None}) == []  # nullable; partial
    assert contract.check("GET", path, {"exclude_pull_requests": ["true"]}, None, 404, None) == []
    assert contract.check("GET", path, {}, None, 200, {"id": "7"}) == [
        f"GET {path} (/repos/{{owner}}/{{repo}}/actions/runs/{{run_id}}) -> 200: id: '7' is not of type 'integer'"]
    assert "query exclude_pull_requests='yes'" in contract.check(
        "GET", path, {"exclude_pull_requests": ["yes"]}, None, 200, {"id": 7})[0]
    assert "query parameter 'page' is not documented" in contract.check("GET", path, {"page": ["1"]}, None, 200, {})[0]
    assert "status 500 is not documented" in contract.check("GET", path, {}, None, 500, {})[0]
    assert contract.check("GET", path, {}, None, 500, {}, scripted=True) == []  # GitHub's 5xx are everywhere
    assert contract.check("GET", "/repos/o/r/actions/runs", {}, None, 200, {}) == [
        "GET /repos/o/r/actions/runs: GitHub has no such operation"]
    rerun = contract.check("POST", path + "/rerun-failed-jobs", {}, {"enable_debug_logging": 1}, 201, {})
    assert rerun and "enable_debug_logging: 1 is not of type 'boolean'" in rerun[0]  # the most literal template
    assert Contract(SPEC, require_all=True).check("GET", path, {}, None, 200, {"id": 7})[0].endswith(
        "'head_sha' is a required property")


def test_the_fake_records_what_disagrees(tmp_path: Path) -> None:
    (tmp_path / "spec.json").write_text(json.dumps(SPEC), encoding="utf-8")
    fake = FakeGitHub(token=TOKEN)
    fake.contract = Contract.load(tmp_path / "spec.json")
    run = fake.add_run("a" * 40, "unit")
    with serve(fake) as url:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert requests.get(f"{url}/repos/{fake.repo}/actions/runs/{run.id}", headers=auth, timeout=5).ok
        assert fake.contract_problems == []
        requests.get(f"{url}/repos/{fake.repo}/pulls/1", headers=auth, timeout=5)
        with fake.off_contract():
            requests.get(f"{url}/repos/{fake.repo}/issues/1/comments", headers=auth, timeout=5)
    assert fake.contract_problems == [f"GET /repos/{fake.repo}/pulls/1: GitHub has no such operation"]
