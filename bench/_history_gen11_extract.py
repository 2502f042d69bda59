"""``python -m bench._history_gen11_extract GIT_DIR [--end SHA] [--count N] [--out PATH]``: the real
skeleton of the eleventh history, read once from a bare FlashInfer mirror (git only, nothing of
flashinfer is imported) into ``bench/_history_gen11_data.json``: N consecutive first-parent commits
of main ending at ``--end`` (sha, commit time, author, PR number from "(#NNNN)", subject, the touched
files under flashinfer/, csrc/, include/ and tests/), the test files at ``--end`` (functions,
parametrization counts, first node ids, xfail marks, imported modules with the csrc/include files
the JIT builds for them), the test files each CI script runs, and the breakage windows (a real
revert or fix and the commit it repairs, with the test files both plausibly affect).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from bench import _history_gen11_parse as parse

END = "fb28d7242b3506a2348265962041acc1fb56cca4"
COUNT = 250
DATA = Path(__file__).with_name("_history_gen11_data.json")
KEPT = ("flashinfer/", "csrc/", "include/", "tests/")
MAX_WINDOW_TESTS = 3
# a file more test files than this reach (flashinfer/utils.py, the JIT core) says nothing about
# which tests a change broke, so a window is never drawn through it
WIDE = 25
IDS_PER_FILE = 4  # test functions per file whose first node id is kept (the rest: name and count)
FIX_LOOKBACK = 40
SUITE_TOP = 36  # test files kept whole besides the A10G scripts', the windows' and the xfail ones
_NOT_CODE = re.compile(r"doc|typo|comment|fix\((?:ci|docker|build|test)\)|ci harness|source tree", re.I)
_FIX = re.compile(r"^(fix\b|fix\(|fix:|fix/|\[bug\]|\[bugfix\]|\[fix\]|bugfix|hotfix)", re.I)
_REVERT_PR = re.compile(r"^Revert (?:PR |#)(\d+)")
_NAMED = re.compile(r"(?:from|by|in|after|of) #(\d+)")
_PR = re.compile(r"\(#(\d+)\)\s*$")
PARTS = tuple(f"scripts/task_jit_run_tests_part{i}.sh" for i in range(1, 6))


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True,
                          text=True, errors="replace").stdout


def blobs(git_dir: str, commit: str, paths: list[str]) -> dict[str, str]:
    """Many files of one commit through one ``git cat-file --batch``."""
    request = "".join(f"{commit}:{p}\n" for p in paths).encode()
    out = subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "--batch"], input=request, check=True,
                         capture_output=True).stdout
    texts, pos = {}, 0
    for path in paths:
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].split()
        if header[-1] == b"missing":
            pos = header_end + 1
            continue
        size = int(header[2])
        texts[path] = out[header_end + 1:header_end + 1 + size].decode("utf-8", "replace")
        pos = header_end + 1 + size + 1
    return texts


def commits(git_dir: str, end: str, count: int) -> list[dict]:
    """The first-parent commits, oldest first, with their kept touched files."""
    log = git(git_dir, "log", "--first-parent", "--diff-merges=first-parent", "--name-only",
              "--format=%x01%H%x02%ct%x02%an%x02%s", f"-{count}", end)
    out = []
    for chunk in log.split("\x01")[1:]:
        head, _, files = chunk.partition("\n")
        sha, when, author, subject = head.split("\x02", 3)
        touched = [f for f in files.split("\n") if f.strip()]
        pr = _PR.search(subject)
        out.append({"sha": sha, "time": int(when), "author": author, "pr": int(pr.group(1)) if pr else None,
                    "subject": subject, "files": [f for f in touched if f.startswith(KEPT)],
                    "other_files": sum(1 for f in touched if not f.startswith(KEPT))})
    return out[::-1]


def test_files(git_dir: str, end: str) -> dict[str, dict]:
    """Every tests/**/test_*.py at ``end`` with its functions and dependencies."""
    listing = git(git_dir, "ls-tree", "-r", "--name-only", end).splitlines()
    tests = sorted(p for p in listing if p.startswith("tests/") and re.search(r"/test_[^/]*\.py$", p))
    py = [p for p in listing if p.startswith("flashinfer/") and p.endswith(".py")]
    known = {p[:-3] for p in py} | {str(Path(p).parent) for p in py}
    texts = blobs(git_dir, end, tests + py)
    exports = parse.package_exports(texts.get("flashinfer/__init__.py", ""))
    gens: dict[str, str] = {}
    for path in py:
        if path.startswith("flashinfer/jit/"):
            gens.update(parse.gen_function_bodies(texts[path]))
    csrc_wanted: set[str] = set()
    module_jit: dict[str, list[str]] = {}
    for module in sorted(known):
        source = "\n".join(texts[p] for p in py if p == f"{module}.py" or p.startswith(f"{module}/"))
        module_jit[module] = parse.jit_sources(source, gens)
        csrc_wanted.update(module_jit[module])
    csrc = blobs(git_dir, end, sorted(csrc_wanted))
    out = {}
    for path in tests:
        source = texts[path]
        modules = parse.imported_modules(source, exports, known)
        jit = sorted({f for m in modules for f in module_jit.get(m, []) if f in csrc})
        heads = sorted({h for f in jit for h in parse.includes(csrc[f])})
        info = parse.TestFile(parse.test_functions(source), modules + jit + heads,
                              bool(re.search(r"from_pretrained|hf_hub_download|snapshot_download|download", source)),
                              path.startswith("tests/comm/"))
        out[path] = compact(info)
    return out


def compact(info: parse.TestFile) -> dict:
    """A test file as the data file keeps it: functions as [name, count, xfail, first id or ""]
    (the first id for the first `IDS_PER_FILE` functions only)."""
    funcs = [[f.name, f.count, int(f.xfail), f.ids[0] if i < IDS_PER_FILE else ""] for i, f in enumerate(info.funcs)]
    return {"funcs": funcs, "modules": info.modules, "hub": int(info.hub), "comm": int(info.comm)}


def script_files(git_dir: str, end: str) -> list[list[str]]:
    """The test files each ``task_jit_run_tests_partN.sh`` runs with ``pytest -s`` (A10G shards)."""
    texts = blobs(git_dir, end, list(PARTS))
    return [re.findall(r"^pytest -s (tests/\S+\.py)", texts.get(p, ""), re.M) for p in PARTS]


def _subject_title(subject: str) -> str:
    return _PR.sub("", subject).strip()


def reached(path: str, tests: dict[str, dict]) -> list[str]:
    """The test files a change to ``path`` plausibly affects."""
    return [t for t, info in tests.items() if parse.affects([path], t, info["modules"])]


def windows(history: list[dict], tests: dict[str, dict]) -> list[dict]:
    """Each real revert or fix and the commit it repairs, with the test files that both touch."""
    by_pr = {c["pr"]: i for i, c in enumerate(history) if c["pr"]}
    found = []
    for i, commit in enumerate(history):
        subject = commit["subject"]
        breaker = None
        kind = ""
        if subject.startswith('Revert "'):
            title = _subject_title(subject[len('Revert "'):].rsplit('"', 1)[0])
            breaker = next((j for j in range(i - 1, -1, -1) if _subject_title(history[j]["subject"]) == title), None)
            kind = "revert"
        elif (number := _REVERT_PR.match(subject)) and int(number.group(1)) in by_pr:
            breaker, kind = by_pr[int(number.group(1))], "revert"
        elif _FIX.search(subject) and not _NOT_CODE.search(subject):
            kind = "fix"
            named = [by_pr[int(n)] for n in _NAMED.findall(subject) if int(n) in by_pr and by_pr[int(n)] < i]
            code = {f for f in commit["files"] if not f.startswith("tests/")}
            breaker = named[-1] if named else next(
                (j for j in range(i - 1, max(-1, i - FIX_LOOKBACK - 1), -1)
                 if code & {f for f in history[j]["files"] if not f.startswith("tests/")}), None)
        if breaker is None:
            continue
        shared = [f for f in commit["files"] if f in history[breaker]["files"] and not f.startswith("tests/")]
        shared = shared or [f for f in history[breaker]["files"] if not f.startswith("tests/")]
        hit = sorted({t for f in shared if len(reach := reached(f, tests)) <= WIDE for t in reach})
        # the tests the repair itself edits first: the ones its author saw fail
        hit.sort(key=lambda t: (t not in commit["files"], t))
        if hit:
            found.append({"kind": kind, "breaker": history[breaker]["sha"], "fixer": commit["sha"],
                          "tests": hit[:MAX_WINDOW_TESTS]})
    return found


def suite(history: list[dict], tests: dict[str, dict], parts: list[list[str]], found: list[dict]) -> list[str]:
    """The test files kept whole: the A10G scripts', the windows', the ones with an xfail mark, and
    the `SUITE_TOP` that most of the window's commits plausibly affect."""
    touched = {t: sum(parse.affects(c["files"], t, info["modules"]) for c in history) for t, info in tests.items()}
    top = sorted(tests, key=lambda t: (-touched[t], t))[:SUITE_TOP]
    keep = {t for part in parts for t in part} | {t for w in found for t in w["tests"]} | set(top)
    keep |= {t for t, info in tests.items() if any(f[2] for f in info["funcs"])}
    return sorted(t for t in keep if t in tests)


def pack(history: list[dict], tests: dict[str, dict], kept: list[str]) -> tuple[list[str], dict, list[dict], list[str]]:
    """The data file's shape: dependency paths as indices into one table, whole function lists for
    the kept files only (the others: function and case counts), commits' files cut to those a test
    reaches or is, as indices into one table of touched files."""
    paths = sorted({m for info in tests.values() for m in info["modules"]})
    index = {p: i for i, p in enumerate(paths)}
    packed = {}
    for t, info in tests.items():
        entry = {"deps": [index[m] for m in info["modules"]], "hub": info["hub"], "comm": info["comm"],
                 "functions": len(info["funcs"]), "cases": sum(f[1] for f in info["funcs"])}
        if t in kept:
            entry["funcs"] = info["funcs"]
        packed[t] = entry
    cut = []
    for c in history:
        files = [f for f in c["files"] if f in tests or _reaches(f, paths)]
        cut.append({**c, "files": files, "other_files": c["other_files"] + len(c["files"]) - len(files)})
    touched = sorted({f for c in cut for f in c["files"]})
    where = {f: i for i, f in enumerate(touched)}
    cut = [{**c, "files": [where[f] for f in c["files"]]} for c in cut]
    return paths, packed, cut, touched


def _reaches(path: str, deps: list[str]) -> bool:
    return any(parse.affects([path], "", [d]) for d in deps)


def extract(git_dir: str, end: str = END, count: int = COUNT) -> dict:
    """The data file's content."""
    history = commits(git_dir, end, count)
    tests = test_files(git_dir, end)
    parts = script_files(git_dir, end)
    found = windows(history, tests)
    paths, packed, cut, touched = pack(history, tests, suite(history, tests, parts, found))
    return {"repo": "flashinfer-ai/flashinfer", "first": history[0]["sha"], "last": history[-1]["sha"],
            "count": len(history),
            "command": f"python -m bench._history_gen11_extract GIT_DIR --end {end} --count {count}",
            "commits": cut, "touched": touched, "paths": paths, "tests": packed, "a10g_parts": parts, "windows": found}


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: python -m bench._history_gen11_extract GIT_DIR [--end SHA] [--count N] [--out PATH]",
              file=sys.stderr)
        return 2
    opts = dict(zip(argv[1::2], argv[2::2]))
    try:
        data = extract(argv[0], opts.get("--end", END), int(opts.get("--count", COUNT)))
    except (subprocess.CalledProcessError, ValueError) as exc:
        print(f"bench._history_gen11_extract: cannot read {argv[0]}: {exc}", file=sys.stderr)
        return 2
    Path(opts.get("--out", DATA)).write_text(json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
