"""The registry writers cope with a registry.yaml whose last line has no newline (issue #32's
mutation survivors): `ci durations --write` (`rewrite_est_times`) and `ci quarantine`'s release
edits change only their values and leave a file that parses to what they meant; nothing is glued
onto the last line.
"""

from __future__ import annotations

from ci.registry import QuarantineEvidence, Status, parse_registry
from ci.registry.quarantine_edit import ReleaseFile, ReleaseNodes, edit_quarantines, render_evidence
from ci.results.durations import rewrite_est_times

HEAD = ("version: 1\ntiers:\n  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}\n"
        "  gpu: {description: g, runner_labels: [gpu], gpu_count: 1, arch: sm_90}\ntests:\n")
EVIDENCE = QuarantineEvidence("cpu", 0.2, (0.1, 0.3), 40, 8, 40, "", "", "2026-12-03T18:00:00+00:00")


def test_est_time_on_the_last_line_without_a_newline() -> None:
    text = HEAD + "  tests/test_a.py:\n    tiers: [cpu]\n    owner: me\n    status: active\n    est_time: 5"
    out = rewrite_est_times(text, {"tests/test_a.py": 7})
    assert out == text.removesuffix("5") + "7"


def test_a_gpu_entry_gets_its_timeout_after_a_last_line_without_a_newline() -> None:
    text = HEAD + "  tests/test_g.py:\n    tiers: [gpu]\n    owner: me\n    status: active\n    est_time: 5"
    out = rewrite_est_times(text, {"tests/test_g.py": 70})
    registry, problems = parse_registry(out, "r.yaml")
    assert problems == [] and registry is not None
    entry = registry.tests["tests/test_g.py"]
    assert entry.est_time == 70 and entry.timeout is not None and entry.timeout > 70
    assert out.startswith(text.removesuffix("5") + "70\n")


def test_releases_of_a_registry_without_a_final_newline() -> None:
    whole = "\n".join(["  tests/test_a.py:", "    tiers: [cpu]", "    est_time: 5", "    owner: me",
                       "    status: quarantined", "    reason: flaky", "    issue: https://example.org/issues/1",
                       *render_evidence(EVIDENCE, "    ")])
    text = HEAD + whole
    assert not text.endswith("\n") and parse_registry(text, "r.yaml")[1] == []
    out = edit_quarantines(text, "r.yaml", [ReleaseFile("tests/test_a.py")])
    entry = parse_registry(out, "r.yaml")[0].tests["tests/test_a.py"]
    assert entry.status is Status.ACTIVE and entry.evidence is None and entry.est_time == 5
    assert out.startswith(HEAD + "  tests/test_a.py:\n    tiers: [cpu]\n    est_time: 5\n    owner: me\n")

    node = "tests/test_a.py::test_x"
    nodes = "\n".join(["  tests/test_a.py:", "    tiers: [cpu]", "    est_time: 5", "    owner: me",
                       "    status: active", "    quarantined_nodes:", f"      - node: {node}", "        reason: flaky",
                       *render_evidence(EVIDENCE, "        ")])
    out = edit_quarantines(HEAD + nodes, "r.yaml", [ReleaseNodes("tests/test_a.py", frozenset({node}))])
    entry = parse_registry(out, "r.yaml")[0].tests["tests/test_a.py"]
    assert entry.quarantined_nodes == () and entry.status is Status.ACTIVE
    assert out.rstrip("\n") == HEAD + "  tests/test_a.py:\n    tiers: [cpu]\n    est_time: 5\n    owner: me\n    status: active"
