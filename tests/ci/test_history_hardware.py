"""A GPU's hardware fault is the machine's, whichever test met it (`ci.history.hardware`): its line
read apart from other CUDA errors, never a test's own flake evidence (`ci.history.infra_flakes`),
and infra in rule 1 of `ci.history.verdict` when no runner is to blame, even after a retry passed
or the test met the fault on other runners before. Real stores filled through ingest, as the
runner-blame tests do (their helpers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.history.hardware import hardware_fault, machine_only
from ci.history.infra_flakes import MACHINE_KINDS, infra_flakes
from ci.history.run_results import load_run
from ci.history.store import open_store
from ci.history.verdict import FLAKY, INFRA, judge
from tests.ci.history_support import pg_server, store_location  # noqa: F401 (fixtures)
from tests.ci.test_history_runner_blame import ECC, FILE, NCCL, REPO, TIER, job, once_on_each_runner, pr_failures

LAUNCH = "RuntimeError: CUDA error: unspecified launch failure"  # a kernel's or a machine's: not told apart
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=python, GPU has fallen off the bus."


@pytest.mark.parametrize("line, fault", [
    (ECC, True),
    ("torch.AcceleratorError: CUDA error: uncorrectable ECC error encountered", True),
    ("RuntimeError: cudaErrorECCUncorrectable", True),
    (XID_79, True),
    ("NVRM: Xid (PCI:0000:17:00): 48, pid=31877, name=python, An uncorrectable double bit error", True),
    ("Xid 94: contained ECC error", True),
    ("Xid 95", True),
    ("RuntimeError: Unable to determine the device handle: GPU has fallen off the bus", True),
    # an application's own bad access raises these Xids too: not the hardware by the number alone
    ("NVRM: Xid (PCI:0000:3b:00): 31, pid=2212, name=python, Ch 00000010, MMU Fault", False),
    ("NVRM: Xid (PCI:0000:3b:00): 13, pid=2212, Graphics Exception", False),
    ("Xid 480 reported", False),  # not 48: the number's edge
    (LAUNCH, False),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", False),
    (NCCL, False),
    # the test's own check quoting the words, also in pytest's setup wrapper
    ("AssertionError: assert 'uncorrectable ECC error' not in log", False),
    ('failed on setup with "AssertionError: GPU has fallen off the bus in dmesg"', False),
    ("", False),
])
def test_hardware_fault_reads_the_device_s_own_faults_only(line: str, fault: bool) -> None:
    assert hardware_fault(line) is fault


def test_machine_only_needs_an_infra_kind_and_a_machine_kind_or_a_fault() -> None:
    assert machine_only("cuda", ECC, MACHINE_KINDS)
    assert machine_only("no-gpu", "RuntimeError: No CUDA GPUs are available", MACHINE_KINDS)
    assert not machine_only("cuda", LAUNCH, MACHINE_KINDS)
    assert not machine_only("", ECC, MACHINE_KINDS)  # ingest read no runner-level cause: judged as any failure


@pytest.mark.parametrize("error, owned", [(LAUNCH, True), (ECC, False), (XID_79, False)])
def test_a_hardware_fault_on_two_runners_is_never_the_tests_flake_evidence(store_location: str, tmp_path: Path,
                                                                           error: str, owned: bool) -> None:
    """test_a failed with ``error`` once on each of the pool's six runners, from six main commits,
    passing between: a launch failure that does so follows the test (`MIN_RUNNERS`, `MIN_SOURCES`
    met), an ECC error or a GPU off the bus never does: each is the machine the test met."""
    with open_store(store_location) as store:
        once_on_each_runner(store, tmp_path, error)
        found = infra_flakes(store, REPO, TIER)
    assert found.kinds == ({f"{FILE}::test_a": frozenset({"cuda"})} if owned else {})


@pytest.mark.parametrize("error, verdict", [(ECC, INFRA), (XID_79, INFRA), (LAUNCH, FLAKY)])
def test_a_hardware_fault_that_a_retry_elsewhere_passes_stays_infra(store_location: str, tmp_path: Path,
                                                                    error: str, verdict: str) -> None:
    """test_a met ``error`` once on each of the six runners before (no runner out of line: it
    failed on all alike); pull request 7's run fails it so on h100-03 and "re-run failed jobs"
    passes it on h100-05. A hardware fault is the machine's: infra, not flaky by the retry (the
    guard: a plain launch failure that follows the test is its flake, as before)."""
    with open_store(store_location) as store:
        once_on_each_runner(store, tmp_path, error)
        (f,) = pr_failures(store, tmp_path, 7, "h100-03", {"test_a": error})
        job(store, tmp_path, f.sha, "h100-05", event="pull_request", pr=7, attempt=2)
        (v,) = judge(store, load_run(store, pr=7).failures)
    assert f.infra == "cuda"
    assert v.verdict == verdict, v.detail
    if verdict == INFRA:
        assert v.detail.startswith("infra: cuda on runner h100-03, not one runner's (in line with the pool)")
        assert "a GPU's hardware fault" in v.detail
    else:
        assert v.detail.startswith("flaky: failed, then passed")


@pytest.mark.parametrize("error, verdict", [(ECC, INFRA), (LAUNCH, FLAKY)])
def test_a_hardware_fault_failing_every_attempt_is_no_earlier_flakes_again(store_location: str, tmp_path: Path,
                                                                           error: str, verdict: str) -> None:
    """The same history, and pull request 7 fails test_a with ``error`` in both attempts, no pass:
    an ECC error is the machine's again, not "the same failure as its earlier flakes" (a launch
    failure that follows the test still is)."""
    with open_store(store_location) as store:
        once_on_each_runner(store, tmp_path, error)
        (f,) = pr_failures(store, tmp_path, 7, "h100-03", {"test_a": error})
        (v,) = judge(store, [f])
    assert (f.failures, f.passed_on_retry) == (2, False)
    assert v.verdict == verdict, v.detail
    if verdict == FLAKY:
        assert v.detail.startswith("flaky: the same failure as its earlier flakes")
