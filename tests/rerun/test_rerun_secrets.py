"""Tokens never reach a message or a log line; a bad or empty token file is a clear error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.rerun.fake_github import FakeGitHub, Scripted
from tools.rerun.fake_server import serve
from tools.rerun.secrets_file import SecretError, check_secret, read_secret, redact

from rerun_support import HEAD_SHA, PR, REPO, ROOT, comment_payload, workflow_run_name

TOKEN = "ghp_" + "Zq7" * 12  # 40 characters, like a real one
HALVES = (TOKEN[:20], TOKEN[20:])


def _cli(tmp_path: Path, token_bytes: bytes, api_url: str = "http://127.0.0.1:9", *extra: str
         ) -> subprocess.CompletedProcess[str]:
    (tmp_path / "token").write_bytes(token_bytes)
    (tmp_path / "event.json").write_text(json.dumps(comment_payload("/rerun-test test_pack.py")))
    return subprocess.run([sys.executable, "-m", "tools.rerun", "handle", "--event", str(tmp_path / "event.json"),
                           "--api-url", api_url, "--token-file", str(tmp_path / "token"), "--repo", REPO, "--writes-per-minute", "0", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("raw, problem", [
    (HALVES[0].encode() + b"\n" + HALVES[1].encode() + b"\n", "a line break inside it (at character 21 of 41)"),
    (HALVES[0].encode() + b"\r\n" + HALVES[1].encode(), "a line break inside it (at character 21 of 42)"),
    (HALVES[0].encode() + b" " + HALVES[1].encode(), "whitespace inside it"),
    (HALVES[0].encode() + "\u00e9".encode() + HALVES[1].encode(), "the character U+00E9 inside it"),
])
def test_a_token_with_an_embedded_break_is_refused_without_printing_it(tmp_path: Path, raw: bytes,
                                                                      problem: str) -> None:
    result = _cli(tmp_path, raw)
    output = result.stdout + result.stderr
    assert result.returncode == 2 and problem in output and str(tmp_path / "token") in output
    assert "The value is not shown" in output
    assert not any(half in output for half in HALVES), output


@pytest.mark.parametrize("raw", [b"", b"\n", b"   \n\t\n"])
def test_an_empty_token_file_is_an_error_not_an_anonymous_run(tmp_path: Path, raw: bytes) -> None:
    result = _cli(tmp_path, raw)
    assert result.returncode == 2 and "is empty; refusing to run without it" in result.stderr


def test_a_server_echoing_the_token_never_gets_it_printed(tmp_path: Path, repo_root: Path) -> None:
    fake = FakeGitHub(token=TOKEN, run_name_template=workflow_run_name())
    fake.add_user("maintainer", "write")
    fake.add_pull(PR, HEAD_SHA)
    echo = Scripted(500, body={"message": f"internal error for Authorization: Bearer {TOKEN}"})
    fake.fail("GET", r"/collaborators/", echo, echo)  # twice, then the call succeeds
    with serve(fake) as url:
        result = _cli(tmp_path, TOKEN.encode() + b"\n", url, "--repo-root", str(repo_root))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert output.count("internal error for Authorization: Bearer ***; retry") == 2  # the retry log lines
    assert TOKEN not in output and HALVES[1] not in output
    assert len(fake.dispatches) == 2


def test_check_secret_and_redact() -> None:
    assert check_secret(f"  {TOKEN}\n", "token") == TOKEN
    assert redact(f"a {TOKEN} b {TOKEN}") == "a *** b ***"
    with pytest.raises(SecretError, match="token is 3 characters long"):
        check_secret("abc", "token")
    with pytest.raises(SecretError, match="cannot read token file"):
        read_secret("/nonexistent/token", "token")


def test_non_utf8_token_file(tmp_path: Path) -> None:
    (tmp_path / "t").write_bytes(b"ghp_\xff\xfe" + b"x" * 30)
    with pytest.raises(SecretError, match="not UTF-8 \\(byte 4\\)"):
        read_secret(tmp_path / "t", "token")
