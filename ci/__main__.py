"""``python -m ci [--root DIR] <command> [args]`` (or ``fp4kv-ci``): the CI orchestration entry point.

The repository root is ``--root DIR``, else the nearest directory at or above the working
directory that holds ``registry.yaml``; every command gets it from `ci.registry.find_repo_root`.
A command that needs a root and finds none says so and exits 2.

Each command lives in ``ci/commands/<name>.py`` (``-`` in a name becomes ``_``) and exposes
``main(argv: list[str]) -> int``; this dispatcher imports only the one asked for, so ``lint``
never pays for torch or pytest.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from ci.repo_root import REGISTRY_FILENAME, RepoRootNotFound, set_repo_root

COMMANDS: dict[str, str] = {
    "lint": "check registry.yaml, the test tree and first-party imports",
    "plan": "select and shard the tests of a tier (text, JSON or a GitHub Actions matrix)",
    "deps": "a test's import closure, or the tests a change to a file or module selects",
    "run": "run a tier or one shard through pytest and summarise it",
    "durations": "fold JUnit timings into recorded durations and report est_time drift",
    "job": "the main job: lint, then plan and run the cpu tier, then print the summary",
    "init": f"write a starter {REGISTRY_FILENAME} for this repository (its test files, one cpu tier)",
    "import-suites": "convert SGLang-style run_suite.py suites and register_*_ci() calls into registry entries",
    "history": "store JUnit reports in the test history (`history ingest`); whose each failing test is (`history verdicts`)",
    "flaky": "rank flaky tests from the history: score, credible interval, evidence, owner, example runs",
    "report": "the HUD: one static HTML page (and JSON) of the history, flaky tests, durations, plans, a pull request",
    "culprit": "which commit of a window broke a test: a flake-aware search within a budget of runs",
    "culprit-requests": "record and print the culprit searches a default-branch run's new breakages call for",
    "tiers": "move registered files to a tier (`tiers move`), with the timeout a GPU tier needs",
    "observe": "run an adopter's own test command and write what each test file ran (a runtime map with outcomes)",
    "quarantine": "quarantine flaky tests in registry.yaml from the history, and release cleared ones (dry run by default)",
}


def _prog() -> str:
    return "fp4kv-ci" if Path(sys.argv[0]).name == "fp4kv-ci" else "python -m ci"


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"usage: {_prog()} [--root DIR] <command> [--help] [args]", "",
             f"  --root DIR  the repository root (default: the nearest directory at or above the working",
             f"              directory that holds {REGISTRY_FILENAME})", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, help_ in COMMANDS.items()]
    return "\n".join(lines)


def _split_root(args: list[str]) -> tuple[str | None, list[str]]:
    """``--root DIR`` / ``--root=DIR`` before the command -> (DIR, the rest). ValueError if DIR is missing."""
    root = None
    while args and (args[0] == "--root" or args[0].startswith("--root=")):
        if args[0] == "--root":
            if len(args) < 2:
                raise ValueError("--root needs a directory")
            root, args = args[1], args[2:]
        else:
            root, args = args[0].split("=", 1)[1], args[1:]
    return root, args


# What a shell reports for a process killed by SIGPIPE (128 + 13): the reader left, as in `| head`.
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status. A reader that closes the pipe early (``| head``) ends
    the command quietly with `EXIT_BROKEN_PIPE`, never a traceback."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush cannot fail a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _main(argv: list[str] | None) -> int:
    try:
        root, args = _split_root(list(sys.argv[1:] if argv is None else argv))
    except ValueError as exc:
        print(f"{_prog()}: {exc}\n\n{_usage()}", file=sys.stderr)
        return 2
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"{_prog()}: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    if root is not None and not Path(root).is_dir():
        print(f"{_prog()}: --root {root}: not a directory", file=sys.stderr)
        return 2
    set_repo_root(root)
    try:
        module = importlib.import_module(f"ci.commands.{name.replace('-', '_')}")
        return int(module.main(rest) or 0)
    except RepoRootNotFound as exc:
        print(f"{_prog()} {name}: {exc}", file=sys.stderr)
        return 2
    finally:
        set_repo_root(None)  # an in-process caller (a test) must not inherit this run's root


if __name__ == "__main__":
    sys.exit(main())
