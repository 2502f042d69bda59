"""``python -m ci lint --base REF`` and ``--baseline FILE`` against real git repositories built
here: only the problems a change adds fail, the merge base (not REF's tip) is the reference, a
renamed file keeps its old problems old, a bad ref or baseline is one line and exit 2, and the
merge base's temporary tree is gone afterwards, also after an error or a SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import ci.lint_base
from ci.commands import lint as cli
from ci.lint_base import TEMP_PREFIX
from tests.ci.test_action import GIT_ENV as ACTION_GIT_ENV, action, adopter, run_step  # noqa: F401 (a fixture)
from tests.ci.test_import_hints_history import GIT_ENV, git
from tests.ci.tree_testutil import write

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = """\
version: 1
project: {{source_roots: ["."], first_party: [pkg], test_roots: [tests]}}
tiers:
  cpu: {{description: no GPU, runner_labels: [x], gpu_count: 0, arch: cpu}}
tests:
{entries}"""
OLD = "'pkg.mod' has no name 'Gone'"
NEW = "'pkg.mod' has no name 'KVFP4QuantizeUtil'"


def registry(*tests: str) -> str:
    return REGISTRY.format(entries="".join(f"  {t}: {{tiers: [cpu], est_time: 1, owner: me, status: active}}\n"
                                           for t in tests))


def commit_all(root: Path, message: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """main: pkg.mod renamed a class; tests/test_a.py already imports a name that is gone. Then
    the branch ``feature`` is checked out. Temporary files go to a folder of the test's own."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root, {"registry.yaml": registry("tests/test_a.py"), "pkg/__init__.py": "",
                 "pkg/mod.py": "class BlockFP4KVQuantizeUtil:\n    pass\n",
                 "tests/test_a.py": "def test_a():\n    from pkg.mod import Gone\n"})
    commit_all(root, "start")
    git(root, "checkout", "-q", "-b", "feature")
    return root


def lint(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], list[str]]:
    code = cli.main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def short(root: Path, ref: str) -> str:
    return git(root, "rev-parse", "--short=9", ref)


def leftovers(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "tmp").iterdir())


def test_only_the_problem_the_change_adds_fails(repo: Path, tmp_path: Path, capsys) -> None:
    base = short(repo, "main")
    write(repo, {"tests/test_a.py": "import os\n\n\ndef test_a():\n    from pkg.mod import Gone\n\n\n"
                                    "def test_b():\n    from pkg.mod import KVFP4QuantizeUtil\n"})
    commit_all(repo, "add the seed bug, shift the old one down")
    code, out, err = lint(repo, capsys, "--base", "main")
    assert code == 1
    assert out == [f"tests/test_a.py:9:5: I001 {NEW} (did you mean 'BlockFP4KVQuantizeUtil'?)"]
    assert err == [f"python -m ci lint: 1 new problem(s); 1 problem(s) already at {base} (merge base of main and HEAD), "
                   f"not failed on (`python -m ci lint` lists every problem)"]
    assert leftovers(tmp_path) == []


def test_old_problems_alone_pass_even_after_main_fixed_them(repo: Path, capsys) -> None:
    base = short(repo, "main")
    write(repo, {"tests/test_a.py": "\n\ndef test_a():\n    from pkg.mod import Gone\n"})
    commit_all(repo, "feature: shift lines")
    git(repo, "checkout", "-q", "main")
    write(repo, {"tests/test_a.py": "def test_a():\n    pass\n"})
    commit_all(repo, "main fixes the old import after the branch point")
    git(repo, "checkout", "-q", "feature")
    code, out, err = lint(repo, capsys, "--base", "main")
    # Against main's tip the old import would look new; against the merge base it is old.
    assert (code, out) == (0, [])
    assert err[0].startswith(f"python -m ci lint: 0 new problem(s); 1 problem(s) already at {base} ")


def test_notes_are_gated_too_and_never_fail(repo: Path, capsys) -> None:
    computed = "import importlib\n\n\ndef load(name):\n    return importlib.import_module(name)\n"
    write(repo, {"pkg/loader.py": computed})
    commit_all(repo, "a computed import: an L009 note")
    git(repo, "checkout", "-q", "-b", "notes")
    write(repo, {"pkg/loader2.py": computed})
    code, out, err = lint(repo, capsys, "--base", "feature")
    assert code == 0
    assert [line.split(" ", 2)[:2] for line in out] == [["pkg/loader2.py:5:1:", "L009"]]
    assert err[0].startswith("python -m ci lint: 0 new problem(s) and 1 new note(s); "
                             "1 problem(s) and 1 note(s) already at ")


def test_a_second_copy_of_an_old_import_fails(repo: Path, capsys) -> None:
    write(repo, {"tests/test_a.py": "def test_a():\n    from pkg.mod import Gone\n\n\n"
                                    "def test_c():\n    from pkg.mod import Gone\n"})
    code, out, _ = lint(repo, capsys, "--base", "main")  # uncommitted: the working tree is linted
    assert (code, out) == (1, [f"tests/test_a.py:6:5: I001 {OLD}"])


def test_a_renamed_file_keeps_its_old_problems_old(repo: Path, capsys) -> None:
    git(repo, "mv", "tests/test_a.py", "tests/test_renamed.py")
    write(repo, {"registry.yaml": registry("tests/test_renamed.py")})
    commit_all(repo, "rename the test file")
    code, out, err = lint(repo, capsys, "--base", "main")
    assert (code, out) == (0, [])
    assert "; 1 problem(s) already at " in err[0]


def test_a_base_without_the_registry_is_linted_with_the_changes(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root, {"pkg/__init__.py": "", "pkg/mod.py": "X = 1\n", "tests/test_a.py": "from pkg.mod import Gone\n"})
    commit_all(root, "before adoption")
    git(root, "checkout", "-q", "-b", "adopt")
    write(root, {"registry.yaml": registry("tests/test_a.py")})
    commit_all(root, "adopt fp4kv-ci")
    code, out, err = lint(root, capsys, "--base", "main")
    assert (code, out) == (0, [])
    assert "; 1 problem(s) already at " in err[0]
    assert leftovers(tmp_path) == []


def test_a_registry_in_a_subfolder_is_compared_with_that_subfolder(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    repo = tmp_path / "repo"
    app = repo / "app"
    app.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    write(app, {"registry.yaml": registry("tests/test_a.py"), "pkg/__init__.py": "", "pkg/mod.py": "X = 1\n",
                "tests/test_a.py": "from pkg.mod import Gone\n"})
    write(repo, {"tests/test_outside.py": "from pkg.mod import Elsewhere\n"})
    commit_all(repo, "start")
    write(app, {"tests/test_a.py": "from pkg.mod import Gone\nfrom pkg.mod import Y\n"})
    code, out, _ = lint(app, capsys, "--base", "HEAD")
    assert (code, out) == (1, ["tests/test_a.py:2:1: I001 'pkg.mod' has no name 'Y'"])


@pytest.mark.parametrize("ref, error", [
    ("nope", "python -m ci lint: --base nope: no such commit in this repository (is it fetched?)"),
    ("main~5", "python -m ci lint: --base main~5: no such commit in this repository (is it fetched?)"),
    ("--output=x", "python -m ci lint: --base '--output=x': not a git ref"),
])
def test_a_bad_ref_is_one_line_and_exit_2(repo: Path, tmp_path: Path, capsys, ref: str, error: str) -> None:
    code, out, err = lint(repo, capsys, f"--base={ref}")
    assert (code, out, err) == (2, [], [error])
    assert leftovers(tmp_path) == []


def test_unrelated_histories_have_no_merge_base(repo: Path, capsys) -> None:
    git(repo, "checkout", "-q", "--orphan", "other")
    commit_all(repo, "unrelated")
    git(repo, "checkout", "-q", "feature")
    code, _, err = lint(repo, capsys, "--base", "other")
    assert code == 2 and len(err) == 1
    assert err[0].startswith("python -m ci lint: --base other: no merge base with HEAD (is it fetched?")


def test_not_a_git_checkout_is_one_line(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"registry.yaml": registry()})
    code, _, err = lint(tmp_path, capsys, "--base", "main")
    assert (code, err) == (2, [f"python -m ci lint: --base main: {tmp_path} is not in a git checkout"])


def test_the_temporary_tree_is_removed_when_linting_it_fails(repo: Path, tmp_path: Path, monkeypatch) -> None:
    seen = []

    def broken(root: Path, *args, **kwargs):
        seen.append(sorted(p.name for p in (tmp_path / "tmp").iterdir()))
        raise RuntimeError("lint broke")

    monkeypatch.setattr(ci.lint_base, "lint_repo", broken)
    with pytest.raises(RuntimeError, match="lint broke"):
        ci.lint_base.lint_merge_base(repo, "main", repo / "registry.yaml")
    assert len(seen) == 1 and seen[0][0].startswith(TEMP_PREFIX)  # it existed while linting
    assert leftovers(tmp_path) == []


def test_a_sigterm_during_the_removal_still_removes_the_tree(repo: Path, tmp_path: Path, monkeypatch) -> None:
    real = ci.lint_base.shutil.rmtree
    calls = []

    def interrupted_once(path, ignore_errors=False):
        calls.append(path)
        if len(calls) == 1:
            raise SystemExit(143)  # what the command's SIGTERM handler raises, mid-removal
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(ci.lint_base.shutil, "rmtree", interrupted_once)
    with pytest.raises(SystemExit):
        ci.lint_base.lint_merge_base(repo, "main", repo / "registry.yaml")
    assert len(calls) == 2 and leftovers(tmp_path) == []


def test_sigterm_while_linting_the_base_removes_its_tree(repo: Path, tmp_path: Path) -> None:
    # Enough modules that the base's lint takes a while: the signal lands while its tree exists.
    write(repo, {f"pkg/m{i}.py": "from pkg.mod import BlockFP4KVQuantizeUtil\n" * 20 for i in range(1500)})
    commit_all(repo, "many modules")
    scratch = tmp_path / "tmp"
    proc = subprocess.Popen([sys.executable, "-m", "ci", "--root", str(repo), "lint", "--base", "main"],
                            cwd=ROOT, env={**os.environ, **GIT_ENV, "TMPDIR": str(scratch)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    # Wait for the tree itself: the first entry in $TMPDIR is tempfile.gettempdir()'s own probe
    # file, which CPython leaves behind if the process dies while it exists.
    while time.monotonic() < deadline and proc.poll() is None and not any(
            p.name.startswith(TEMP_PREFIX) for p in scratch.iterdir()):
        time.sleep(0.002)
    assert proc.poll() is None, "the lint ended before its base tree was seen"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err.decode(errors="replace")[-3000:]
    assert b"Traceback" not in err
    assert leftovers(tmp_path) == []


def test_a_sigterm_that_lands_in_a_finalizer_still_ends_the_command(repo: Path, tmp_path: Path, monkeypatch,
                                                                      capsys) -> None:
    # The handler's SystemExit, raised inside a generator's `finally` that the collector runs, is
    # one Python can only print as "Exception ignored" and go on from, and the command exited 0
    # after its SIGTERM: the one path to the 0 seen once in a full suite run under load. It must
    # still exit 143, quietly.
    real = ci.lint_base.lint_repo
    finished = []

    def lint_with_a_finalizer(root: Path, *args, **kwargs):
        def cleanup_on_close():
            try:
                yield
            finally:
                signal.raise_signal(signal.SIGTERM)  # the handler runs here, inside the finalizer

        pending = cleanup_on_close()
        next(pending)
        del pending  # closed now, by reference counting, as the collector would
        finished.append(True)  # Python went on: the exception did not leave the finalizer
        return real(root, *args, **kwargs)

    monkeypatch.setattr(ci.lint_base, "lint_repo", lint_with_a_finalizer)
    unraisable = []  # what Python would print as "Exception ignored" (pytest's own hook is replaced)
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    before = signal.getsignal(signal.SIGTERM), sys.unraisablehook
    with pytest.raises(SystemExit) as ended:
        cli.main(["--root", str(repo), "--base", "main"])
    assert ended.value.code == 128 + signal.SIGTERM and finished == [True]
    assert unraisable == []  # the SIGTERM it remembered is not reported as an error
    assert leftovers(tmp_path) == []
    assert (signal.getsignal(signal.SIGTERM), sys.unraisablehook) == before  # both put back
    monkeypatch.setattr(ci.lint_base, "lint_repo", real)
    assert lint(repo, capsys, "--base", "main")[0] == 0  # the next run is not taken for terminated


def test_the_baseline_workflow(repo: Path, tmp_path: Path, capsys) -> None:
    baseline = tmp_path / "lint-baseline.txt"
    code, out, err = lint(repo, capsys, "--write-baseline", str(baseline))
    assert (code, out, err) == (0, [], [f"python -m ci lint: wrote {baseline}: 1 problem(s)"])
    assert baseline.read_text().splitlines()[-1] == f"I001\ttests/test_a.py\t{OLD}"
    assert lint(repo, capsys, "--baseline", str(baseline))[:2] == (0, [])
    write(repo, {"tests/test_a.py": "def test_b():\n    from pkg.mod import KVFP4QuantizeUtil\n"})
    code, out, err = lint(repo, capsys, "--baseline", str(baseline))
    assert code == 1
    assert out == [f"tests/test_a.py:2:5: I001 {NEW} (did you mean 'BlockFP4KVQuantizeUtil'?)"]
    assert err == [
        f"python -m ci lint: 1 new problem(s); 0 problem(s) already in baseline {baseline}, not failed on "
        f"(`python -m ci lint` lists every problem)",
        f"python -m ci lint: 1 baseline entry(ies) fixed since: delete them from {baseline} "
        f"(or rewrite it with --write-baseline):",
        f"  I001 tests/test_a.py: {OLD}"]


def test_a_corrupt_baseline_never_passes(repo: Path, tmp_path: Path, capsys) -> None:
    baseline = tmp_path / "b.txt"
    baseline.write_text("# fp4kv-ci lint baseline 1\nI001 tests/test_a.py x\n")
    code, out, err = lint(repo, capsys, "--baseline", str(baseline))
    assert (code, out) == (2, [])
    assert err == [f"python -m ci lint: {baseline}:2: expected 3 tab-separated fields (code, file, problem), "
                   f"found 1: 'I001 tests/test_a.py x'"]


def test_a_baseline_that_cannot_be_written_is_exit_3(repo: Path, tmp_path: Path, capsys) -> None:
    code, _, err = lint(repo, capsys, "--write-baseline", str(tmp_path / "no" / "such" / "dir" / "b.txt"))
    assert code == 3 and len(err) == 1 and err[0].startswith("python -m ci lint: cannot write baseline ")


def test_gates_are_exclusive_and_deepen_is_not_negative(repo: Path, capsys) -> None:
    assert lint(repo, capsys, "--base", "main", "--baseline", "b.txt")[0] == 2
    assert lint(repo, capsys, "--deepen", "-1")[0] == 2


def test_the_action_gates_lint_on_base_then_on_a_baseline(adopter: tuple[Path, str], tmp_path: Path) -> None:
    """action.yml's lint step as the runner runs it: `base` gates on the merge base, else
    `lint-baseline` on the file; neither lints the whole tree."""
    repo, _ = adopter
    (repo / "app" / "tests" / "test_other.py").write_text("from lib.core import old\n")
    subprocess.run(["git", "commit", "-qam", "an old broken import"], cwd=repo, check=True, env=ACTION_GIT_ENV)
    base = git(repo, "rev-parse", "HEAD")
    (repo / "app" / "tests" / "test_core.py").write_text("from lib.core import new\n")
    step = next(s for s in action()["runs"]["steps"] if s.get("name") == "Lint registry, tests and imports")
    inputs = {**{k: str(v.get("default", "")) for k, v in action()["inputs"].items()}, "working-directory": "app"}
    output = tmp_path / "github_output"

    gated = run_step(step, {**inputs, "base": base}, repo, output)
    assert gated.returncode == 1
    assert [line.split("::")[1] for line in gated.stdout.splitlines()] == [
        "error file=tests/test_core.py,line=1,col=1,title=I001"]
    (repo / "app" / "tests" / "test_core.py").write_text("from lib.core import f\n")
    assert run_step(step, {**inputs, "base": base}, repo, output).returncode == 0
    whole = run_step(step, inputs, repo, output)
    assert whole.returncode == 1 and "file=tests/test_other.py" in whole.stdout

    baseline = repo / "app" / "lint-baseline.txt"
    assert cli.main(["--root", str(repo / "app"), "--write-baseline", str(baseline)]) == 0
    assert run_step(step, {**inputs, "lint-baseline": "lint-baseline.txt"}, repo, output).returncode == 0
    missing = run_step(step, {**inputs, "lint-baseline": "nope.txt"}, repo, output)
    assert missing.returncode == 2 and "baseline nope.txt: cannot read it" in missing.stderr
