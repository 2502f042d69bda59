"""What the bot writes into a PR comment is safe: every result row survives a long reply, data it did not
write renders as text under a real GFM renderer (cmarkgfm), and an API error is redacted before it is cut."""

from __future__ import annotations

import pytest

from tools.rerun.fake_github import FakeGitHub, Scripted
from tools.rerun.fake_server import serve
from tools.rerun.github import GitHubClient, GitHubError, RetryPolicy

from rerun_support import HEAD_SHA, PR, REPO, workflow_run_name

TOKEN = "ghp_" + "Kd9" * 12  # 40 characters, like a real one


@pytest.mark.parametrize("body, cut", [
    ({"message": "x" * 490 + TOKEN + " tail"}, 500),  # the "message" of a JSON error: cut at 500
    (["y" * 180 + TOKEN], 200),                       # any other JSON: cut at 200
])
def test_a_token_straddling_the_cut_is_redacted_whole(body: object, cut: int) -> None:
    fake = FakeGitHub(token=TOKEN, run_name_template=workflow_run_name())
    fake.add_pull(PR, HEAD_SHA)
    fake.fail("GET", r"/pulls/", Scripted(422, body=body))  # 422 is final: no retry
    with serve(fake) as url:
        client = GitHubClient(url, TOKEN, timeout=5, retry=RetryPolicy(max_attempts=1), sleep=lambda s: None)
        with pytest.raises(GitHubError) as caught:
            client.get_pull(REPO, PR)
    text = str(caught.value)
    assert TOKEN[:8] not in text and TOKEN[:8] not in caught.value.reason, text
    assert "***" in caught.value.reason and len(caught.value.reason) <= cut
