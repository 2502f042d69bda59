"""The registry's ``env:`` and ``pytest_args:`` for ``ci run``: which files run under which
environment and arguments, and one JUnit report from the several pytest runs that takes.

A file runs under its tier's ``env`` (when ``ci run`` names a tier) with its entry's ``env`` on top
(a name in both takes the entry's value), and with its tier's ``pytest_args`` then its entry's.
Files whose resulting (env, args) differ cannot share a pytest process, so ``ci run`` starts one
pytest per distinct pair, in the order the files came, each writing a part report that
`merge_junit` joins into the run's one report.
"""

from __future__ import annotations

import shlex
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ci.registry import Registry, normalize_path
from ci.results.junit import JUnitError


@dataclass(frozen=True)
class EnvGroup:
    """``files`` (in the order given) that run under ``env``, added to the caller's environment,
    with ``args`` added to their pytest command line."""

    env: Mapping[str, str]
    files: tuple[str, ...]
    args: tuple[str, ...] = ()

    def describe(self) -> str:
        """``NAME=value`` pairs, sorted, for the command line `ci run` prints ("" when none)."""
        return " ".join(f"{name}={value!r}" for name, value in sorted(self.env.items()))

    def describe_all(self) -> str:
        """`describe` and the args, for a message naming how groups differ."""
        return " ".join(filter(None, (self.describe() or "no env", shlex.join(self.args))))


def env_groups(files: Sequence[str], registry: Registry, tier: str | None) -> list[EnvGroup]:
    """``files`` split by (environment, pytest args): the tier's ``env`` then each entry's, the
    tier's ``pytest_args`` then each entry's; first-seen order. A file that is no registry key
    (``path::node`` targets are looked up by their path) gets the tier's alone."""
    tier_env = dict(registry.tiers[tier].env) if tier in registry.tiers else {}
    tier_args = registry.tiers[tier].pytest_args if tier in registry.tiers else ()
    groups: dict[tuple[tuple[tuple[str, str], ...], tuple[str, ...]], list[str]] = {}
    for target in files:
        entry = registry.tests.get(normalize_path(target.split("::", 1)[0]))
        env = {**tier_env, **(entry.env if entry is not None else {})}
        args = tier_args + (entry.pytest_args if entry is not None else ())
        groups.setdefault((tuple(sorted(env.items())), args), []).append(target)
    return [EnvGroup(dict(env), tuple(group), args) for (env, args), group in groups.items()]


def part_path(junit: Path, index: int) -> Path:
    """Where group ``index``'s pytest writes its report before `merge_junit` joins the parts."""
    return junit.with_name(f"{junit.stem}.part{index}{junit.suffix}")


def merge_junit(parts: Sequence[Path], out: Path) -> None:
    """Write one ``<testsuites>`` holding every ``<testsuite>`` of ``parts`` (what
    `ci.results.junit.parse_junit` reads as one run) to ``out``, then remove the parts, so that no
    upload or ingest of the report folder counts a test twice. Raises JUnitError (one line)."""
    top = ET.Element("testsuites")
    try:
        for part in parts:
            root = ET.parse(part).getroot()
            top.extend(root.findall("testsuite") if root.tag == "testsuites" else [root])
        tmp = out.with_name(out.name + ".tmp")
        ET.ElementTree(top).write(tmp, encoding="utf-8", xml_declaration=True)
        tmp.replace(out)
        for part in parts:
            part.unlink()
    except (OSError, ET.ParseError) as exc:
        raise JUnitError(f"{out}: cannot join the part reports of the run's env groups: {exc}") from exc


__all__ = ["EnvGroup", "env_groups", "merge_junit", "part_path"]
