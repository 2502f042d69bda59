"""Fixtures for the /rerun-test bot: a throw-away repository tree with its own registry.yaml, a fake
GitHub served over real HTTP on 127.0.0.1, and payload builders."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tools.rerun.fake_github import FakeGitHub
from tools.rerun.fake_openapi import ENV, Contract, published
from tools.rerun.fake_server import serve
from tools.rerun.dispatch import RunLookup
from tools.rerun.github import GitHubClient, RetryPolicy
from tools.rerun.handler import BotConfig, Handler

from rerun_support import HEAD_SHA, PR, REGISTRY, TOKEN, TREE_FILES, pr_workflow_run_names, workflow_run_name

# Short waits: the fake lists a run the moment it is dispatched.
FAST_LOOKUP = RunLookup(wait=0.3, link_wait=0.2, interval=0.02)


@pytest.fixture(scope="session")
def repo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    (root / "registry.yaml").write_text(REGISTRY, encoding="utf-8")
    for rel in TREE_FILES:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("def test_ok():\n    pass\n", encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def github_contract() -> Contract:
    """GitHub's OpenAPI description: the committed extract (`tools.rerun.fake_openapi.published`),
    or the file ``$RERUN_GITHUB_OPENAPI`` names (the whole published description, say)."""
    path = os.environ.get(ENV)
    return Contract.load(path, require_all=True) if path else published()


@pytest.fixture
def fake(github_contract: Contract) -> Iterator[FakeGitHub]:
    gh = FakeGitHub(token=TOKEN, run_name_template=workflow_run_name(), run_names=pr_workflow_run_names())
    gh.add_user("maintainer", "write", "maintain")
    gh.add_user("admin", "admin")
    gh.add_user("reader", "read", "triage")
    gh.add_pull(PR, HEAD_SHA)
    gh.contract = github_contract
    yield gh
    problems = sorted(set(gh.contract_problems))
    assert problems == [], "the fake or the client disagrees with GitHub's OpenAPI description:\n" + "\n".join(problems)


@pytest.fixture
def api_url(fake: FakeGitHub) -> Iterator[str]:
    with serve(fake) as url:
        yield url


class SleepRecorder:
    """Injected in place of time.sleep: records the waits and never blocks."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def make_client(api_url: str, sleeps: SleepRecorder) -> Callable[..., GitHubClient]:
    def build(**kwargs: Any) -> GitHubClient:
        kwargs.setdefault("sleep", sleeps)
        kwargs.setdefault("timeout", 5.0)
        kwargs.setdefault("retry", RetryPolicy(max_attempts=4, backoff_base=0.01, backoff_cap=0.05,
                                               max_wait=30, total_wait_cap=60))
        return GitHubClient(api_url, TOKEN, **kwargs)
    return build


@pytest.fixture
def make_handler(make_client: Callable[..., GitHubClient], repo_root: Path) -> Callable[..., Handler]:
    def build(root: Path | None = None, dry_run: bool = False, client: GitHubClient | None = None,
              **config: Any) -> Handler:
        config.setdefault("lookup", FAST_LOOKUP)
        return Handler(client or make_client(), BotConfig(repo_root=root or repo_root, dry_run=dry_run, **config))
    return build
