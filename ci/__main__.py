"""``python -m ci <command> [args]``: the CI orchestration entry point.

Each command lives in ``ci/commands/<name>.py`` and exposes ``main(argv: list[str]) -> int``;
this dispatcher imports only the one asked for, so ``lint`` never pays for torch or pytest.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, str] = {
    "lint": "check registry.yaml, the test tree and first-party imports",
    "plan": "select and shard the tests of a tier (text, JSON or a GitHub Actions matrix)",
    "deps": "a test's import closure, or the tests a change to a file or module selects",
    "run": "run a tier or one shard through pytest and summarise it",
    "durations": "fold JUnit timings into recorded durations and report est_time drift",
    "job": "the main job: lint, then plan and run the cpu tier, then print the summary",
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: python -m ci <command> [--help] [args]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, help_ in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"python -m ci: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"ci.commands.{name}")
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
