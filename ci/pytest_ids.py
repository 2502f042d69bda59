"""Run only the node ids a plan narrowed its files to: ``pytest -p ci.pytest_ids --ci-ids FILE FILES...``.

`ci plan --ids-out FILE` writes FILE (`ci.selection.plan.ids_file_text`): one pytest node id per
line for a file narrowed to ids, one repo-relative path per line for a file that runs whole. A
file is the way through: node ids with brackets, spaces or escaped unicode in their parameters
need no shell quoting, and ten thousand of them no command line.

Contract: after collection, an item is kept when its node id is listed, or its file is listed as a
path, or its file is named by no line at all (never run less than the command's files); every
other item is deselected (pytest's ``deselected`` count). A listed id that was not collected
(renamed, a parameter that changed) runs its whole file instead, and the terminal summary names
it: selection may run more than it said, never less. A FILE that cannot be read is a usage error
(pytest's exit 4) naming it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_MISSING = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("ci").addoption("--ci-ids", metavar="FILE", default=None,
                                    help="run only the node ids (and whole files) FILE lists, one per line")


def _matches(item: pytest.Item, file: str) -> bool:
    """Whether ``item`` lies in the repo-relative ``file`` (node ids' file parts are relative to
    pytest's rootdir, which depends on how pytest was started: the item's own path decides)."""
    return item.path.as_posix().endswith("/" + file)


def _rest(nodeid: str) -> str:
    return nodeid.split("::", 1)[1] if "::" in nodeid else ""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    source = config.getoption("ci_ids")
    if not source:
        return
    try:
        lines = [line for line in Path(source).read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--ci-ids {source}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    wanted: dict[str, set[str]] = {}  # the part after the file -> the files it is listed in
    whole = {line for line in lines if "::" not in line}
    for line in lines:
        if "::" in line:
            file, rest = line.split("::", 1)
            wanted.setdefault(rest, set()).add(file)
    found: set[str] = set()
    keep, drop = [], []
    for item in items:
        hit = next((f for f in wanted.get(_rest(item.nodeid), ()) if _matches(item, f)), None)
        if hit is not None:
            found.add(f"{hit}::{_rest(item.nodeid)}")
        (keep if hit is not None else drop).append(item)
    missing = sorted(f"{f}::{rest}" for rest, files in wanted.items() for f in files if f"{f}::{rest}" not in found)
    whole |= {node.split("::", 1)[0] for node in missing}
    named = whole | {f for files in wanted.values() for f in files}
    for item in list(drop):
        if any(_matches(item, f) for f in whole) or not any(_matches(item, f) for f in named):
            drop.remove(item)
            keep.append(item)
    config.stash[_MISSING] = missing
    if drop:
        config.hook.pytest_deselected(items=drop)
        kept = set(map(id, keep))
        items[:] = [item for item in items if id(item) in kept]


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:  # noqa: ANN001 (pytest's type)
    missing = config.stash.get(_MISSING, [])
    if missing:
        files = sorted({node.split("::", 1)[0] for node in missing})
        terminalreporter.write_line(f"ci-ids: {len(missing)} listed id(s) no longer exist ({missing[0]}"
                                    f"{' ...' if len(missing) > 1 else ''}): ran {', '.join(files)} whole")
