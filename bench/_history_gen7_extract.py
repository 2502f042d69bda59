"""Extract gen7's real skeleton from a clone of SGLang (never importing SGLang): ::

    python -m bench._history_gen7_extract GIT_DIR > bench/_history_gen7_data.json

``GIT_DIR`` is a clone (bare is enough) holding `SPAN`'s commits. Written: the span's first-parent
commits, oldest first (sha, committer time, author, subject, touched files), and the per-commit
CUDA test files of the span's first commit under ``test/registered/`` (suite from their
``register_cuda_ci(...)`` call, test methods with lines, the SGLang modules they import two
levels deep), read with ``git show`` and `ast`. Only a test's own file and imported modules are
kept per commit, each as an index into ``paths``, so the file stays small;
`bench._history_gen7_story` turns it into windows.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import asdict, dataclass

# SGLang main, first-parent: 251 consecutive merged commits, 2026-06-17 .. 2026-06-23.
SPAN = ("732b81d5b9d36fee96fc922065af8a65d249b411", "5338e4448300c5bf131f77a9308b0d0757e8ce84")
PER_COMMIT_STAGES = ("base-a", "base-b", "base-c")
MAX_METHODS = 3
IMPORT_DEPTH = 2


@dataclass(frozen=True)
class TestFile:
    """A registered test file: its tier (stage + runner, or suite), methods ``(class, name, line)``
    and the repository files of the SGLang modules it imports (up to `IMPORT_DEPTH` levels)."""

    path: str
    tier: str
    methods: list[tuple[str, str, int]]
    imports: list[str]


@dataclass(frozen=True)
class Commit:
    """One first-parent commit; ``files`` only those that some kept test is or imports, ``touched``
    how many files it touched in all."""

    sha: str
    time: str
    author: str
    subject: str
    files: list[str]
    touched: int


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True,
                          text=True, errors="replace").stdout


class Blobs:
    """File texts of one commit through one ``git cat-file --batch`` process."""

    def __init__(self, git_dir: str, sha: str):
        self.sha = sha
        self.proc = subprocess.Popen(["git", "--git-dir", git_dir, "cat-file", "--batch"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.cache: dict[str, str | None] = {}

    def text(self, path: str) -> str | None:
        if path not in self.cache:
            assert self.proc.stdin and self.proc.stdout
            self.proc.stdin.write(f"{self.sha}:{path}\n".encode())
            self.proc.stdin.flush()
            header = self.proc.stdout.readline().split()
            if header[-1] == b"missing":
                self.cache[path] = None
            else:
                data = self.proc.stdout.read(int(header[2]) + 1)[:-1]
                self.cache[path] = data.decode("utf-8", "replace")
        return self.cache[path]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait()


def module_file(blobs: Blobs, dotted: str) -> str | None:
    """``sglang.srt.utils`` -> ``python/sglang/srt/utils.py`` (or its package's __init__)."""
    base = "python/" + dotted.replace(".", "/")
    for candidate in (base + ".py", base + "/__init__.py"):
        if blobs.text(candidate) is not None:
            return candidate
    return None


def sglang_imports(blobs: Blobs, path: str) -> set[str]:
    """The repository files of the ``sglang`` modules ``path`` imports (``from a import b`` tries
    ``a.b`` as a module first)."""
    try:
        tree = ast.parse(blobs.text(path) or "")
    except SyntaxError:
        return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for name in names:
            if name.split(".")[0] == "sglang":
                found = module_file(blobs, name)
                if found:
                    out.add(found)
    return out


def registration(tree: ast.Module) -> str | None:
    """The per-commit tier of a ``register_cuda_ci(...)`` call, None when nightly or another stage."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "register_cuda_ci":
            kw = {k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)}
            if kw.get("nightly") or kw.get("disabled"):
                return None
            if kw.get("stage") in PER_COMMIT_STAGES:
                return f"{kw['stage']}-{kw.get('runner_config', '')}"
            suite = str(kw.get("suite", ""))
            return suite if suite.startswith(PER_COMMIT_STAGES) else None
    return None


def methods(tree: ast.Module) -> list[tuple[str, str, int]]:
    out = [(cls.name, fn.name, fn.lineno) for cls in tree.body if isinstance(cls, ast.ClassDef)
           for fn in cls.body if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test")]
    out += [("", fn.name, fn.lineno) for fn in tree.body
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test")]
    return out[:MAX_METHODS]


def test_files(git_dir: str, sha: str) -> list[TestFile]:
    """The per-commit CUDA test files at ``sha``."""
    blobs = Blobs(git_dir, sha)
    out = []
    paths = [p for p in git(git_dir, "ls-tree", "-r", "--name-only", sha, "test/registered").split()
             if p.rsplit("/", 1)[-1].startswith("test_") and p.endswith(".py")]
    for path in sorted(paths):
        try:
            tree = ast.parse(blobs.text(path) or "")
        except SyntaxError:
            continue
        tier, found = registration(tree), methods(tree)
        if not tier or not found:
            continue
        seen, level = set(), {path}
        for _ in range(IMPORT_DEPTH):
            level = {m for p in level for m in sglang_imports(blobs, p)} - seen
            seen |= level
        out.append(TestFile(path, tier, found, sorted(seen)))
    blobs.close()
    return out


def commits(git_dir: str, first: str, last: str, keep: set[str]) -> list[Commit]:
    log = git(git_dir, "log", "--first-parent", "--reverse", "--name-only",
              "--format=%x00%H%x1f%cI%x1f%an%x1f%s", f"{first}^..{last}")
    out = []
    for chunk in log.split("\0")[1:]:
        head, _, names = chunk.partition("\n")
        sha, time, author, subject = head.split("\x1f")
        files = [n for n in names.split("\n") if n]
        out.append(Commit(sha, time, author, subject, sorted(set(files) & keep), len(files)))
    return out


def extract(git_dir: str) -> dict:
    first, last = SPAN
    git(git_dir, "rev-parse", "--verify", "--quiet", f"{last}^{{commit}}")
    tests = test_files(git_dir, first)
    keep = {t.path for t in tests} | {m for t in tests for m in t.imports}
    paths = sorted(keep)
    index = {p: i for i, p in enumerate(paths)}
    rows = [asdict(t) | {"imports": [index[m] for m in t.imports]} for t in tests]
    log = [asdict(c) | {"files": [index[f] for f in c.files]} for c in commits(git_dir, first, last, keep)]
    return {"span": list(SPAN), "command": "python -m bench._history_gen7_extract GIT_DIR",
            "paths": paths, "tests": rows, "commits": log}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench._history_gen7_extract GIT_DIR (a clone of sgl-project/sglang)", file=sys.stderr)
        return 2
    try:
        data = extract(argv[0])
    except subprocess.CalledProcessError as exc:
        why = (exc.stderr.strip().splitlines() or ["no such commit"])[0][:200]
        print(f"{argv[0]}: git failed ({why}); give a clone of sgl-project/sglang holding {SPAN[1][:12]}",
              file=sys.stderr)
        return 2
    json.dump(data, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
