"""`ci init` (a starter registry that lints clean) and the registry writer it shares with
`ci import-suites` (what it renders parses back to the same registry)."""

from __future__ import annotations

import keyword
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ci.__main__ import main as ci_main
from ci.project import ProjectConfig
from ci.registry import Registry, Status, TestEntry, Tier, parse_registry
from ci.registry.model import QuarantinePolicy, StepTemplate
from ci.registry.writer import render_registry
from ci.adopt.starter import detect_project, roots_of_tests

ROOT = Path(__file__).resolve().parents[2]
CONSOLE_SCRIPT = Path(sys.executable).with_name("fp4kv-ci")


def write(root: Path, files: dict[str, str]) -> None:
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))


PASSING = "def test_ok():\n    assert True\n"


@pytest.fixture
def src_repo(tmp_path: Path) -> Path:
    """A src-layout repository without a registry: two packages, tests under test/, a helper."""
    root = tmp_path / "acme-repo"
    write(root, {
        "pyproject.toml": '[project]\nname = "acme"\n\n[tool.setuptools_scm]\nversion_file = "src/acme/_version.py"\n',
        "src/acme/__init__.py": "", "src/acme/core.py": "def f():\n    return 1\n",
        "src/acme_tools/__init__.py": "",
        "test/registered/core/test_core.py": PASSING, "test/registered/io/reader_test.py": PASSING,
        "test/manual/test_by_hand.py": PASSING, "test/registered/helpers.py": "",
        ".venv/lib/site-packages/pkg/test_vendored.py": PASSING,  # never a test file of the repository
        "build/lib/test_copied.py": PASSING,
    })
    return root


def test_detect_project_reads_the_layout(src_repo):
    assert detect_project(src_repo) == ProjectConfig(
        first_party=("acme", "acme_tools"), source_roots=("src",), test_roots=("test",),
        test_patterns=("test_*.py", "*_test.py"), generated_modules=("acme._version",))


def test_roots_of_tests():
    assert roots_of_tests(["tests/a/test_x.py", "tests/test_y.py"]) == ("tests",)
    assert roots_of_tests(["test/registered/a/test_x.py", "python/pkg/test_z.py"]) == ("python", "test")
    assert roots_of_tests(["test_root.py", "tests/test_y.py"]) == (".",)


def test_init_from_an_unrelated_directory_writes_a_registry_that_lints_clean(src_repo, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run([str(CONSOLE_SCRIPT), "--root", str(src_repo), "init"], cwd=elsewhere,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {src_repo / 'registry.yaml'}: 3 test file(s) on tier cpu")
    registry, problems = parse_registry((src_repo / "registry.yaml").read_text(), "registry.yaml")
    assert problems == []
    assert list(registry.tests) == ["test/manual/test_by_hand.py", "test/registered/core/test_core.py",
                                    "test/registered/io/reader_test.py"]
    assert {e.tiers for e in registry.tests.values()} == {("cpu",)} and list(registry.tiers) == ["cpu"]
    assert registry.run_all_paths == ("registry.yaml", "pyproject.toml")
    lint = subprocess.run([str(CONSOLE_SCRIPT), "lint"], cwd=src_repo / "test" / "registered",
                          capture_output=True, text=True, timeout=120)
    assert (lint.returncode, lint.stdout) == (0, ""), lint.stdout + lint.stderr


def test_init_refuses_to_overwrite_unless_forced(src_repo, capsys):
    (src_repo / "registry.yaml").write_text("# mine\n")
    assert ci_main(["--root", str(src_repo), "init"]) == 2
    assert "exists; not overwriting it (--force replaces it)" in capsys.readouterr().err
    assert (src_repo / "registry.yaml").read_text() == "# mine\n"
    assert ci_main(["--root", str(src_repo), "init", "--force", "--owner", "@acme/core"]) == 0
    registry, _ = parse_registry((src_repo / "registry.yaml").read_text())
    assert {e.owner for e in registry.tests.values()} == {"@acme/core"}


def test_init_without_root_uses_the_git_work_tree_or_the_working_directory(src_repo, monkeypatch, capsys):
    monkeypatch.chdir(src_repo / "test")
    subprocess.run(["git", "init", "-q", str(src_repo)], check=True, timeout=60)
    assert ci_main(["init"]) == 0
    assert (src_repo / "registry.yaml").is_file() and not (src_repo / "test" / "registry.yaml").exists()
    assert ci_main(["init"]) == 2  # found above the working directory: not overwritten
    assert f"{src_repo / 'registry.yaml'} exists" in capsys.readouterr().err
    plain = src_repo.parent / "plain"
    (plain / "tests").mkdir(parents=True)
    (plain / "tests" / "test_p.py").write_text(PASSING)
    monkeypatch.chdir(plain)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(plain.parent))  # not inside any git work tree
    assert ci_main(["init"]) == 0 and (plain / "registry.yaml").is_file()


def test_init_takes_est_time_from_a_junit_report(src_repo, tmp_path, capsys):
    report = tmp_path / "junit.xml"
    report.write_text(textwrap.dedent("""\
        <?xml version="1.0" encoding="utf-8"?>
        <testsuites><testsuite name="pytest" tests="3">
          <testcase classname="test.registered.core.test_core" name="test_ok" time="40.0"
                    file="test/registered/core/test_core.py"/>
          <testcase classname="test.registered.core.test_core" name="test_two" time="2.5"
                    file="test/registered/core/test_core.py"/>
          <testcase classname="test.manual.test_by_hand" name="test_ok" time="0.2" file="test/manual/test_by_hand.py"/>
          <testcase classname="gone.test_gone" name="test_ok" time="1" file="gone/test_gone.py"/>
        </testsuite></testsuites>
        """))
    assert ci_main(["--root", str(src_repo), "init", "--durations", str(report)]) == 0
    out = capsys.readouterr().out
    registry, _ = parse_registry((src_repo / "registry.yaml").read_text())
    # ceil(p90 * 1.1), at least 1 s: what `ci durations` proposes for the same report
    assert registry.tests["test/registered/core/test_core.py"].est_time == 47  # ceil(42.5 * 1.1)
    assert registry.tests["test/manual/test_by_hand.py"].est_time == 1
    assert registry.tests["test/registered/io/reader_test.py"].est_time == 30  # not in the report
    assert "gone/test_gone.py: in the JUnit report(s) but not a test file here; ignored" in out
    assert "1 file(s) had no time in the report(s) and got est_time 30: test/registered/io/reader_test.py" in out


def test_init_allows_shared_basenames_and_says_so(src_repo, capsys):
    write(src_repo, {"test/registered/io/test_core.py": PASSING})
    assert ci_main(["--root", str(src_repo), "init"]) == 0
    out = capsys.readouterr().out
    assert ("note: 1 basename(s) are shared by several test files, e.g. test_core.py "
            "(test/registered/core/test_core.py, test/registered/io/test_core.py); wrote 'unique_basenames: false'") in out
    assert "unique_basenames: false" in (src_repo / "registry.yaml").read_text()
    assert ci_main(["--root", str(src_repo), "lint"]) == 0


def test_init_with_a_bad_report_writes_nothing(src_repo, tmp_path, capsys):
    (tmp_path / "bad.xml").write_text("<testsuites><testcase")
    assert ci_main(["--root", str(src_repo), "init", "--durations", str(tmp_path / "bad.xml")]) == 2
    assert not (src_repo / "registry.yaml").exists()


# --- the writer: whatever it renders parses back to the same registry -------------------------------

_names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(lambda n: not keyword.iskeyword(n))
_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
_nonblank = _text.filter(str.strip)  # what a reason or issue must be
_paths = st.lists(_names, min_size=1, max_size=3).map(lambda parts: "/".join(parts) + ".py")
_seconds = st.one_of(st.integers(1, 86_400), st.floats(0.001, 86_400, allow_nan=False).map(lambda x: round(x, 3)))
_envs = st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True), st.text(max_size=8), max_size=3)
_args = st.sampled_from([(), ("-m", "not slow"), ("-k", "a or b", "--deselect", "t.py::x")])
_step_values = st.recursive(st.one_of(_text, st.integers(-5, 5), st.booleans()),
                            lambda inner: st.one_of(st.lists(inner, min_size=1, max_size=2),
                                                    st.dictionaries(_names, inner, min_size=1, max_size=2)), max_leaves=4)


@st.composite
def templates(draw) -> StepTemplate:
    keys = draw(st.dictionaries(st.sampled_from(["plugins", "depends_on", "retry", "priority", "soft_fail", "agents"]),
                                _step_values, min_size=1, max_size=3))
    if isinstance(keys.get("agents"), dict):
        keys["agents"].pop("queue", None)
    prefix = draw(st.one_of(st.none(), _text))
    named = list(keys) + (["command_prefix"] if prefix is not None else [])
    return StepTemplate(keys, prefix, tuple(draw(st.lists(st.sampled_from(named), unique=True))))


@st.composite
def registries(draw) -> Registry:
    tiers = {"cpu": Tier("cpu", draw(_text), (draw(_text),), 0, "cpu")}
    if draw(st.booleans()):
        tiers["gpu_b200"] = Tier("gpu_b200", draw(_text), ("self-hosted", draw(_text)), 2, "sm_100",
                                 draw(st.sampled_from([(), ("fp8",), ("fp8", "fp4", "nvlink")])),
                                 draw(st.one_of(st.none(), st.sampled_from(["B200", "B200|GB200", "^NVIDIA B"]))),
                                 draw(st.one_of(st.none(), st.floats(1, 1000).map(lambda x: round(x, 2)))),
                                 buildkite_queue=draw(st.one_of(st.none(), st.sampled_from(["gpu-b200", "q$X"]))),
                                 buildkite=draw(st.one_of(st.none(), templates())), env=draw(_envs),
                                 pytest_args=draw(_args))
    if draw(st.booleans()):
        tiers["npu"] = Tier("npu", draw(_text), ("npu",), 1, "ascend910", backend="npu")
    tests = {}
    for path in draw(st.lists(_paths, max_size=5, unique=True)):
        status = draw(st.sampled_from(list(Status)))
        tests[path] = TestEntry(
            path=path, tiers=tuple(draw(st.lists(st.sampled_from(list(tiers)), min_size=1, unique=True))),
            est_time=float(draw(_seconds)), owner=draw(_text), status=status,
            reason=draw(_nonblank) if status is not Status.ACTIVE else draw(st.one_of(st.none(), _text)),
            issue=draw(_nonblank) if status is Status.QUARANTINED else None,
            timeout=draw(st.one_of(st.none(), _seconds.map(float))), reruns=draw(st.integers(0, 3)),
            depends_on=tuple(draw(st.lists(_paths, max_size=2, unique=True))), may_skip=draw(st.booleans()),
            env=draw(_envs), pytest_args=draw(_args))
    project = ProjectConfig(first_party=tuple(draw(st.lists(_names, max_size=2, unique=True))),
                            source_roots=draw(st.sampled_from([(".",), ("src",), ("src", "python")])),
                            test_roots=draw(st.sampled_from([("tests",), ("test/registered", "tests")])),
                            test_patterns=draw(st.sampled_from([("test_*.py",), ("test_*.py", "*_test.py")])),
                            generated_modules=tuple(draw(st.lists(_names.map(lambda n: f"pkg.{n}"), max_size=2,
                                                                  unique=True))))
    run_all = tuple(draw(st.lists(_names, max_size=2, unique=True)))
    policy = draw(st.sampled_from([QuarantinePolicy(), QuarantinePolicy(0.1, 12, 5, 0.95, "https://x/issues/1")]))
    return Registry("registry.yaml", tiers, tests, run_all, project=project, quarantine=policy)


def _positionless(registry: Registry) -> tuple:
    return (registry.version, registry.run_all_paths, registry.project,
            replace(registry.quarantine, line=0),
            {n: (t.description, t.runner_labels, t.gpu_count, t.arch, t.features, t.device_name, t.min_memory_gib,
                 t.backend, t.buildkite_queue, dict(t.env), t.pytest_args,
                 t.buildkite and (t.buildkite.keys, t.buildkite.command_prefix, t.buildkite.interpolate))
             for n, t in registry.tiers.items()},
            [(p, e.tiers, e.est_time, e.owner, e.status, e.reason, e.issue, e.timeout, e.reruns, e.depends_on, e.may_skip,
              dict(e.env), e.pytest_args)
             for p, e in registry.tests.items()])


@settings(max_examples=80, deadline=None)
@given(registries(), _text)
def test_what_the_writer_renders_parses_back_the_same(registry, comment):
    text = render_registry(registry, header="a header\nover two lines",
                           est_time_comments={p: comment for p in registry.tests})
    parsed, problems = parse_registry(text, "registry.yaml")
    assert problems == [], text
    assert _positionless(parsed) == _positionless(registry)


def test_the_writer_renders_the_block_style_the_fast_path_reads():
    from ci.registry.fast_parse import parse_fast

    registry, _ = parse_registry((ROOT / "registry.yaml").read_text())
    assert parse_fast(render_registry(registry), "registry.yaml") is not None


def test_console_script_is_installed():
    assert CONSOLE_SCRIPT.is_file() and os.access(CONSOLE_SCRIPT, os.X_OK)


def test_adopting_page_opens_with_install_init_lint():
    """docs/adopt.md's first block is what a new user types; test_docs.py checks each command's --help."""
    import re

    from ci.__main__ import COMMANDS

    section = (ROOT / "docs" / "adopt.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    commands = [line.split("#", 1)[0].split() for line in block.splitlines() if line.strip()]
    assert [c[:2] for c in commands] == [["pip", "install"], ["fp4kv-ci", "init"], ["fp4kv-ci", "lint"]]
    assert all(c[1] in COMMANDS for c in commands[1:])


@pytest.fixture
def vllm_like(tmp_path: Path) -> Path:
    """Shaped like vLLM: test root '.', CUDA kernels under csrc/, CMake and requirements files, and
    two files that only end in _test.py (a pre-commit script, a helper inside the package)."""
    root = tmp_path / "vllm-repo"
    write(root, {
        "pyproject.toml": "[project]\nname = 'vllm'\n\n[tool.pytest.ini_options]\nmarkers = ['slow']\n",
        "setup.py": "", "CMakeLists.txt": "project(vllm)\n",
        "cmake/utils.cmake": "", "requirements/cuda.txt": "torch\n", "requirements-lint.txt": "ruff\n",
        "csrc/attention/paged.cu": "", "csrc/ops.h": "", "docs/index.md": "",
        "vllm/__init__.py": "", "vllm/ops/__init__.py": "", "vllm/ops/fast/kernel.cuh": "",
        "vllm/quant/__init__.py": "", "vllm/quant/marlin_utils_test.py": "def marlin_quantize():\n    return 1\n",
        "tools/pre_commit/generate_nightly_torch_test.py": "import sys\n\nclass Generator:\n    pass\n",
        "tools/lint_test.py": "import unittest\n\nclass Checks(unittest.TestCase):\n    def test_x(self):\n        pass\n",
        "tests/test_ops.py": PASSING, "tests/kernels/cpp_test.cpp": "", "tests/utils/helpers_test.py": "X = 1\n",
    })
    return root


def test_init_makes_native_code_run_all_and_leaves_helpers_named_test_manual(vllm_like, capsys):
    assert ci_main(["--root", str(vllm_like), "init"]) == 0
    out = capsys.readouterr().out
    registry, problems = parse_registry((vllm_like / "registry.yaml").read_text(), "registry.yaml")
    assert problems == [] and registry.project.test_roots == (".",)
    assert registry.run_all_paths == ("registry.yaml", "pyproject.toml", "setup.py", "CMakeLists.txt", "cmake",
                                      "csrc", "requirements", "requirements-lint.txt", "vllm/ops/fast")
    helpers = ["tools/pre_commit/generate_nightly_torch_test.py", "vllm/quant/marlin_utils_test.py"]
    assert {p for p, e in registry.tests.items() if e.status is Status.MANUAL} == set(helpers)
    assert "defines no test" in registry.tests[helpers[0]].reason
    # a TestCase outside a test folder, and a helper inside one, stay tests
    assert registry.tests["tools/lint_test.py"].status is Status.ACTIVE
    assert registry.tests["tests/utils/helpers_test.py"].status is Status.ACTIVE
    assert f"2 file(s) match a test pattern but define no test outside a test folder" in out
    changed = vllm_like / "changed.txt"
    changed.write_text("csrc/attention/paged.cu\n")
    assert ci_main(["--root", str(vllm_like), "plan", "--tier", "cpu", "--changed-files", str(changed),
                    "--format", "json"]) == 0
    planned = capsys.readouterr().out
    assert "tests/test_ops.py" in planned and "tools/lint_test.py" in planned
