"""A run-name names a pull request only as a whole ``PR #N`` word (issue #32's mutation survivors).

`tools.rerun.pr_runs.parse_title` reads the PR from run-names the project's workflows write
(``pr-gpu PR #N (<sha>)``, ``rerun-test PR #N <tier> <part> (<sha>) comment <id>``). The number
counts only when ``PR`` starts a word and the number ends at a blank or the end of the name: a
run of ``PR #12`` must never be taken for PR 1 or PR 123, nor ``XPR #5`` for PR 5.
"""

from __future__ import annotations

import pytest

from tools.rerun.pr_runs import parse_title

SHA = "c" * 40


@pytest.mark.parametrize("title, pr", [
    (f"pr-gpu PR #12 ({SHA})", 12),
    ("pr-gpu PR #12 comment 99", 12),
    ("rerun-test PR #12", 12),                       # at the end of the name
    (f"rerun-test PR #123 gpu_h100 1/2 ({SHA}) comment 5", 123),
    ("pr-gpu PR #12x comment 99", None),             # the number runs into a word
    ("pr-gpu PR #12) comment 99", None),
    ("pr-gpu XPR #12 comment 99", None),             # PR inside a word
    ("pr-gpu PR#12 comment 99", None),
    ("nightly", None),
])
def test_the_pr_number_is_a_whole_word(title: str, pr: int | None) -> None:
    assert parse_title(title).pr == pr


def test_the_sha_and_comment_are_read_beside_it() -> None:
    title = parse_title(f"rerun-test PR #7 cpu 1/1 ({SHA}) comment 42")
    assert (title.pr, title.sha, title.comment_id) == (7, SHA, 42)
