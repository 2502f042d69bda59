"""Which suites a repository runs on pull requests only when a label opts in, from its workflows.

SGLang tags its ``extra-*`` suites per-commit (they are in ``PER_COMMIT_SUITES``) but runs them
from ``pr-test-extra.yml``, which needs the ``run-ci-extra`` label on top of the ``run-ci`` every
PR test needs: at d89b678d6 as ``contains(github.event.pull_request.labels.*.name, 'run-ci-extra')``
in a job's ``if:``, at 30cb848d4 as ``require-run-ci-extra: true`` passed to its gate workflow.

The rule, per workflow file (YAML, so comments never count):

* it *names* a suite when a string in it (a key, a value, a command line) holds the suite's name
  as a whole word (``[A-Za-z0-9_.-]`` on neither side);
* it *requires* label ``L`` when an ``if:`` holds ``contains(github.event.pull_request.labels.*.name,
  'L')`` not negated by a ``!`` right before it, or a ``with:`` passes ``require-L: true``;
* a suite is label-gated when every workflow naming it requires some label that not every
  workflow naming a suite requires (the extra opt-in, not the baseline label all PR tests need).

Limits: a label checked in a shell step, a job-level gate that covers only some of a workflow's
suites, or a suite named through a computed expression is not seen; ``--label-gated GLOB``
declares such suites by hand. Nothing is run.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import yaml

from ci.regular_file import MAX_CONFIG_BYTES, read_regular

_CONTAINS = re.compile(r"(!?)\s*contains\(\s*github\.event\.pull_request\.labels\.\*\.name\s*,\s*'([^']+)'\s*\)")
_REQUIRE = re.compile(r"^require-(.+)$")
_WORD = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Gate:
    """``suite`` runs on pull requests only with the label(s) ``labels``, as ``workflows`` say."""

    suite: str
    labels: tuple[str, ...]
    workflows: tuple[str, ...]

    def describe(self) -> str:
        """One phrase for notes: the labels and where."""
        return f"label {', '.join(self.labels)} ({', '.join(self.workflows)})"


def _strings(node: object) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str):
                yield key
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _required_labels(node: object) -> set[str]:
    out: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "if" and isinstance(value, str):
                out |= {label for bang, label in _CONTAINS.findall(value) if not bang}
            elif key == "with" and isinstance(value, dict):
                out |= {m.group(1) for k, v in value.items() if v is True and isinstance(k, str)
                        for m in [_REQUIRE.match(k)] if m}
            out |= _required_labels(value)
    elif isinstance(node, list):
        for item in node:
            out |= _required_labels(item)
    return out


def _workflows(folder: Path) -> Iterator[tuple[str, object]]:
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith((".yml", ".yaml")))
    except OSError:
        return
    for name in names:
        try:
            yield name, yaml.safe_load(read_regular(folder / name, MAX_CONFIG_BYTES).decode("utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # a workflow GitHub could not run either gates nothing


def label_gated_suites(workflows: Path, suites: Iterable[str]) -> dict[str, Gate]:
    """suite -> its `Gate`, for each of ``suites`` the workflow files in ``workflows`` (a folder)
    run only behind an opt-in label (see the module docstring); {} without workflows."""
    wanted = set(suites)
    naming: dict[str, list[str]] = {}
    labels: dict[str, set[str]] = {}
    for name, doc in _workflows(workflows):
        found = {w for s in _strings(doc) for w in _WORD.findall(s) if w in wanted}
        if found:
            labels[name] = _required_labels(doc)
            for suite in found:
                naming.setdefault(suite, []).append(name)
    if not labels:
        return {}
    baseline = set.intersection(*labels.values())
    gates: dict[str, Gate] = {}
    for suite, files in sorted(naming.items()):
        extra = [labels[f] - baseline for f in files]
        if all(extra):
            gates[suite] = Gate(suite, tuple(sorted(set().union(*extra))), tuple(files))
    return gates


__all__ = ["Gate", "label_gated_suites"]
