"""One entry of ``tests:`` for the precise parser: every key's rule, each problem at its node.

Contract: `parse_entry` takes the `NodeReader` doing the parse and the tiers already parsed, and
returns the `TestEntry`, or None when it reported a problem (it reports every one it finds).
"""

from __future__ import annotations

import yaml

from ci.registry.model import INVALID_VALUE, MISSING_REASON, UNKNOWN_TIER, Status, TestEntry, Tier, normalize_path
from ci.registry.node_reader import NodeReader
from ci.registry.quarantine_parse import parse_evidence, parse_nodes
from ci.registry.rules import TEST_KEYS, TEST_REQUIRED, describe_scalar, reruns_problem
from ci.registry.step_parse import parse_env, parse_pytest_args


def parse_entry(parser: NodeReader, path: str, key_node: yaml.Node, node: yaml.Node,
                tiers: dict[str, Tier]) -> TestEntry | None:
    """The entry for test file ``path`` (its key at ``key_node``, its mapping ``node``), or None after a problem."""
    what = f"test {path!r}"
    if (fields := parser.record(node, what, TEST_KEYS, TEST_REQUIRED)) is None:
        return None
    before, value = len(parser.problems), fields.__getitem__

    test_tiers = parser.string_list(value("tiers"), f"{what} tiers")
    for item_node, tier in zip(value("tiers").value, test_tiers or ()):
        if tier not in tiers:
            parser.problem(item_node, UNKNOWN_TIER,
                         f"{what} names unknown tier {tier!r}; known tiers: {', '.join(tiers) or '(none)'}")
    est_time = parser.seconds(value("est_time"), f"{what} est_time")
    owner = parser.scalar(value("owner"), f"{what} owner", (str,))
    status_raw = parser.scalar(value("status"), f"{what} status", (str,))
    status = None
    if status_raw is not None:
        try:
            status = Status(status_raw)
        except ValueError:
            parser.problem(value("status"), INVALID_VALUE,
                         f"{what} status must be one of {', '.join(s.value for s in Status)}, "
                         f"got {describe_scalar(status_raw)}")
    reason = parser.scalar(value("reason"), f"{what} reason", (str,)) if "reason" in fields else None
    issue = parser.scalar(value("issue"), f"{what} issue", (str,)) if "issue" in fields else None
    if status in (Status.MANUAL, Status.QUARANTINED) and not (reason or "").strip():
        parser.problem(node, MISSING_REASON, f"{what} is {status.value} but gives no 'reason'")
    if status is Status.QUARANTINED and not (issue or "").strip():
        parser.problem(node, MISSING_REASON, f"{what} is quarantined but gives no 'issue' link")
    timeout = parser.seconds(value("timeout"), f"{what} timeout") if "timeout" in fields else None
    reruns = 0
    if "reruns" in fields:
        reruns = parser.scalar(value("reruns"), f"{what} reruns", (int,))
        message = reruns_problem(reruns) if reruns is not None else None
        if message is not None:
            parser.problem(value("reruns"), INVALID_VALUE, f"{what} reruns {message}")
    depends_on: tuple[str, ...] | None = ()
    if "depends_on" in fields:
        depends_on = parser.string_list(value("depends_on"), f"{what} depends_on", non_empty=False)
    may_skip = parser.scalar(value("may_skip"), f"{what} may_skip", (bool,)) if "may_skip" in fields else False
    evidence = None
    if "evidence" in fields:
        if status is not Status.QUARANTINED:
            parser.problem(value("evidence"), INVALID_VALUE, f"{what} has evidence but is not quarantined")
        evidence = parse_evidence(parser, value("evidence"), what, test_tiers or ())
    nodes = parse_nodes(parser, value("quarantined_nodes"), path, test_tiers or ()) \
        if "quarantined_nodes" in fields else ()
    env = parse_env(parser, value("env"), what) if "env" in fields else {}
    args = parse_pytest_args(parser, value("pytest_args"), what) if "pytest_args" in fields else ()
    if len(parser.problems) != before:
        return None
    return TestEntry(
        path=path, tiers=test_tiers, est_time=float(est_time), owner=owner, status=status,
        reason=reason, issue=issue, timeout=None if timeout is None else float(timeout),
        reruns=reruns, depends_on=tuple(normalize_path(p) for p in depends_on),
        line=key_node.start_mark.line + 1, col=key_node.start_mark.column + 1, may_skip=may_skip,
        evidence=evidence, quarantined_nodes=nodes, env=env, pytest_args=args or (),
    )
