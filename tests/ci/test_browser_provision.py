"""Bootstrap's browser step: found where it is, installed with apt-get where this process may, and
otherwise one line that names the command to run. The tools it calls (apt-get, sudo, a browser) are
stand-in scripts on a PATH made for each test, which log how they were called; the last test runs
the real script, ``ci/bootstrap.py``, in a child process with no browser anywhere and an apt-get
that fails, as on a machine without a package mirror."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci.browser_locate import default_locations, find_browser
from ci.browser_provision import BrowserOutcome, ensure_browser

REPO = Path(__file__).resolve().parents[2]
CHMOD = shutil.which("chmod")  # the stand-ins' PATH holds only stand-ins
WAIT = "-o DPkg::Lock::Timeout=300"  # apt waits for dpkg's lock (unattended-upgrades on a fresh machine)
INSTALL_LINE = "run `sudo apt-get install -y chromium`, then run `python3 ci/bootstrap.py` again"


class Machine:
    """A PATH of stand-ins; ``calls`` lists each stand-in call as ``name args...``."""

    def __init__(self, root: Path):
        self.bin = root / "bin"
        self.bin.mkdir()
        self.log = root / "calls"
        (self.bin / "env").symlink_to(shutil.which("env"))

    def tool(self, name: str, body: str = "exit 0") -> Path:
        script = self.bin / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{self.log}"\n{body}\n')
        script.chmod(0o755)
        return script

    def apt_that_installs(self) -> None:
        """apt-get whose ``install ... chromium`` puts a chromium on PATH, as Debian's does."""
        self.tool("apt-get", f'case "$*" in *install*chromium*) printf "#!/bin/sh\\n" > "{self.bin}/chromium"; '
                             f'{CHMOD} +x "{self.bin}/chromium";; esac')

    @property
    def env(self) -> dict[str, str]:
        return {"PATH": str(self.bin)}

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


def provision(machine: Machine, *, euid: int = 0, locations: tuple[str, ...] = (), platform: str = "linux",
              env: dict[str, str] | None = None) -> tuple[BrowserOutcome, list[str]]:
    said: list[str] = []
    outcome = ensure_browser(said.append, env=env or machine.env, locations=locations, platform=platform,
                             euid=euid, timeout_s=60)
    return outcome, said


# -- finding ---------------------------------------------------------------------------------------

def test_a_browser_on_path_is_used_and_nothing_is_installed(machine: Machine) -> None:
    machine.tool("apt-get")
    browser = machine.tool("google-chrome")
    outcome, said = provision(machine)
    assert outcome == BrowserOutcome(str(browser))
    assert said == [f"browser: {browser}"]
    assert machine.calls() == []


def test_path_order_prefers_chromium(machine: Machine) -> None:
    machine.tool("google-chrome")
    chromium = machine.tool("chromium")
    assert find_browser(machine.env, locations=()) == str(chromium)


def test_usual_install_locations_are_searched_after_path(machine: Machine, tmp_path: Path) -> None:
    """Chrome on macOS lives in an app bundle never on PATH; a Debian install in /usr/bin even where
    a job's PATH leaves /usr/bin out."""
    bundle = tmp_path / "Google Chrome.app" / "Contents" / "MacOS"
    bundle.mkdir(parents=True)
    not_executable = bundle / "Chromium"
    not_executable.write_text("")
    chrome = bundle / "Google Chrome"
    chrome.write_text("#!/bin/sh\n")
    chrome.chmod(0o755)
    locations = (str(tmp_path / "missing"), str(not_executable), str(chrome))
    assert find_browser(machine.env, locations) == str(chrome)
    outcome, said = provision(machine, locations=locations, platform="darwin")
    assert outcome.path == str(chrome) and said == [f"browser: {chrome}"]
    on_path = machine.tool("chromium-browser")
    assert find_browser(machine.env, locations) == str(on_path)
    assert find_browser({"PATH": str(tmp_path / "empty")}, locations=(str(not_executable),)) is None


def test_default_locations_per_platform() -> None:
    assert "/usr/bin/chromium" in default_locations("linux")
    assert any("Google Chrome.app" in p for p in default_locations("darwin"))
    assert default_locations("win32") == ()


def test_chromium_variable_wins_and_must_be_executable(machine: Machine, tmp_path: Path) -> None:
    machine.tool("chromium")
    named = machine.tool("my-chrome")
    outcome, _ = provision(machine, env={**machine.env, "CHROMIUM": str(named)})
    assert outcome.path == str(named)
    missing = tmp_path / "no-such-chrome"
    outcome, _ = provision(machine, env={**machine.env, "CHROMIUM": str(missing)})
    assert outcome.path is None
    assert outcome.error == (f"CHROMIUM={missing} is not an executable file: point it at a Chromium or Chrome, "
                             f"or unset it, then run `python3 ci/bootstrap.py` again")
    assert machine.calls() == []  # a wrong $CHROMIUM is reported, never papered over by an install


# -- installing ------------------------------------------------------------------------------------

def test_root_installs_debian_chromium_and_finds_it(machine: Machine) -> None:
    machine.apt_that_installs()
    outcome, said = provision(machine, euid=0)
    chromium = str(machine.bin / "chromium")
    assert outcome == BrowserOutcome(chromium, installed=True)
    assert machine.calls() == [f"apt-get {WAIT} update -qq", f"apt-get {WAIT} install -y -qq chromium"]
    assert said[0].startswith("browser: none found; installing Debian's chromium with "
                              "`apt-get update && apt-get install -y chromium`")
    assert said[1:] == [f"browser: installed {chromium}"]
    again, said = provision(machine, euid=0)  # idempotent: the second run finds it
    assert again.path == chromium and not again.installed and len(machine.calls()) == 2


def test_non_root_installs_through_passwordless_sudo(machine: Machine) -> None:
    machine.apt_that_installs()
    machine.tool("sudo", 'if [ "$1" = -n ]; then shift; fi; exec "$@"')
    outcome, said = provision(machine, euid=1000)
    assert outcome.installed and outcome.path == str(machine.bin / "chromium")
    through_sudo = f"sudo -n {machine.bin}/env DEBIAN_FRONTEND=noninteractive {machine.bin}/apt-get"
    assert machine.calls() == ["sudo -n true", f"{through_sudo} {WAIT} update -qq", f"apt-get {WAIT} update -qq",
                               f"{through_sudo} {WAIT} install -y -qq chromium", f"apt-get {WAIT} install -y -qq chromium"]
    assert "with `sudo -n apt-get update && apt-get install -y chromium`" in said[0]


@pytest.mark.parametrize("sudo", [None, "echo 'sudo: a password is required' >&2; exit 1"])
def test_non_root_without_passwordless_sudo_names_the_command(machine: Machine, sudo: str | None) -> None:
    machine.apt_that_installs()
    if sudo is not None:
        machine.tool("sudo", sudo)
    outcome, said = provision(machine, euid=1000)
    assert outcome.path is None and said == []
    assert outcome.error == f"no Chromium or Chrome found, and installing one needs root: {INSTALL_LINE}"
    assert [c for c in machine.calls() if "apt-get" in c] == []  # never asked for a password


def test_failing_apt_get_stops_with_one_line(machine: Machine) -> None:
    machine.tool("apt-get", 'case "$*" in *install*) echo "E: Unable to locate package chromium" >&2; exit 100;; esac')
    outcome, _ = provision(machine, euid=0)
    assert outcome.path is None
    assert outcome.error == ("`apt-get install -y -qq chromium` failed (exit 100); run `sudo apt-get install -y "
                             "chromium` yourself (or set CHROMIUM=/path/to/a/chrome), then run "
                             "`python3 ci/bootstrap.py` again")
    assert machine.calls() == [f"apt-get {WAIT} update -qq", f"apt-get {WAIT} install -y -qq chromium"]


def test_a_failing_update_stops_before_the_install(machine: Machine) -> None:
    machine.tool("apt-get", "exit 100")
    outcome, _ = provision(machine, euid=0)
    assert outcome.error is not None and outcome.error.startswith("`apt-get update -qq` failed (exit 100)")
    assert machine.calls() == [f"apt-get {WAIT} update -qq"]


def test_an_install_that_leaves_no_browser_says_so(machine: Machine) -> None:
    machine.tool("apt-get")
    outcome, _ = provision(machine, euid=0)
    assert outcome.error == ("apt-get installed chromium but no browser is on PATH or in the usual places: "
                             "set CHROMIUM=/path/to/it, then run `python3 ci/bootstrap.py` again")


def test_a_hanging_apt_get_is_stopped(machine: Machine) -> None:
    machine.tool("apt-get", f"exec {shutil.which('sleep')} 30")
    outcome = ensure_browser(lambda _line: None, env=machine.env, locations=(), platform="linux", euid=0,
                             timeout_s=0.5)
    assert outcome.error is not None and outcome.error.startswith("`apt-get update -qq` did not finish in 0 s")


@pytest.mark.parametrize("platform, apt, expected", [
    ("linux", False, "no Chromium or Chrome found and no apt-get to install one: install Chromium or Google "
                     "Chrome, or set CHROMIUM=/path/to/it, then run `python3 ci/bootstrap.py` again"),
    ("darwin", True, "no Chromium or Chrome found (the HUD's browser tests need one): install Chromium or "
                     "Google Chrome, or set CHROMIUM=/path/to/it, then run `python3 ci/bootstrap.py` again"),
])
def test_no_apt_get_or_not_linux_names_what_to_do(machine: Machine, platform: str, apt: bool, expected: str) -> None:
    if apt:
        machine.apt_that_installs()
    outcome, _ = provision(machine, platform=platform)
    assert (outcome.path, outcome.error) == (None, expected)
    assert machine.calls() == []


# -- the real script -------------------------------------------------------------------------------

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the apt-get path is Linux's")
def test_bootstrap_without_a_browser_or_a_working_apt_get_exits_1_with_the_line(tmp_path: Path) -> None:
    """``python3 ci/bootstrap.py`` on a copy of this repository's script (with a throwaway project):
    no browser on PATH, none in the usual places (the table emptied before the script runs, since
    this machine may have one there), and an apt-get that cannot reach its mirror. The venv is made;
    the run ends with exit 1 and the one line."""
    project = tmp_path / "proj"
    (project / "ci").mkdir(parents=True)
    for name in ("bootstrap.py", "atomic_write.py", "regular_file.py", "browser_locate.py", "browser_provision.py"):
        shutil.copy2(REPO / "ci" / name, project / "ci" / name)
    (project / "pyproject.toml").write_text(
        "[build-system]\nrequires = ['setuptools>=68']\nbuild-backend = 'setuptools.build_meta'\n"
        "[project]\nname = 'no-browser-probe'\nversion = '0'\n"
        "[project.optional-dependencies]\nfp4kv = []\ntest = []\n[tool.setuptools]\npy-modules = []\n")
    machine = Machine(tmp_path)
    machine.tool("apt-get", 'echo "E: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease" >&2; '
                            'exit 100')
    run_script = ("import sys; sys.path.insert(0, 'ci'); import browser_locate; "
                  "browser_locate.INSTALL_LOCATIONS.clear(); import bootstrap; sys.exit(bootstrap.main([]))")
    env = {"PATH": str(machine.bin), "HOME": os.environ.get("HOME", str(tmp_path)),
           **{k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in ("LANG", "TMPDIR")}}
    proc = subprocess.run([sys.executable, "-c", run_script], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "bootstrap: .venv ready in" in proc.stdout
    assert "bootstrap: browser: none found; installing Debian's chromium" in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last == ("bootstrap: `apt-get update -qq` failed (exit 100); run `sudo apt-get install -y chromium` "
                    "yourself (or set CHROMIUM=/path/to/a/chrome), then run `python3 ci/bootstrap.py` again")
    assert machine.calls() == [f"apt-get {WAIT} update -qq"]
