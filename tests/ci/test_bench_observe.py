"""``bench depmap --observe``: a tree's own command plain and under `ci observe`, alternating, in
real processes on a small project (`tests.ci.depmap_support`), and what it judges from them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import __main__ as bench_main
from bench._depmap_count import Counter
from bench._depmap_observe import Run, outcome_counts, pair_ratios, summary, verdict
from tests.ci.depmap_support import clean_env, write_project

REPO = Path(__file__).resolve().parents[2]
FILES = {
    "pkg/__init__.py": "",
    "pkg/work.py": "def add(a, b):\n    return a + b\n",
    "tests/test_a.py": "from pkg.work import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    "tests/test_b.py": "import pytest\n\n\ndef test_fails():\n    assert False\n\n\n"
                       "@pytest.mark.skip('no')\ndef test_skipped():\n    pass\n",
}


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench", "depmap", *args], cwd=REPO, env=clean_env(),
                          capture_output=True, text=True, timeout=300)


def test_a_command_is_run_plain_and_observed_in_turn_with_its_counts_and_map(tmp_path: Path) -> None:
    write_project(tmp_path / "proj", FILES)
    logs = tmp_path / "logs"
    proc = _bench("--observe", f"--cwd={tmp_path / 'proj'}", "--repeat=2", f"--logs={logs}", "--",
                  sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
    assert proc.returncode in (0, 1), proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("1 ", "2 "))]
    assert [re.split(r"\s{2,}", r)[1] for r in rows] == ["plain", "observed", "plain", "observed"], proc.stdout
    assert all("1 failed, 1 passed, 1 skipped" in r for r in rows), proc.stdout
    assert all("2 test file(s), 0 not complete" in r for r in rows[1::2]), proc.stdout
    assert sorted(p.name for p in logs.iterdir()) == ["observed.0.log", "observed.1.log", "plain.0.log", "plain.1.log"]
    assert "goal median <= +10%: M" in proc.stdout, proc.stdout  # judged: the same failure in every run


# a stand-in `ci` for --against: runs the command and says so in a map line of its own, so each
# observed run's output tells which `ci` observed it
FAKE_OBSERVE = (
    "import subprocess, sys\n"
    "args = sys.argv[1:]\n"
    "out, command = args[args.index('--out') + 1], args[args.index('--') + 1:]\n"
    "status = subprocess.run(command).returncode\n"
    "open(out, 'w').write('{}')\n"
    "print(f'python -m ci observe: wrote {out} (7 test file(s), 3 not complete)', file=sys.stderr)\n"
    "sys.exit(status)\n"
)


def test_against_runs_a_pair_more_per_round_observed_by_the_other_ci_and_judges_only_the_given(tmp_path: Path) -> None:
    write_project(tmp_path / "proj", FILES)
    write_project(tmp_path / "other", {"ci/__init__.py": "", "ci/__main__.py": FAKE_OBSERVE})
    logs = tmp_path / "logs"
    proc = _bench("--observe", f"--cwd={tmp_path / 'proj'}", "--repeat=2", f"--logs={logs}",
                  f"--against={tmp_path / 'other'}", "--", sys.executable, "-m", "pytest", "-q", "-p",
                  "no:cacheprovider", "tests")
    assert proc.returncode in (0, 1), proc.stderr
    rows = [re.split(r"\s{2,}", line) for line in proc.stdout.splitlines() if line.startswith(("1 ", "2 "))]
    assert [(r[0], r[1]) for r in rows] == [(n, m) for n in "12" for m in (
        "against plain", "against observed", "plain", "observed")], proc.stdout
    assert all("1 failed, 1 passed, 1 skipped" in r for r in map(" ".join, rows)), proc.stdout
    assert [r[1] for r in rows if "7 test file(s), 3 not complete" in r] == ["against observed"] * 2, proc.stdout
    assert [r[1] for r in rows if "2 test file(s), 0 not complete" in r] == ["observed"] * 2, proc.stdout
    assert sorted(p.name for p in logs.iterdir()) == sorted(
        f"{who}{mode}.{i}.log" for who in ("", "against-") for mode in ("plain", "observed") for i in (0, 1))
    assert "against: CPU, observed / plain: median of 2 pair(s)" in proc.stdout, proc.stdout
    assert "\nCPU, observed / plain: median of 2 pair(s)" in proc.stdout, proc.stdout


def test_the_against_pairs_are_reported_and_never_judged() -> None:
    given = _pairs((10.0, 10.5), (10.0, 10.4))
    against = [Run(observed, 1, seconds, 0, "9 passed", 0.5, recorder="against")
               for observed, seconds in ((False, 9.0), (True, 18.0))]
    runs = against + given[:2] + against + given[2:]
    assert verdict(runs) == "MET"  # the against pairs read 2.0x
    assert pair_ratios(runs, "against") == [2.0, 2.0] and pair_ratios(runs) == [1.05, 1.04]
    text = summary(runs)
    assert text.startswith("against: CPU, observed / plain: median of 2 pair(s) x2.000"), text
    assert "best CPU s: plain 10.00, observed 10.40 (x1.040)" in text and text.endswith("MET"), text


@pytest.mark.parametrize(("args", "message"), [
    (["--observe"], "no command: give it after `--`"),
    (["--observe", "--cwd=/nonexistent/x", "--", "true"], "--cwd=/nonexistent/x: not a directory"),
    (["--observe", "--repeat=0", "--", "true"], "--repeat=0: not a whole number"),
    (["--observe", "--pairs=2", "--", "true"], "unknown option '--pairs=2'"),
    (["--observe", "--count=papi", "--", "true"], "--count=papi: not one of auto, perf, callgrind"),
    (["--observe", "--against=/nonexistent/x", "--", "true"], "--against=/nonexistent/x: no ci package there"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    proc = _bench(*args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_everything_after_double_dash_is_the_benchmarks_as_given() -> None:
    names, flags = bench_main.split_args(["depmap", "--observe", "--", "python", "-m", "pytest", "--tree", "depmap"])
    assert names == ["depmap"]
    assert flags == ["--observe", "--", "python", "-m", "pytest", "--tree", "depmap"]


@pytest.mark.parametrize(("output", "counts"), [
    ("....F\n=== 1 failed, 4 passed, 2 warnings in 1.20s ===\n", "1 failed, 4 passed"),
    ("5 passed, 1 skipped in 0.3s\n", "5 passed, 1 skipped"),
    ("test_x (m.T) ... ok\n-----\nRan 3 tests in 0.1s\n\nOK\n", "3 ran"),
    ("collected 2 items that say 2 passed nowhere near a summary\n", ""),
])
def test_the_last_summary_line_gives_the_counts(output: str, counts: str) -> None:
    assert outcome_counts(output) == counts


def test_runs_that_end_differently_are_not_judged() -> None:
    same = [Run(False, 1, 10.0, 1, "1 failed, 9 passed", 0.5), Run(True, 1, 10.5, 1, "1 failed, 9 passed", 0.5)]
    assert verdict(same) == "MET"
    assert verdict([same[0], Run(True, 1, 12.0, 1, "1 failed, 9 passed", 0.5)]) == "MISSED"
    assert verdict([same[0], Run(True, 1, 10.5, 1, "2 failed, 8 passed", 0.5)]).startswith("UNJUDGED")


def _pairs(*cpu: tuple[float, float]) -> list[Run]:
    return [Run(observed, 1, seconds, 0, "9 passed", 0.5) for pair in cpu for observed, seconds in zip((False, True), pair)]


def test_the_verdict_is_the_median_of_the_pairs_not_the_best_of_each_mode() -> None:
    # a plain run that met a quiet moment (8 s) beside an observed one that met a busy one (20 s):
    # the best of each mode reads 10.5 / 8 = 1.31x, the pairs 1.05x, 1.05x and 2.5x
    outlier = _pairs((10.0, 10.5), (12.0, 12.6), (8.0, 20.0))
    assert verdict(outlier) == "MET"
    # and the other way: 1.2x in two pairs of three; the best of each mode reads 10.5 / 10
    assert verdict(_pairs((10.0, 12.0), (10.0, 12.0), (14.0, 10.5))) == "MISSED"
    line = summary(outlier)
    assert "median of 3 pair(s) x1.050 (+5.0%), spread x1.050 to x2.500" in line, line
    assert "per pair x 1.050, 1.050, 2.500" in line and line.endswith("goal median <= +10%: MET"), line


def test_callgrind_sums_the_collected_count_of_every_process_log_of_the_tree(tmp_path: Path) -> None:
    """valgrind's own log format (``==PID== Collected : N``, one log per process through ``%p``
    with ``--trace-children=yes``): the tree's count is every process's sum, other lines and
    other files ignored. The real valgrind run is the documented command in docs/depmaps.md
    (this suite installs no valgrind, so it does not run it)."""
    counter = Counter("callgrind")
    argv = counter.wrap(["python3", "-c", "pass"], tmp_path)
    assert "--trace-children=yes" in argv and f"--log-file={tmp_path / 'callgrind.%p.log'}" in argv, argv
    assert argv[argv.index("--") + 1:] == ["python3", "-c", "pass"], argv
    (tmp_path / "callgrind.101.log").write_text("==101== Callgrind, a call-graph generating cache profiler\n"
                                                "==101== Events    : Ir\n==101== Collected : 52713004\n"
                                                "==101== I   refs:      52,713,004\n")
    (tmp_path / "callgrind.102.log").write_bytes(b"==102== \xff\xfe not UTF-8\n==102== Collected : 3000001\n")
    (tmp_path / "perf.csv").write_text("999,,instructions:u\n")  # another counter's file
    assert counter.read(tmp_path) == 52_713_004 + 3_000_001
    assert Counter("callgrind").read(tmp_path / "nothing") == 0


def test_the_instruction_ratio_is_the_verdicts_measure_when_counted() -> None:
    # CPU reads 1.3x (a busy moment), instructions 1.04x: judged on instructions
    runs = [Run(False, 1, 10.0, 0, "9 passed", 0.5, instructions=1_000),
            Run(True, 1, 13.0, 0, "9 passed", 0.5, instructions=1_040)]
    assert verdict(runs) == "MET"
    assert summary(runs).startswith("instructions, observed / plain: median of 1 pair(s) x1.040 (+4.0%)")
