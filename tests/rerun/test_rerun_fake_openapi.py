"""The contract check of the fake GitHub (`tools.rerun.fake_openapi`): on a small OpenAPI
description written here, and on GitHub's (the committed extract every fake checks against)."""

from __future__ import annotations

import json
from pathlib import Path

import requests

from tools.rerun.fake_github import FakeGitHub
from tools.rerun.fake_openapi import OMIT, Contract, complete, published
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
        "GET /repos/o/r/actions/runs: no such operation in GitHub's description"]
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
    assert fake.contract_problems == [f"GET /repos/{fake.repo}/pulls/1: no such operation in GitHub's description"]


def test_the_published_contract_checks_path_parameters_bodies_and_whole_answers() -> None:
    contract = published()
    runs = "/repos/o/r/actions/runs/"
    assert "path run_id='abc': (top): 'abc' is not of type 'integer'" in contract.check(
        "GET", runs + "abc", {}, None, 404, {"message": "Not Found", "documentation_url": "x"})[0]
    post = contract.check("POST", "/repos/o/r/issues/1/comments", {}, None, 201,
                          contract.example("POST", "/repos/o/r/issues/1/comments", 201))
    assert post == ["POST /repos/o/r/issues/1/comments (/repos/{owner}/{repo}/issues/{issue_number}/comments): "
                    "the operation requires a JSON body, none was sent"]
    partial = contract.check("GET", runs + "7", {}, None, 200, {"id": 7, "head_sha": "a" * 40})
    assert any(p.endswith("'node_id' is a required property") for p in partial)  # every required field
    whole = complete({"id": 7, "pull_requests": [], "head_repository": {"full_name": "o/r"}},
                     contract.example("GET", runs + "7", 200))
    assert contract.check("GET", runs + "7", {}, None, 200, whole) == []
    nullable = contract.check("GET", runs + "7", {}, None, 200, {**whole, "head_repository": {"id": "x"}})
    assert nullable and all("head_repository" in p and "any of the given schemas" not in p for p in nullable)
    assert complete({"a": {"b": 1}, "c": OMIT, "d": [{"e": 2}]}, {"a": {"b": 0, "f": 3}, "c": 4, "d": [{"e": 0, "g": 5}]}) \
        == {"a": {"b": 1, "f": 3}, "d": [{"e": 2, "g": 5}]}


def test_an_answer_that_breaks_the_contract_is_a_500() -> None:
    fake = FakeGitHub(token=TOKEN)
    fake.add_pull(1, "a" * 40)
    fake.pulls[1]["number"] = "one"  # GitHub's pulls have integer numbers
    with serve(fake) as url:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        answer = requests.get(f"{url}/repos/{fake.repo}/pulls/1", headers=auth, timeout=5)
        assert answer.status_code == 500 and "number: 'one' is not of type 'integer'" in answer.json()["message"]
        assert requests.get(f"{url}/repos/{fake.repo}", headers=auth, timeout=5).ok
    assert [p.split(": ", 1)[1] for p in fake.contract_problems] == ["number: 'one' is not of type 'integer'"]


def test_a_request_cut_off_by_its_clients_death_is_no_request(fake, api_url: str) -> None:
    """A client killed between a POST's headers and its body (the kill -9 tests do this) is a
    broken connection, as GitHub sees it: the fake neither answers nor judges it against the
    contract, nor records it."""
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(api_url)
    before = len(fake.requests)
    with socket.create_connection((where.hostname, where.port), timeout=10) as conn:
        conn.sendall(b"POST /repos/acme/kv/issues/comments/1/reactions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"con")
        conn.shutdown(socket.SHUT_WR)
        assert conn.recv(1024) == b""  # closed, no answer
    assert fake.contract_problems == [] and len(fake.requests) == before
