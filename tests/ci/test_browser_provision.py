"""Bootstrap's browser step: found where it is (and only if its ``--version`` names Chromium or
Chrome), installed with apt-get where this process may, and otherwise one line that names the
command to run. The tools it calls are stand-in scripts that log how they were called: browsers on
a PATH made for each test, apt-get and sudo in a "system" folder that the module's absolute paths
(`APT_GET`, `SUDO`) are pointed at, the one seam; ``env`` is the real ``/usr/bin/env``. The last
test runs the real script, ``ci/bootstrap.py``, in a child process with no browser anywhere and an
apt-get that fails, as on a machine without a package mirror."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci import browser_provision
from ci.browser_locate import SYSTEM_PATH, browser_problem, default_locations, find_browser
from ci.browser_provision import BrowserOutcome, ensure_browser

REPO = Path(__file__).resolve().parents[2]
CHMOD = shutil.which("chmod")  # the stand-ins' PATH holds only stand-ins
WAIT = "-o DPkg::Lock::Timeout=300"  # apt waits for dpkg's lock (unattended-upgrades on a fresh machine)
INSTALL_LINE = "run `sudo apt-get install -y chromium`, then run `python3 ci/bootstrap.py` again"
VERSION = 'echo "Chromium 120.0.6099.224 built on Debian 12.4, running on Debian 12.4"'


class Machine:
    """The caller's PATH of stand-ins (``bin``) and the system folder (``system``) that `APT_GET`
    and `SUDO` point at; ``calls`` lists each stand-in call as ``name args...``."""

    def __init__(self, root: Path):
        self.bin = root / "bin"
        self.system = root / "system"
        self.bin.mkdir()
        self.system.mkdir()
        self.log = root / "calls"

    def tool(self, name: str, body: str = "exit 0", folder: Path | None = None) -> Path:
        script = (folder or self.bin) / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{self.log}"\n{body}\n')
        script.chmod(0o755)
        return script

    def system_tool(self, name: str, body: str = "exit 0") -> Path:
        return self.tool(name, body, self.system)

    def browser(self, name: str = "chromium") -> Path:
        """A stand-in browser on PATH that answers ``--version`` as Debian's chromium does (unlogged)."""
        script = self.bin / name
        script.write_text(f"#!/bin/sh\n{VERSION}\n")
        script.chmod(0o755)
        return script

    def apt_that_installs(self) -> None:
        """apt-get whose ``install ... chromium`` puts a chromium on PATH, as Debian's does."""
        self.system_tool("apt-get", f'case "$*" in *install*chromium*) printf \'#!/bin/sh\\n%s\\n\' \'{VERSION}\' '
                                    f'> "{self.bin}/chromium"; {CHMOD} +x "{self.bin}/chromium";; esac')

    @property
    def env(self) -> dict[str, str]:
        return {"PATH": str(self.bin)}

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Machine:
    stand_ins = Machine(tmp_path)
    monkeypatch.setattr(browser_provision, "APT_GET", str(stand_ins.system / "apt-get"))
    monkeypatch.setattr(browser_provision, "SUDO", str(stand_ins.system / "sudo"))
    return stand_ins


def provision(machine: Machine, *, euid: int = 0, locations: tuple[str, ...] = (), platform: str = "linux",
              env: dict[str, str] | None = None) -> tuple[BrowserOutcome, list[str]]:
    said: list[str] = []
    outcome = ensure_browser(said.append, env=env or machine.env, locations=locations, platform=platform,
                             euid=euid, timeout_s=60)
    return outcome, said


# -- finding ---------------------------------------------------------------------------------------

def test_a_browser_on_path_is_used_and_nothing_is_installed(machine: Machine) -> None:
    machine.system_tool("apt-get")
    browser = machine.browser("google-chrome")
    outcome, said = provision(machine)
    assert outcome == BrowserOutcome(str(browser))
    assert said == [f"browser: {browser}"]
    assert machine.calls() == []


def test_path_order_prefers_chromium(machine: Machine) -> None:
    machine.browser("google-chrome")
    chromium = machine.browser("chromium")
    assert find_browser(machine.env, locations=()) == str(chromium)


def test_usual_install_locations_are_searched_after_path(machine: Machine, tmp_path: Path) -> None:
    """Chrome on macOS lives in an app bundle never on PATH; a Debian install in /usr/bin even where
    a job's PATH leaves /usr/bin out."""
    bundle = tmp_path / "Google Chrome.app" / "Contents" / "MacOS"
    bundle.mkdir(parents=True)
    not_executable = bundle / "Chromium"
    not_executable.write_text("")
    chrome = bundle / "Google Chrome"
    chrome.write_text("#!/bin/sh\necho 'Google Chrome 120.0.6099.224'\n")
    chrome.chmod(0o755)
    locations = (str(tmp_path / "missing"), str(not_executable), str(chrome))
    assert find_browser(machine.env, locations) == str(chrome)
    outcome, said = provision(machine, locations=locations, platform="darwin")
    assert outcome.path == str(chrome) and said == [f"browser: {chrome}"]
    on_path = machine.browser("chromium-browser")
    assert find_browser(machine.env, locations) == str(on_path)
    assert find_browser({"PATH": str(tmp_path / "empty")}, locations=(str(not_executable),)) is None


def test_default_locations_per_platform() -> None:
    assert "/usr/bin/chromium" in default_locations("linux")
    assert any("Google Chrome.app" in p for p in default_locations("darwin"))
    assert default_locations("win32") == ()


def test_chromium_variable_wins_and_must_be_executable(machine: Machine, tmp_path: Path) -> None:
    machine.browser("chromium")
    named = machine.browser("my-chrome")
    outcome, _ = provision(machine, env={**machine.env, "CHROMIUM": str(named)})
    assert outcome.path == str(named)
    missing = tmp_path / "no-such-chrome"
    outcome, _ = provision(machine, env={**machine.env, "CHROMIUM": str(missing)})
    assert outcome.path is None
    assert outcome.error == (f"CHROMIUM={missing} is not an executable file: point it at a Chromium or Chrome, "
                             f"or unset it, then run `python3 ci/bootstrap.py` again")
    assert machine.calls() == []  # a wrong $CHROMIUM is reported, never papered over by an install


def test_a_browser_is_one_only_if_its_version_says_chromium_or_chrome(machine: Machine, tmp_path: Path) -> None:
    """Issue 49 item 10: ``CHROMIUM=/bin/sh`` was taken as the browser."""
    machine.apt_that_installs()
    outcome, said = provision(machine, env={**machine.env, "CHROMIUM": "/bin/sh"})
    assert (outcome.path, said) == (None, [])
    assert outcome.error == ("CHROMIUM=/bin/sh is not a Chromium or Chrome (`/bin/sh --version` printed "
                             f"{browser_problem('/bin/sh').split(' printed ')[1]}): point it at a Chromium or "
                             "Chrome, or unset it, then run `python3 ci/bootstrap.py` again")
    assert "not a Chromium or Chrome version" in outcome.error
    machine.tool("chromium", 'echo "hello from a script named chromium"')
    outcome, _ = provision(machine)
    assert outcome.error == (f"{machine.bin}/chromium is not a Chromium or Chrome (`{machine.bin}/chromium --version` "
                             "printed 'hello from a script named chromium', not a Chromium or Chrome version): set "
                             "CHROMIUM=/path/to/a/chrome, then run `python3 ci/bootstrap.py` again")
    assert machine.calls() == ["chromium --version"]  # refused, not installed over
    # It is asked in a clean environment, like everything else run on the caller's behalf.
    seen = tmp_path / "browser-env"
    asked = machine.tool("asked", f'/usr/bin/env > "{seen}"; {VERSION}')
    assert browser_problem(str(asked)) is None
    assert seen.read_text().splitlines() == [f"PATH={SYSTEM_PATH}", f"PWD={os.getcwd()}"]  # PWD: the shell's own


@pytest.mark.skipif(not os.access("/usr/bin/chromium", os.X_OK), reason="no Debian chromium on this machine")
def test_the_real_debian_chromium_is_accepted(machine: Machine) -> None:
    outcome, said = provision(machine, env={**machine.env, "CHROMIUM": "/usr/bin/chromium"})
    assert outcome == BrowserOutcome("/usr/bin/chromium") and said == ["browser: /usr/bin/chromium"]


def test_bootstrap_check_refuses_a_chromium_that_is_not_one(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``python3 ci/bootstrap.py --check`` on this checkout (it changes nothing)."""
    from ci import bootstrap
    monkeypatch.setenv("CHROMIUM", "/bin/sh")
    assert bootstrap.main(["--check"]) == 1
    assert "bootstrap: browser: CHROMIUM=/bin/sh is not a Chromium or Chrome (`/bin/sh --version` printed" \
        in capsys.readouterr().out


# -- installing ------------------------------------------------------------------------------------

def test_root_installs_debian_chromium_and_finds_it(machine: Machine) -> None:
    machine.apt_that_installs()
    outcome, said = provision(machine, euid=0)
    chromium = str(machine.bin / "chromium")
    assert outcome == BrowserOutcome(chromium, installed=True)
    assert machine.calls() == [f"apt-get {WAIT} update -qq", f"apt-get {WAIT} install -y -qq chromium"]
    clean = f"/usr/bin/env -i PATH={SYSTEM_PATH} DEBIAN_FRONTEND=noninteractive {machine.system}/apt-get {WAIT}"
    assert said[0] == (f"browser: none found; installing Debian's chromium with `{clean} update -qq && "
                       f"{clean} install -y -qq chromium` (about 30 s)")
    assert said[1:] == [f"browser: installed {chromium}"]
    again, said = provision(machine, euid=0)  # idempotent: the second run finds it
    assert again.path == chromium and not again.installed and len(machine.calls()) == 2


def test_non_root_installs_through_passwordless_sudo(machine: Machine) -> None:
    machine.apt_that_installs()
    machine.system_tool("sudo", 'if [ "$1" = -n ]; then shift; fi; exec "$@"')
    outcome, said = provision(machine, euid=1000)
    assert outcome.installed and outcome.path == str(machine.bin / "chromium")
    through_sudo = (f"sudo -n /usr/bin/env -i PATH={SYSTEM_PATH} DEBIAN_FRONTEND=noninteractive "
                    f"{machine.system}/apt-get {WAIT}")
    calls = machine.calls()
    assert calls == ["sudo -n true", f"{through_sudo} update -qq", f"apt-get {WAIT} update -qq",
                     f"{through_sudo} install -y -qq chromium", f"apt-get {WAIT} install -y -qq chromium"]
    # The announcement is what ran, both steps under sudo: each command is the sudo stand-in's call.
    announced = said[0].split("`")[1].split(" && ")
    assert [shlex.split(command) for command in announced] == \
        [[str(machine.system / "sudo"), *calls[i].split(" ")[1:]] for i in (1, 3)]


@pytest.mark.parametrize("sudo", [None, "echo 'sudo: a password is required' >&2; exit 1"])
def test_non_root_without_passwordless_sudo_names_the_command(machine: Machine, sudo: str | None) -> None:
    machine.apt_that_installs()
    if sudo is not None:
        machine.system_tool("sudo", sudo)
    outcome, said = provision(machine, euid=1000)
    assert outcome.path is None and said == []
    assert outcome.error == f"no Chromium or Chrome found, and installing one needs root: {INSTALL_LINE}"
    assert [c for c in machine.calls() if "apt-get" in c] == []  # never asked for a password


def test_failing_apt_get_stops_with_one_line(machine: Machine) -> None:
    machine.system_tool("apt-get", 'case "$*" in *install*) echo "E: Unable to locate package chromium" >&2; '
                                   'exit 100;; esac')
    outcome, _ = provision(machine, euid=0)
    assert outcome.path is None
    assert outcome.error == ("`apt-get install -y -qq chromium` failed (exit 100); run `sudo apt-get install -y "
                             "chromium` yourself (or set CHROMIUM=/path/to/a/chrome), then run "
                             "`python3 ci/bootstrap.py` again")
    assert machine.calls() == [f"apt-get {WAIT} update -qq", f"apt-get {WAIT} install -y -qq chromium"]


def test_a_failing_update_stops_before_the_install(machine: Machine) -> None:
    machine.system_tool("apt-get", "exit 100")
    outcome, _ = provision(machine, euid=0)
    assert outcome.error is not None and outcome.error.startswith("`apt-get update -qq` failed (exit 100)")
    assert machine.calls() == [f"apt-get {WAIT} update -qq"]


def test_an_install_that_leaves_no_browser_says_so(machine: Machine) -> None:
    machine.system_tool("apt-get")
    outcome, _ = provision(machine, euid=0)
    assert outcome.error == ("apt-get installed chromium but no browser is on PATH or in the usual places: "
                             "set CHROMIUM=/path/to/it, then run `python3 ci/bootstrap.py` again")


def test_a_hanging_apt_get_is_stopped(machine: Machine) -> None:
    machine.system_tool("apt-get", f"exec {shutil.which('sleep')} 30")
    outcome = ensure_browser(lambda _line: None, env=machine.env, locations=(), platform="linux", euid=0,
                             timeout_s=0.5)
    assert outcome.error is not None and outcome.error.startswith("`apt-get update -qq` did not finish in 0 s")


@pytest.mark.parametrize("euid", [0, 1000])
def test_apt_get_sudo_and_env_on_the_callers_path_are_never_run(machine: Machine, euid: int) -> None:
    """Issue 49 item 10: they were looked up on the caller's PATH and run as root."""
    for name in ("apt-get", "sudo", "env"):
        machine.tool(name, f'echo "ran the PATH {name}" >> "{machine.log}"; exit 0')
    machine.apt_that_installs()
    machine.system_tool("sudo", 'if [ "$1" = -n ]; then shift; fi; exec "$@"')
    outcome, _ = provision(machine, euid=euid)
    assert outcome.installed
    assert not [call for call in machine.calls() if call.startswith("ran the PATH")]
    assert [call.split(" ")[1] for call in machine.calls() if call.startswith("apt-get")] == ["-o", "-o"]


@pytest.mark.parametrize("euid", [0, 1000])
def test_the_callers_environment_does_not_reach_what_runs_as_root(machine: Machine, tmp_path: Path, euid: int,
                                                                  capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 49 item 10: LD_PRELOAD (and PYTHONPATH, APT_CONFIG) reached apt-get run as root. The
    stand-ins run the real /usr/bin/env to print what they were given, and the dynamic loader
    itself says on stderr when a process it starts (the real /usr/bin/env too) had LD_PRELOAD."""
    seen = tmp_path / "seen"
    machine.apt_that_installs()
    real_apt = machine.system / "apt-get"
    real_apt.rename(machine.system / "apt-get-installs")
    machine.system_tool("apt-get", f'echo "--- apt-get" >> "{seen}"; /usr/bin/env >> "{seen}"; '
                                   f'exec "{machine.system}/apt-get-installs" "$@"')
    machine.system_tool("sudo", f'echo "--- sudo" >> "{seen}"; /usr/bin/env >> "{seen}"; '
                                'if [ "$1" = -n ]; then shift; fi; exec "$@"')
    caller = {**machine.env, "LD_PRELOAD": str(tmp_path / "evil.so"), "PYTHONPATH": str(tmp_path),
              "APT_CONFIG": str(tmp_path / "apt.conf"), "HOME": str(tmp_path)}
    outcome, _ = provision(machine, euid=euid, env=caller)
    assert outcome.installed
    blocks = seen.read_text().split("--- ")[1:]
    assert len(blocks) == (5 if euid else 2)  # sudo -n true, then sudo and apt-get per step
    for block in blocks:
        name, *variables = block.splitlines()
        given = {v.split("=", 1)[0]: v.split("=", 1)[1] for v in variables if not v.startswith("PWD=")}
        assert given == {"PATH": SYSTEM_PATH, "DEBIAN_FRONTEND": "noninteractive"}, name
    assert "evil.so" not in capfd.readouterr().err


def test_no_usr_bin_env_refuses_before_running_anything(machine: Machine, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    machine.apt_that_installs()
    monkeypatch.setattr(browser_provision, "ENV", str(tmp_path / "no-env"))
    outcome, _ = provision(machine, euid=0)
    assert outcome.error == (f"no Chromium or Chrome found and no {tmp_path}/no-env to run {machine.system}/apt-get "
                             "in a clean environment: install Chromium or Google Chrome, or set "
                             "CHROMIUM=/path/to/it, then run `python3 ci/bootstrap.py` again")
    assert machine.calls() == []


@pytest.mark.parametrize("platform, apt, expected", [
    ("linux", False, "no Chromium or Chrome found and no {system}/apt-get to install one: install Chromium or "
                     "Google Chrome, or set CHROMIUM=/path/to/it, then run `python3 ci/bootstrap.py` again"),
    ("darwin", True, "no Chromium or Chrome found (the HUD's browser tests need one): install Chromium or "
                     "Google Chrome, or set CHROMIUM=/path/to/it, then run `python3 ci/bootstrap.py` again"),
])
def test_no_apt_get_or_not_linux_names_what_to_do(machine: Machine, platform: str, apt: bool, expected: str) -> None:
    if apt:
        machine.apt_that_installs()
    outcome, _ = provision(machine, platform=platform)
    assert (outcome.path, outcome.error) == (None, expected.format(system=machine.system))
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
    for name in ("bootstrap.py", "atomic_write.py", "regular_file.py", "browser_locate.py", "browser_provision.py",
                 "py312_env.py"):
        shutil.copy2(REPO / "ci" / name, project / "ci" / name)
    (project / "pyproject.toml").write_text(
        "[build-system]\nrequires = ['setuptools>=68']\nbuild-backend = 'setuptools.build_meta'\n"
        "[project]\nname = 'no-browser-probe'\nversion = '0'\n"
        "[project.optional-dependencies]\nfp4kv = []\ntest = []\n[tool.setuptools]\npy-modules = []\n")
    machine = Machine(tmp_path)
    apt = machine.system_tool("apt-get", 'echo "E: Failed to fetch http://deb.debian.org/debian/dists/bookworm/'
                                         'InRelease" >&2; exit 100')
    run_script = ("import sys; sys.path.insert(0, 'ci'); import browser_locate, browser_provision; "
                  f"browser_locate.INSTALL_LOCATIONS.clear(); browser_provision.APT_GET = {str(apt)!r}; "
                  f"browser_provision.SUDO = {str(machine.system / 'sudo')!r}; "
                  "import bootstrap; sys.exit(bootstrap.main(['--no-py312']))")  # the browser is the subject
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
