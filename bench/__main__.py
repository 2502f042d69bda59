"""Run every benchmark, or one: ``python -m bench [name] [--quick]``."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

_NOT_BENCHMARKS = {"table"}
BY_NAME_ONLY = ("gpu", "planwalk")
"""Run only when named: a machine check (`python -m bench gpu` exits 2 without CUDA) and a
benchmark of another tree (`planwalk` needs `--tree` and `--commits`; it has no `--quick` size),
so running every benchmark on a CPU machine leaves them out."""


def available() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)])
                  if not m.name.startswith("_") and m.name not in _NOT_BENCHMARKS and m.name not in BY_NAME_ONLY)


def split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """Benchmark names, and the flags passed to each benchmark in order. A word that follows a
    flag without ``=`` and is not a benchmark name is that flag's value (``--tree pytest``); ``--``
    and everything after it are flags as given (a command, ``bench depmap --observe -- make test``)."""
    names: list[str] = []
    flags: list[str] = []
    known = {*available(), *BY_NAME_ONLY}
    own, command = (args[:args.index("--")], args[args.index("--"):]) if "--" in args else (args, [])
    for arg in own:
        if arg.startswith("-"):
            flags.append(arg)
        elif flags and "=" not in flags[-1] and flags[-1].startswith("--") and arg not in known:
            flags.append(arg)
        else:
            names.append(arg)
    return names, flags + command


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if {"-h", "--help"} & set(args[:args.index("--")] if "--" in args else args):
        print(f"usage: python -m bench [name ...] [--quick] [benchmark flags]\n\nbenchmarks: {', '.join(available())}\n"
              f"run only when named: {', '.join(BY_NAME_ONLY)}\n"
              "each prints a table whose ratios are against a baseline measured in the same run;\n"
              "`python -m bench NAME --help` is not forwarded: see the module docstring of bench/NAME.py")
        return 0
    names, flags = split_args(args)
    unknown = sorted(set(names) - {*available(), *BY_NAME_ONLY})
    if unknown:
        print(f"python -m bench: unknown benchmark(s) {', '.join(unknown)}; available: "
              f"{', '.join([*available(), *BY_NAME_ONLY])}",
              file=sys.stderr)
        return 2
    status = 0
    for name in names or available():
        print(f"== bench/{name}.py {' '.join(flags)}".rstrip(), flush=True)
        status |= int(importlib.import_module(f"bench.{name}").main(flags) or 0)
        print(flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
