"""Pure readers of TransformerEngine's text for `bench._history_gen13_extract`: a qa script's pytest
invocations, a test file's test functions and parametrize counts, and the breakage windows its
first-parent subjects and messages name. No git here: each takes the text it reads."""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass

FIX_REACH = 12  # how many commits back an unnamed fix may reach for the commit it repairs
_PR = re.compile(r"\(#(\d+)\)\s*$")
_REF = re.compile(r"#(\d{3,5})\b")
_FIX = re.compile(r"\b(fix|fixes|fixed|bugfix)\b", re.I)
_NOT_CODE = re.compile(r"\b(typo|typos|readme|docs?|comment|label(er|ing)?|wheel|license|submodule)\b", re.I)
_STOP = {"fix", "fixes", "fixed", "bugfix", "the", "and", "for", "with", "from", "into", "when", "add", "use",
         "support", "pytorch", "jax", "common", "test", "tests", "after", "new", "not", "are", "that", "this"}


@dataclass(frozen=True)
class Commit:
    """One first-parent commit: ``files`` its first touched paths, ``nfiles`` how many it touched."""

    sha: str
    time: str
    author: str
    pr: int | None
    subject: str
    body: str
    files: list[str]
    nfiles: int


@dataclass(frozen=True)
class Job:
    """One ``pytest --junitxml=...`` line of a qa script: the XML it writes, what it runs
    (repository-relative, a file or a folder), its env prefix, ``-k`` and ``--ignore``s."""

    xml: str
    path: str
    env: str
    keyword: str
    ignore: list[str]
    config: str


@dataclass(frozen=True)
class Function:
    """A test function (``cls`` its ``Test*`` class or ""), its parametrize argnames and the product
    of its literal parametrize lengths (0 where one is not a literal the file spells out)."""

    cls: str
    name: str
    argnames: list[str]
    count: int


@dataclass(frozen=True)
class Window:
    """Main is broken from commit ``culprit`` (inclusive) to ``end`` (the revert or fix, exclusive)."""

    culprit: int
    end: int
    kind: str
    culprit_subject: str
    end_subject: str
    files: list[str]


def parse_pr(subject: str) -> int | None:
    """The pull request number a squash merge's subject ends with, ``(#N)``."""
    match = _PR.search(subject)
    return int(match.group(1)) if match else None


def _repo_path(token: str) -> str:
    return token.replace("$TE_PATH/", "").replace("${TE_PATH}/", "").rstrip("/")


def qa_jobs(script: str) -> list[Job]:
    """The pytest invocations of a qa ``test.sh`` that write JUnit, first line per XML name, only those
    running something under ``tests/`` (the examples' pytest runs are left out)."""
    jobs: dict[str, Job] = {}
    for raw in script.splitlines():
        line = raw.split("||")[0].strip().rstrip("&").strip()
        if line.startswith("#") or "--junitxml=" not in line or "pytest" not in line:
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        start = next(i for i, w in enumerate(words) if w.endswith("pytest") or w == "-m" or w == "python3")
        env = " ".join(w for w in words[:start] if "=" in w and not w.startswith("-"))
        xml, keyword, config, ignore, targets = "", "", "", [], []
        args = words[start:]
        for i, word in enumerate(args):
            if word.startswith("--junitxml="):
                xml = word.split("/")[-1]
            elif word == "-k" and i + 1 < len(args):
                keyword = args[i + 1]
            elif word == "-c" and i + 1 < len(args):
                config = _repo_path(args[i + 1])
            elif word.startswith("--ignore="):
                ignore.append(_repo_path(word.split("=", 1)[1]))
            elif "TE_PATH" in word and (i == 0 or args[i - 1] not in ("-c", "-k")):
                targets.append(_repo_path(word))
        targets = [t for t in targets if t.startswith("tests/")]
        if xml and targets and xml not in jobs:
            jobs[xml] = Job(xml, targets[0], env, keyword, ignore, config)
    return list(jobs.values())


def _literal_len(node: ast.expr, names: dict[str, ast.expr]) -> int:
    if isinstance(node, ast.Name) and node.id in names:
        node = names[node.id]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return len(node.elts)
    return 0


def _params(decorators: list[ast.expr], names: dict[str, ast.expr]) -> tuple[list[str], int]:
    argnames: list[str] = []
    count = 1
    for deco in decorators:
        if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)
                and deco.func.attr == "parametrize" and len(deco.args) >= 2):
            continue
        first = deco.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            argnames += [a.strip() for a in first.value.split(",") if a.strip()]
        elif isinstance(first, (ast.List, ast.Tuple)):
            argnames += [e.value for e in first.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        count *= _literal_len(deco.args[1], names)
    return argnames, count


def read_functions(text: str) -> list[Function]:
    """The file's module-level ``test_*`` functions and ``Test*`` classes' ``test_*`` methods, in order."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    names = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    out: list[Function] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            out.append(Function("", node.name, *_params(node.decorator_list, names)))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            outer, outer_count = _params(node.decorator_list, names)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test_"):
                    argnames, count = _params(item.decorator_list, names)
                    out.append(Function(node.name, item.name, outer + argnames, outer_count * count))
    return out


def _title(subject: str) -> str:
    return _PR.sub("", subject).strip()


def _words(subject: str) -> set[str]:
    return {w for w in re.findall(r"[a-z][a-z0-9_]{2,}", _title(subject).lower()) if w not in _STOP}


def _code(files: list[str]) -> set[str]:
    return {f for f in files if f.startswith(("transformer_engine/", "tests/"))}


def windows(commits: list[Commit]) -> list[Window]:
    """Reverts back to the commit they revert, and fixes back to the commit they name (``#N`` of one
    in the range, other than their own) or, unnamed, to the nearest of the `FIX_REACH` before them that
    shares a touched file under ``transformer_engine/`` or ``tests/`` and a subject word."""
    by_pr = {c.pr: i for i, c in enumerate(commits) if c.pr is not None}
    by_title = {_title(c.subject): i for i, c in enumerate(commits)}
    found: list[Window] = []
    for end, commit in enumerate(commits):
        culprit = None
        kind = ""
        match = re.match(r'Revert "(.*)"', commit.subject)
        if match:
            culprit, kind = by_title.get(_title(match.group(1))), "revert"
        elif _FIX.search(commit.subject) and not _NOT_CODE.search(commit.subject):
            named = [by_pr[int(n)] for n in _REF.findall(commit.subject + " " + commit.body)
                     if int(n) != commit.pr and by_pr.get(int(n), end) < end]
            if named:
                culprit, kind = max(named), "fix"
            else:
                for back in range(end - 1, max(-1, end - 1 - FIX_REACH), -1):
                    earlier = commits[back]
                    if _code(earlier.files) & _code(commit.files) and _words(earlier.subject) & _words(commit.subject):
                        culprit, kind = back, "fix"
                        break
        if culprit is not None and culprit < end:
            c = commits[culprit]
            found.append(Window(culprit, end, kind, c.subject, commit.subject, c.files))
    return found
