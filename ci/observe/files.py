"""Which paths a recording keeps, and the log of files a process opened (an audit hook).

Shared by the pytest process (`ci.observe.record`) and every Python subprocess a recorded
test starts (`ci.observe.coverage_child`). The environment carries the recording between them:
`PARTS_ENV` (the directory where every process leaves its parts), `ROOT_ENV` (the repository) and
`TEST_ENV` (the test file running now, so a subprocess's work is the test's).

Contract:
- `RepoFiles.relative` keeps a path only if it lies inside the repository and not in an
  interpreter's tree (a virtualenv inside the repository, ``site-packages``), ``__pycache__`` or
  ``.git``, nor in the recorder's own modules, and is no generated code object's name (a part
  that starts with ``<``); it returns the repo-relative POSIX path or None.
- `OpenedLog` is an audit hook on "open" events for reading: each new (test file, path) pair is
  appended at once as one ``test\\tpath`` line to ``opened.<pid>.log`` in the parts directory, so
  a process killed later (a server stopped with SIGKILL) loses nothing it opened before. Opens
  for writing are not dependencies and are left out; so are opens outside any test (context "").
  A Python source (``.py``) is kept only when it is read as data: not by the import system or
  pytest's assertion rewriting (they read it to run it, and the lines say what ran), nor by
  ``linecache`` (a traceback's or a warning's source line). A test that runs ``ci lint`` over the
  tree, or otherwise parses or hashes the repository's sources, depends on every file it read,
  whatever of it ran (bytecode caches, ``.pyc``, are never kept).
  Only a path that names a regular file in the repository is kept: the event does not say
  whether a relative name was relative to a ``dir_fd`` (``shutil.rmtree`` opens every directory
  it deletes that way), and directories are not dependencies.
  Audit hooks cannot be removed: `OpenedLog.stop` makes the hook a no-op.
- `write_lines` writes a process's lines at its end as one JSON line per context, the
  ``clines.*.jsonl`` part `ci.observe.merge` reads without coverage.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

RECORD_ENV = "CI_DEPMAP"  # the map file a recording pytest writes (`ci run --record-depmap`)
PARTS_ENV = "CI_DEPMAP_PARTS"
ROOT_ENV = "CI_DEPMAP_ROOT"
TEST_ENV = "CI_DEPMAP_TEST"
OBSERVE_ENV = "CI_OBSERVE"  # an observed command (`ci observe`): "roots|patterns" of its test files
# set by an observed command's recording pytest process: its xdist workers are measured by their
# own recorders, not as the command's non-test processes
OBSERVED_PYTEST_ENV = "CI_OBSERVE_PYTEST"
CHILD_CORE_ENV = "CI_DEPMAP_CHILD_CORE"  # "slipcover": subprocesses by the recorder's own start-up hook
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# .ci-cache: ci's own caches (`ci.cache_folder`), the recorder's probe edits among them
_SKIPPED_PARTS = frozenset({"__pycache__", ".git", "site-packages", "dist-packages", ".ci-cache"})
_SHARED_MARK = "\x1f"  # starts a shared context's name; no repo-relative path starts with it
_KINDS = ("collect", "fixture")


def write_lines(final: Path, contexts: dict[str, dict[str, set[int]]]) -> None:
    """Write ``{context: {absolute path: sorted lines}}``, one JSON line per context with lines, to
    ``final`` (a ``clines.*.jsonl`` name); under a temporary name renamed when whole, so the merge
    never reads a torn part (a pool worker's SIGTERM mid-write). Nothing when no line ran."""
    records = [json.dumps({context: {path: sorted(lines) for path, lines in files.items() if lines}})
               for context, files in contexts.items() if any(files.values())]
    if not records:
        return
    partial = final.with_name(".partial-" + final.name)
    partial.write_text("\n".join(records) + "\n", encoding="utf-8")
    os.replace(partial, final)


def collect_context(test: str) -> str:
    """The coverage context while ``test``'s module is collected (imported)."""
    return f"{_SHARED_MARK}collect{_SHARED_MARK}{test}"


def fixture_context(test: str) -> str:
    """The coverage context while a session- or package-scoped fixture is set up for ``test``."""
    return f"{_SHARED_MARK}fixture{_SHARED_MARK}{test}"


def read_context(context: str) -> tuple[str, bool]:
    """(the test file a coverage context's lines are for, "" for none; whether they are shared)."""
    if not context:
        return "", True  # the session outside any test
    if context.startswith(_SHARED_MARK):
        _, kind, test = context.split(_SHARED_MARK, 2) if context.count(_SHARED_MARK) >= 2 else ("", "", "")
        return (test, True) if kind in _KINDS else ("", True)
    return context, False


def destinations(context: str) -> frozenset[str]:
    """Where the merge puts a line recorded in ``context``: its test file's entry, the map's
    shared lines (``_SHARED_MARK``), or both."""
    test, is_shared = read_context(context)
    return frozenset(([test] if test else []) + ([_SHARED_MARK] if is_shared else []))


class Rearm:
    """Whether a context switch must make the lines recorded so far fire again (the cores that
    stop a line once it is recorded: `ci.observe.retire`, `ci.observe.sysmon_core`).

    A stopped line was recorded in a context since the last re-arm; when every place the merge
    puts such lines (`destinations`) is also a place of the new context, the new context's lines
    there are complete without hearing it again: collect(X) -> "" and fixture(X) -> X need none.
    Re-arming makes every later line call back once more, so skipping it saves that work; the
    map is the same. `needed` is told every switch, in order, starting from context ""."""

    def __init__(self) -> None:
        self.covered = destinations("")  # where every line stopped since the last re-arm went

    def needed(self, context: str) -> bool:
        """True when switching to ``context`` must re-arm (and then assumes it did)."""
        wanted = destinations(context)
        keep = wanted <= self.covered
        self.covered = wanted
        return not keep


class RepoFiles:
    """Turns absolute paths into repo-relative ones, or None for paths a map leaves out."""

    def __init__(self, root: str | os.PathLike[str]):
        self.roots = tuple(dict.fromkeys((os.path.abspath(root), os.path.realpath(root))))
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
        self.excluded = tuple(p + os.sep for p in sorted({os.path.realpath(p) for p in prefixes} | prefixes))
        self.own_dir = os.path.dirname(os.path.abspath(__file__))
        self.memo: dict[str, str | None] = {}

    def relative(self, path: str) -> str | None:
        """See the module docstring."""
        found = self.memo.get(path, "")
        if found != "":
            return found
        rel = self._relative(path)
        self.memo[path] = rel
        return rel

    def _relative(self, path: str) -> str | None:
        # generated code names no file: ``<string>``, torch's ``<_remote_module_non_scriptable>.py``;
        # relative, such a name would resolve against the working directory, often the root
        if any(part.startswith("<") for part in path.split(os.sep)):
            return None
        full = os.path.abspath(path)
        if full.startswith(self.excluded):
            return None
        if os.path.dirname(full) == self.own_dir:  # the recorder's own package: never part of a map
            return None
        for root in self.roots:
            if full.startswith(root + os.sep):
                rel = full[len(root) + 1:].replace(os.sep, "/")
                return None if _SKIPPED_PARTS.intersection(rel.split("/")) else rel
        return None


def _reads(mode: object, flags: object) -> bool:
    if isinstance(mode, str):
        return not any(c in mode for c in "wax+")
    return isinstance(flags, int) and not flags & _WRITE_FLAGS


_RUNNERS = ("_pytest/assertion/rewrite.py", os.sep + "linecache.py")
_DEPTH = 3  # the opener and two callers: pathlib.read_bytes <- rewrite; tokenize.open <- linecache


def _read_to_run(opener: int = 2) -> bool:
    """Whether the open being audited is the import system's, pytest's rewriting of a test
    module, or linecache's, rather than a read of the file as data: one of the opener's nearest
    frames is theirs (pytest reads through ``pathlib``, linecache through ``tokenize``). Frame
    ``opener`` is the opener: 0 is this function, 1 `OpenedLog._hook`, then the audit hook that
    calls it, which C calls from the opener's frame. An open with no Python frame above it is the
    interpreter's own (a script it runs)."""
    try:
        frame = sys._getframe(opener)
    except ValueError:
        return True
    for _ in range(_DEPTH):
        if frame is None:
            return False
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib") or name.endswith(_RUNNERS):
            return True
        frame = frame.f_back
    return False


def _own_test(argv: object, cwd: object) -> str:
    """The test file an unheard child of an observed runner would have been, "" when none."""
    from ci.observe.argv_test_file import test_file_of  # deferred: only an observed runner needs it

    if not isinstance(argv, (list, tuple)) or not all(isinstance(a, str) for a in argv):
        return ""
    here = os.fsdecode(cwd) if isinstance(cwd, (str, bytes, os.PathLike)) else os.getcwd()
    return test_file_of(list(argv), here, os.environ.get(ROOT_ENV, ""), os.environ.get(OBSERVE_ENV, "")) or ""


class OpenedLog:
    """The "open" audit hook of one process; see the module docstring."""

    def __init__(self, files: RepoFiles, parts: str | os.PathLike[str]):
        self.files = files
        self.log_path = Path(parts) / f"opened.{os.getpid()}.log"
        self.context = ""
        self.seen: set[tuple[str, str]] = set()
        self.active = False
        self._out = None

    def start(self) -> None:
        self.active = True
        hook = self._hook

        def audit(event: str, args: tuple) -> None:
            # every audit event of the process comes here (rich's suite: 133,000 on 3.12, most of them
            # ``builtins.id`` and ``object.__getattr__``); CPython calls a plain function about three
            # times faster than a bound method, and only two events go further
            if event == "open" or event == "subprocess.Popen":
                hook(event, args, 3)  # the opener is one frame further: this function's caller

        sys.addaudithook(audit)

    def _spawning(self, args: tuple) -> None:
        """A child this test starts: one the recorder will not hear leaves the entry partial. In an
        observed command's process outside any test file (a runner), the child's own test file's."""
        self.active = False  # what follows imports and opens files (a script's #! line)
        try:  # an audit hook must never break the program it watches
            try:
                # deferred: most recorded processes start no child, and every one imports this module
                from ci.observe.live import mark_unheard
                from ci.observe.unheard import unheard_reason
            except Exception:  # noqa: BLE001
                return
            try:
                executable, argv, cwd, env = args
                reason = unheard_reason(executable, argv, env, os.environ, sys.executable,
                                        (PARTS_ENV, ROOT_ENV, TEST_ENV if self.context else OBSERVE_ENV))
            except Exception:  # noqa: BLE001 - a child it cannot judge is not trusted
                reason, argv, cwd = "a child the recorder could not judge", (), None
            if reason is not None:
                mark_unheard(str(self.log_path.parent), self.context or _own_test(argv, cwd), reason)
        finally:
            self.active = True

    def stop(self) -> None:
        self.active = False
        if self._out is not None:
            self._out.close()
            self._out = None

    def _hook(self, event: str, args: tuple, opener: int = 2) -> None:
        """One audit event; ``opener``: how many frames up from `_read_to_run` the opener is."""
        if event != "open":
            if event == "subprocess.Popen" and self.active and (self.context or os.environ.get(OBSERVE_ENV)):
                self._spawning(args)
            return
        if not self.active or not self.context:
            return
        path = args[0]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        elif not isinstance(path, str):
            path = os.fspath(path) if isinstance(path, os.PathLike) else None
        if path is None or not _reads(args[1], args[2]):
            return
        rel = self.files.relative(path)
        if rel is None or rel.endswith(".pyc") or (self.context, rel) in self.seen:
            return
        if rel.endswith(".py") and _read_to_run(opener):
            return
        self.seen.add((self.context, rel))
        # the event carries no dir_fd: a name relative to one (shutil.rmtree walks a tree by
        # os.open(name, dir_fd=...)) reads as relative to the working directory; and a directory
        # is not a dependency. What is not a file where the name points is left out.
        if not os.path.isfile(os.path.join(self.files.roots[0], rel)):
            return
        self.active = False  # our own open below must not come back here
        try:
            if self._out is None:
                self._out = open(self.log_path, "a", encoding="utf-8", buffering=1)
            self._out.write(f"{self.context}\t{rel}\n")
        except OSError:
            pass  # a full disk loses this line; the map is then a little smaller, never wrong
        finally:
            self.active = True
