"""The registry's quarantine parts: the ``quarantine:`` policy, ``evidence`` and
``quarantined_nodes`` (parsed, refused with file:line, equal on both parsers), and the text edits
`ci quarantine` makes (only those characters change; an edit it cannot make cleanly is refused)."""

from __future__ import annotations

import pytest

from ci.registry import QuarantineEvidence, QuarantinedNode, QuarantinePolicy, RegistryError, Status, parse_registry
from ci.registry.fast_parse import parse_fast
from ci.registry.parse import parse_precise
from ci.registry.writer import render_registry
from ci.registry.quarantine_edit import QuarantineFile, QuarantineNodes, ReleaseFile, ReleaseNodes, edit_quarantines
from tests.ci.tree_testutil import CPU_REGISTRY_HEAD

HEAD = CPU_REGISTRY_HEAD.removesuffix("tests:\n")
POLICY = """\
quarantine:
  threshold: 0.02
  min_runs: 50
  release_runs: 30
  level: 0.95
  issue: https://example.org/issues/20
"""
ENTRY = """\
tests:
  tests/test_a.py:
    tiers: [cpu]  # where it runs
    est_time: 1
    owner: me
    status: active
"""
EVIDENCE = QuarantineEvidence("cpu", 0.0937, (0.061, 0.132), 120, 12, 128, "0123456789ab", "https://ci/1",
                              "2026-12-03T18:00:00.000001+00:00")


def problems(text: str) -> list[str]:
    registry, found = parse_registry(text, "r.yaml")
    assert registry is None
    return [str(p) for p in found]


def test_policy_defaults_and_values_on_both_parsers() -> None:
    assert parse_registry(HEAD + ENTRY, "r.yaml")[0].quarantine == QuarantinePolicy()
    # the block style the fast path reads (the writer's), with the policy before the tiers
    block = render_registry(parse_registry(HEAD + ENTRY, "r.yaml")[0]).replace("tiers:\n", POLICY + "tiers:\n", 1)
    fast = parse_fast(block, "r.yaml")
    precise, found = parse_precise(block, "r.yaml")
    assert found == [] and fast == precise
    line = block.splitlines().index("quarantine:") + 1
    assert fast.quarantine == QuarantinePolicy(0.02, 50, 30, 0.95, "https://example.org/issues/20", line=line)


@pytest.mark.parametrize("line, value, message", [
    ("  threshold: 0.02", "  threshold: 0", "r.yaml:6:14: R009 quarantine threshold must be a number strictly between 0 and 1"),
    ("  threshold: 0.02", "  threshold: 1.0", "r.yaml:6:14: R009 quarantine threshold must be a number strictly"),
    ("  level: 0.95", "  level: high", "r.yaml:9:10: R005 quarantine level must be float or int, got 'high'"),
    ("  min_runs: 50", "  min_runs: 0", "r.yaml:7:13: R009 quarantine min_runs must be a whole number from 1"),
    ("  release_runs: 30", "  release_runs: 2.5", "r.yaml:8:17: R005 quarantine release_runs must be int"),
    ("  issue: https://example.org/issues/20", "  issue: ' '", "r.yaml:10:10: R009 quarantine issue must be a non-blank"),
    ("  level: 0.95", "  levels: 0.95", "r.yaml:9:3: R003 unknown key 'levels' in quarantine"),
])
def test_bad_policy_values_name_their_line(line: str, value: str, message: str) -> None:
    text = HEAD + POLICY.replace(line, value) + ENTRY
    assert parse_fast(text, "r.yaml") is None
    assert any(p.startswith(message) for p in problems(text)), problems(text)


NODES = """\
    quarantined_nodes:
      - node: tests/test_a.py::test_x[1]
        reason: flaky
      - node: tests/test_a.py::TestK::test_y
        reason: flaky too
"""


def test_quarantined_nodes_parse_precisely_and_leave_the_fast_path() -> None:
    text = HEAD + ENTRY + NODES
    assert parse_fast(text, "r.yaml") is None
    registry, found = parse_registry(text, "r.yaml")
    assert found == []
    entry = registry.tests["tests/test_a.py"]
    assert [(q.node, q.reason, q.line) for q in entry.quarantined_nodes] == [
        ("tests/test_a.py::test_x[1]", "flaky", 12), ("tests/test_a.py::TestK::test_y", "flaky too", 14)]
    assert entry.quarantined_node("tests/test_a.py::test_x[1]").reason == "flaky"
    assert entry.quarantined_node("tests/test_a.py::test_x") is None


@pytest.mark.parametrize("old, new, message", [
    ("tests/test_a.py::test_x[1]", "tests/test_b.py::test_x", "r.yaml:12:15: R009 test 'tests/test_a.py' quarantined_nodes: node 'tests/test_b.py::test_x' must be a test id in this file"),
    ("tests/test_a.py::test_x[1]", "tests/test_a.py", "r.yaml:12:15: R009"),
    ("tests/test_a.py::test_x[1]", '"tests/test_a.py::"', "r.yaml:12:15: R009"),
    ("tests/test_a.py::test_x[1]", "tests/test_a.py::TestK::test_y", "r.yaml:14:15: R002 test 'tests/test_a.py' quarantined_nodes names 'tests/test_a.py::TestK::test_y' twice (first on line 12)"),
    ("        reason: flaky\n", "", "r.yaml:12:9: R004 test 'tests/test_a.py' quarantined_nodes item is missing required key 'reason'"),
    ("        reason: flaky\n", "        reason: flaky\n        why: x\n", "r.yaml:14:9: R003 unknown key 'why'"),
])
def test_bad_nodes_name_their_line(old: str, new: str, message: str) -> None:
    found = problems(HEAD + ENTRY + NODES.replace(old, new, 1))
    assert any(p.startswith(message) for p in found), found


def test_evidence_must_be_whole_and_on_a_quarantined_entry() -> None:
    text = edit_quarantines(HEAD + ENTRY, "r.yaml", [QuarantineFile("tests/test_a.py", "flaky", "https://i/1", EVIDENCE)])
    assert parse_registry(text, "r.yaml")[0].tests["tests/test_a.py"].evidence == EVIDENCE
    assert any("R009 test 'tests/test_a.py' has evidence but is not quarantined" in p
               for p in problems(text.replace("status: quarantined", "status: active")))
    assert any("evidence tier 'gpu' is not one of the entry's tiers" in p
               for p in problems(text.replace("tier: cpu", "tier: gpu")))
    assert any("a rate must be within 0 and 1" in p for p in problems(text.replace("score: 0.0937", "score: 1.5")))
    assert any("has low > high" in p for p in problems(text.replace("[0.061, 0.132]", "[0.2, 0.1]")))
    assert any("missing required key 'since'" in p for p in problems("\n".join(
        line for line in text.splitlines() if "since:" not in line) + "\n"))


def test_evidence_and_node_boundaries() -> None:
    """An interval may be a point ([x, x]); a count may be 0, never negative; a node's reason may
    not be blank (whitespace is blank)."""
    text = edit_quarantines(HEAD + ENTRY, "r.yaml", [QuarantineFile("tests/test_a.py", "flaky", "https://i/1", EVIDENCE)])
    point = parse_registry(text.replace("[0.061, 0.132]", "[0.1, 0.1]"), "r.yaml")[0]
    assert point is not None and point.tests["tests/test_a.py"].evidence.interval == (0.1, 0.1)
    for key, value in (("runs", 120), ("failures", 12), ("trials", 128)):
        zero = parse_registry(text.replace(f"{key}: {value}", f"{key}: 0"), "r.yaml")[0]
        assert zero is not None and getattr(zero.tests["tests/test_a.py"].evidence, key) == 0
        assert any(f"evidence {key} must be >= 0" in p for p in problems(text.replace(f"{key}: {value}", f"{key}: -1")))
    assert any("quarantined_nodes reason must not be blank" in p
               for p in problems(HEAD + ENTRY + NODES.replace("reason: flaky too", "reason: '  '")))


def test_edits_change_only_their_characters_and_undo_exactly() -> None:
    text = HEAD + "# policy below\n" + POLICY + ENTRY + "    depends_on:\n      - fp4kv  # the code\n\n" + \
        "  tests/test_b.py:   # second\n    tiers: [cpu]\n    est_time: 2\n    owner: 'you'\n    status: active\n" + \
        "    reason: was manual once\n# trailing comment\n"
    node = QuarantinedNode("tests/test_a.py::test_x", "flaky 9 % [6 %, 13 %] over 128 runs on cpu", EVIDENCE)
    quarantined = edit_quarantines(text, "r.yaml", [QuarantineNodes("tests/test_a.py", (node,)),
                                                    QuarantineFile("tests/test_b.py", "flaky: 9 %", "https://i/1", EVIDENCE)])
    registry = parse_registry(quarantined, "r.yaml")[0]
    assert registry.tests["tests/test_a.py"].quarantined_nodes[0].evidence == EVIDENCE
    b = registry.tests["tests/test_b.py"]
    assert (b.status, b.reason, b.issue) == (Status.QUARANTINED, "flaky: 9 %", "https://i/1")
    assert "    reason: was manual once\n" not in quarantined and "    owner: 'you'\n" in quarantined
    more = edit_quarantines(quarantined, "r.yaml", [QuarantineNodes("tests/test_a.py", (
        QuarantinedNode("tests/test_a.py::test_z", "also", EVIDENCE),))])
    assert [q.node for q in parse_registry(more, "r.yaml")[0].tests["tests/test_a.py"].quarantined_nodes] == [
        "tests/test_a.py::test_x", "tests/test_a.py::test_z"]
    back = edit_quarantines(more, "r.yaml", [ReleaseNodes("tests/test_a.py", frozenset({"tests/test_a.py::test_x"}))])
    back = edit_quarantines(back, "r.yaml", [ReleaseNodes("tests/test_a.py", frozenset({"tests/test_a.py::test_z"})),
                                             ReleaseFile("tests/test_b.py")])
    assert back == text.replace("    reason: was manual once\n", "")  # the release drops the reason it replaced


def test_an_edit_it_cannot_make_cleanly_is_refused() -> None:
    flow = HEAD + "tests:\n  tests/test_a.py: {tiers: [cpu], est_time: 1, owner: me, status: active}\n"
    with pytest.raises(ValueError, match="not a block mapping; edit it by hand"):
        edit_quarantines(flow, "r.yaml", [QuarantineFile("tests/test_a.py", "r", "i", EVIDENCE)])
    with pytest.raises(ValueError, match="is not registered"):
        edit_quarantines(HEAD + ENTRY, "r.yaml", [ReleaseFile("tests/test_zz.py")])
    with pytest.raises(RegistryError):
        edit_quarantines(HEAD + ENTRY + "  bad: [\n", "r.yaml", [ReleaseFile("tests/test_a.py")])


def test_the_writer_keeps_the_policy_evidence_and_quarantined_nodes() -> None:
    """`render_registry` (``ci import-suites`` over an existing registry) writes back what ``ci
    quarantine --apply`` recorded: parsed again, nothing is lost."""
    import dataclasses

    base = parse_registry(HEAD + ENTRY + ENTRY.replace("tests:\n", "").replace("test_a", "test_b"), "r.yaml")[0]
    tests = {"tests/test_a.py": dataclasses.replace(base.tests["tests/test_a.py"], status=Status.QUARANTINED,
                                                    reason="flaky", issue="https://ci/issues/2", evidence=EVIDENCE),
             "tests/test_b.py": dataclasses.replace(base.tests["tests/test_b.py"], quarantined_nodes=(
                 QuarantinedNode("tests/test_b.py::test_x[1]", "flaky", EVIDENCE),
                 QuarantinedNode("tests/test_b.py::TestK::test_y", "flaky too")))}
    registry = dataclasses.replace(base, tests=tests, quarantine=QuarantinePolicy(0.02, 50, 30, 0.95, "https://x/1"))
    again, found = parse_registry(render_registry(registry), "r.yaml")
    assert found == []
    assert dataclasses.replace(again.quarantine, line=0) == registry.quarantine
    for path, entry in tests.items():
        assert again.tests[path].evidence == entry.evidence
        assert [dataclasses.replace(n, line=0) for n in again.tests[path].quarantined_nodes] == list(entry.quarantined_nodes)
