"""``ci culprit`` with a history store, on tests/ci/test_culprit_cli.py's repository (commit 6 of 9
breaks ``calc.add``): the rates it learns from the history (r, p, and m read in the same one
read of the store) and the answer it stores there (SQLite, and PostgreSQL where parametrised)."""

from __future__ import annotations

import json
import sys

from ci.history.store import open_store
from tests.ci.history_support import pg_server, store_location  # noqa: F401 (fixtures)
from tests.ci.test_culprit_cli import CULPRIT, culprit, repo  # noqa: F401 - the window and its runner, reused


def test_retry_rate_is_learned_from_the_history(repo, tmp_path) -> None:
    """A SQLite history (filled through the store's ingest) where 3 of 4 retries after a flake
    failed: r is their Beta posterior mean, and the output says so."""
    from ci.history.ingest import ingest, prepare
    from ci.history.model import RunIdentity
    from tests.ci.history_support import Case, write_report

    root, shas = repo
    store = tmp_path / "h.sqlite"
    plan = ["p"] * 60
    plan[2], plan[10], plan[20], plan[30] = "fp", "ff", "ff", "ff"
    with open_store(str(store)) as opened:
        for i, step in enumerate(plan):
            case = Case("tests/test_calc.py", "test_add") if step == "p" else \
                Case("tests/test_calc.py", "test_add", "passed" if step == "fp" else "failed", "AssertionError: x",
                     "E   x", reruns=1)
            assert ingest(opened, prepare(write_report(tmp_path, [case]), RunIdentity("t/t", f"{i:07x}abc", "push",
                                                                                     "cpu"))).added
    done = culprit(root, "--test", "tests/test_calc.py", "--good", shas[0], "--bad", shas[9], "--no-verify",
                   "--state", str(tmp_path / "s.json"), tmp=tmp_path, env={"CI_HISTORY_STORE": str(store)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"retry rate {3.5 / 5:.3f} from 3 of 4 retries after a flaky failure failing" in done.stdout


def test_false_pass_rate_is_learned_from_the_tiers_breakages(repo, tmp_path, store_location) -> None:
    """p from the store's known breakage windows of the tier (`BREAKAGE_PLAN`, another file's: 2
    of 13 attempts passed), the 90 % quantile of Beta(0.5 + 2, 499.5 + 11); SQLite and PostgreSQL."""
    from ci.history.beta import beta_ppf
    from ci.history.ingest import ingest, prepare
    from ci.history.model import RunIdentity
    from tests.ci.history_support import BREAKAGE_PLAN, breakage_cases, write_report

    root, shas = repo
    with open_store(store_location) as opened:
        for i, step in enumerate(BREAKAGE_PLAN):
            report = write_report(tmp_path, breakage_cases("tests/test_other.py", step))
            assert ingest(opened, prepare(report, RunIdentity("t/t", f"{i:07x}abc", "push", "cpu"))).added
    done = culprit(root, "--test", "tests/test_calc.py", "--good", shas[0], "--bad", shas[9], "--no-verify",
                   "--state", str(tmp_path / "s.json"), tmp=tmp_path, env={"CI_HISTORY_STORE": store_location})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (f"false-pass rate {beta_ppf(0.9, 2.5, 510.5):.4f}, the 90% quantile of p's posterior from 2 of 13 "
            "attempts passing in 2 known breakage window(s) of the tier (Beta(0.5, 499.5) prior)") in done.stdout


def test_the_answer_is_stored_onto_its_request_once(repo, tmp_path, store_location) -> None:
    """Issue 51: with a store, the answer lands on the row `ci culprit-requests` recorded for the
    window (requested with the history's own commit ids), atomically; a rerun (resumed from the
    state file) writes the same row again, not a second one. SQLite and PostgreSQL."""
    from ci.history.culprits import CulpritRequest, culprit_states, record_requests

    root, shas = repo
    with open_store(store_location) as store:
        record_requests(store, [CulpritRequest("acme/calc", "cpu", "tests/test_calc.py", shas[0][:7], shas[9], 6, 1, 9)])
    github = {"CI_HISTORY_STORE": store_location, "GITHUB_SERVER_URL": "https://github.com",
              "GITHUB_REPOSITORY": "acme/calc", "GITHUB_RUN_ID": "77"}
    for _ in range(2):
        done = culprit(root, "--test", "tests/test_calc.py", "--good", shas[0], "--bad", shas[9], "--flake-rate", "0.01",
                       "--state", str(tmp_path / "s.json"), tmp=tmp_path, env=github)
        assert done.returncode == 0 and "answer stored in the history" in done.stdout, done.stdout + done.stderr
    runs = len(json.loads((tmp_path / "s.json").read_text())["runs"])
    with open_store(store_location, create=False) as store:
        [state] = culprit_states(store, "acme/calc").values()
        rows = store.fetchall("SELECT good, budget, runs, found, stop, requested_at <> '', answered_at <> '' FROM culprits")
    assert (state.culprit, state.run_url) == (shas[CULPRIT], "https://github.com/acme/calc/actions/runs/77")
    assert state.probability is not None and state.probability >= 0.99
    assert rows == [(shas[0][:7], 6, runs, 1, "confident", True, True)]


def test_a_local_answer_is_stored_under_the_windows_repository(repo, tmp_path, monkeypatch) -> None:
    """Issue 51: without $GITHUB_REPOSITORY the answer goes under the repository whose reports in
    the store name the window (of two in the store; never ""); a store that names none is one
    line and exit 3, the answer printed."""
    from ci.history.culprits import culprit_states
    from ci.history.ingest import ingest, prepare
    from ci.history.model import RunIdentity
    from tests.ci.history_support import Case, write_report

    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    root, shas = repo
    empty, store = tmp_path / "empty.sqlite", tmp_path / "h.sqlite"
    open_store(str(empty)).close()
    with open_store(str(store)) as opened:
        case = Case("tests/test_calc.py", "test_add", "failed", "AssertionError: 5", "E   5")
        assert ingest(opened, prepare(write_report(tmp_path, [case]), RunIdentity("acme/calc", shas[9], "push", "cpu"))).added
        assert ingest(opened, prepare(write_report(tmp_path, [case]), RunIdentity("acme/fork", "abc1234", "push", "cpu"))).added
    args = ("--test", "tests/test_calc.py", "--good", shas[0], "--bad", shas[9], "--flake-rate", "0.01")
    done = culprit(root, *args, "--state", str(tmp_path / "s.json"), tmp=tmp_path, env={"CI_HISTORY_STORE": str(store)})
    assert done.returncode == 0 and "answer stored in the history" in done.stdout, done.stdout + done.stderr
    with open_store(str(store), create=False) as opened:
        assert [s.culprit for s in culprit_states(opened, "acme/calc").values()] == [shas[CULPRIT]]
        assert culprit_states(opened, "") == {}
    done = culprit(root, *args, "--state", str(tmp_path / "s.json"), tmp=tmp_path, env={"CI_HISTORY_STORE": str(empty)})
    assert done.returncode == 3 and f"culprit {shas[CULPRIT]}" in done.stdout, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(
        f"no repository to store the answer under: $GITHUB_REPOSITORY is not set and the history names none for "
        f"{shas[0][:12]}..{shas[9][:12]}: set GITHUB_REPOSITORY=OWNER/NAME")
    assert "Traceback" not in done.stderr


def test_an_unreachable_store_is_one_line_and_exit_3(repo, tmp_path) -> None:
    root, shas = repo
    (tmp_path / "store").write_text("not a database\n" * 300)
    done = culprit(root, "--test", "tests/test_calc.py", "--good", shas[0], "--bad", shas[9], "--flake-rate", "0.01",
                   "--store", str(tmp_path / "store"), "--state", str(tmp_path / "s.json"), tmp=tmp_path)
    assert done.returncode == 3 and f"culprit {shas[CULPRIT]}" in done.stdout, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "cannot store the answer in the history" in line and "Traceback" not in done.stderr


def test_a_search_reads_the_history_once_for_the_rates_and_m(repo, tmp_path, monkeypatch) -> None:
    """`ci culprit` with a breakage signature (--bad's attempts fail on one assert): the flaky
    failures behind m are read with the other rates, in the one `_noise` read of the store, not
    by opening it again once the signature is known. The oracle: who calls the real open_store."""
    import ci.history.store
    from ci.commands import culprit as command

    root, shas = repo
    store = tmp_path / "h.sqlite"
    open_store(str(store)).close()
    real, callers = ci.history.store.open_store, []

    def counted(*args, **kwargs):
        callers.append(sys._getframe(1).f_globals["__name__"] + "." + sys._getframe(1).f_code.co_name)
        return real(*args, **kwargs)
    monkeypatch.setattr(ci.history.store, "open_store", counted)
    monkeypatch.chdir(root)
    monkeypatch.setenv("CULPRIT_COUNTER", str(tmp_path / "counter"))
    args = command.build_parser().parse_args(["--tier", "cpu", "--test", "tests/test_calc.py", "--good", shas[0],
                                              "--bad", shas[9], "--store", str(store), "--state",
                                              str(tmp_path / "s.json")])
    said: list[str] = []
    answer = command.search(args, {}, say=said.append)
    assert answer.sha == shas[CULPRIT] and any(line.startswith("breakage signature ") for line in said), said
    assert [c for c in callers if c.startswith("ci.commands.")] == ["ci.commands.culprit._noise"], callers


def test_the_prior_is_learned_from_the_tiers_found_culprits(repo, tmp_path) -> None:
    """Five found culprits of the tier in the store (each commit 6, which alone changes calc.py, in
    windows of 9, 8, 6, 4 and 1 candidates), one answer that did not reach its confidence, one
    window this clone lacks: the static closure's weights are the Dirichlet posterior's bounds
    (scipy's Beta quantiles, lines at 10 %, the rest at 90 %, the prior's weight 5 culprits
    centred on 1 / 0.1); the missing window is a warning, the unfound answer unread."""
    from scipy import stats

    from ci.history.culprits import CulpritAnswer, found_culprits, record_answer

    root, shas = repo
    store = tmp_path / "h.sqlite"
    windows = ((0, 9), (1, 9), (2, 8), (3, 7), (5, 6))
    with open_store(str(store)) as opened:
        for good, bad in windows:
            record_answer(opened, CulpritAnswer("acme/calc", "cpu", "tests/test_calc.py", shas[good], shas[bad],
                                                shas[CULPRIT], 0.995, 5, "confident", True))
        record_answer(opened, CulpritAnswer("acme/calc", "cpu", "tests/test_calc.py", shas[0], shas[8], shas[2],
                                            0.6, 30, "budget", False))
        record_answer(opened, CulpritAnswer("acme/calc", "cpu", "tests/test_calc.py", "d" * 40, "e" * 40, "f" * 40,
                                            0.999, 4, "confident", True))
        record_answer(opened, CulpritAnswer("acme/calc", "gpu", "tests/test_calc.py", shas[4], shas[9], shas[5],
                                            0.999, 4, "confident", True))  # another tier's
        assert [f.culprit for f in found_culprits(opened, "cpu", 3)] == ["f" * 40, shas[CULPRIT], shas[CULPRIT]]
        assert len(found_culprits(opened, "cpu", 40)) == 6
    lines = sum(1 / (bad - good) for good, bad in windows) / len(windows)
    prior = lines / (lines + 0.1 * (1 - lines))
    s_lines = stats.beta.ppf(0.1, 5 * prior + 5, 5 * (1 - prior))
    s_none = stats.beta.ppf(0.9, 5 * (1 - prior), 5 * prior + 5)
    low = (s_none / (1 - lines)) / (s_lines / lines)
    done = culprit(root, "--test", "tests/test_calc.py", "--good", shas[0], "--bad", shas[9], "--flake-rate", "0.01",
                   "--state", str(tmp_path / "s.json"), tmp=tmp_path, env={"CI_HISTORY_STORE": str(store)})
    assert done.returncode == 0 and f"culprit {shas[CULPRIT]}" in done.stdout, done.stdout + done.stderr
    assert 0.1 < low < 1  # five culprits: the bound is flatter than the prior's centre
    assert (f"prior from the static import closure (no map of the test): 1 candidate(s) change it (weight 1), 8 not "
            f"({low:.3g}); weights learned from 5 found culprit(s) of the tier: 5 changed lines their test executed, "
            "0 only its files, 0 nothing it executed") in done.stdout
    assert f"warning: the found culprit {'f' * 12} of tests/test_calc.py: its window {'d' * 12}..{'e' * 12} is not in " \
           "this clone" in done.stdout


def test_past_windows_are_judged_by_the_callers_rule_and_bad_ones_skipped(repo) -> None:
    """`history_weights` on the module's repository: windows named by prefixes (as requests record
    them) are read in full from git and judged by the caller's rule; a test with nothing to judge it
    by, a culprit outside its window and a window the clone lacks are each one skipped line. The
    oracle: `learn_weights` on the windows written out by hand."""
    from ci.commands.culprit_learned import history_weights
    from ci.culprit.learned import PastCulprit, learn_weights
    from ci.culprit.prior import Touch, TouchWeights
    from ci.history.culprits import FoundCulprit

    root, shas = repo
    seen = []

    def levels(test: str, good: str, candidates: list[str]) -> list[Touch] | None:
        seen.append((test, good, tuple(candidates)))
        if test == "tests/test_nomap.py":
            return None
        return [Touch.LINES if sha == shas[CULPRIT] else Touch.FILE for sha in candidates]

    found = [FoundCulprit("tests/test_calc.py", shas[0][:9], shas[9], shas[CULPRIT][:10]),
             FoundCulprit("tests/test_calc.py", shas[2], shas[8], shas[CULPRIT]),
             FoundCulprit("tests/test_nomap.py", shas[0], shas[9], shas[CULPRIT]),
             FoundCulprit("tests/test_calc.py", shas[7], shas[9], shas[CULPRIT]),
             FoundCulprit("tests/test_calc.py", "d" * 40, "e" * 40, "f" * 40)]
    got = history_weights(root, found, levels, TouchWeights())
    F, L = Touch.FILE, Touch.LINES
    assert got.learned == learn_weights([PastCulprit(L, (F,) * 5 + (L,) + (F,) * 3),
                                         PastCulprit(L, (F,) * 3 + (L,) + (F,) * 2)])
    assert seen[0] == ("tests/test_calc.py", shas[0], tuple(shas[1:10]))
    assert [s[0] for s in seen] == ["tests/test_calc.py", "tests/test_calc.py", "tests/test_nomap.py"]
    assert got.skipped == (
        f"the found culprit {shas[CULPRIT][:12]} of tests/test_nomap.py: no map or closure of it",
        f"the found culprit {shas[CULPRIT][:12]} of tests/test_calc.py: not one commit of its window",
        f"the found culprit {'f' * 12} of tests/test_calc.py: its window {'d' * 12}..{'e' * 12} is not in this clone")
    assert history_weights(root, [], levels, TouchWeights(1.0, 0.3, 0.3)).learned.weights == TouchWeights(1.0, 0.3, 0.3)
