"""Drive a headless Chromium over the DevTools protocol on a pipe (``--remote-debugging-pipe``):
open a page, read the DOM, press keys, take screenshots. Standard library only.

Contract:
- `Browser()` starts Debian's ``chromium`` (or ``$CHROMIUM``) headless with a fresh profile in a
  temporary directory; `BrowserError` when there is none or it does not answer. The browser
  reads commands on its fd 3 and writes replies on fd 4, NUL-terminated JSON messages.
- `Browser.open(path)` opens ``file://path`` in a new tab and waits for its load event; the
  `Tab` records every request the page made (`Tab.requests`), every console error and uncaught
  exception (`Tab.errors`), and the first paint (`Tab.first_paint_ms`).
- `Tab.key` sends real key events (``Input.dispatchKeyEvent``: keyDown, char, keyUp), the way a
  keyboard does, not a script setting values.
- Every call has a timeout (`TIMEOUT_S`); nothing waits forever on a browser that hangs.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ci.browser_locate import find_browser

TIMEOUT_S = 30.0
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
         "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-extensions", "--mute-audio", "--hide-scrollbars")

# Key -> (code, windows virtual key code) for the keys that produce no text.
_SPECIAL = {"Escape": ("Escape", 27), "Enter": ("Enter", 13), "Tab": ("Tab", 9), "ArrowDown": ("ArrowDown", 40),
            "ArrowUp": ("ArrowUp", 38), "Backspace": ("Backspace", 8), "ArrowLeft": ("ArrowLeft", 37),
            "ArrowRight": ("ArrowRight", 39), "Home": ("Home", 36), "End": ("End", 35), "PageUp": ("PageUp", 33),
            "PageDown": ("PageDown", 34)}
MODIFIERS = {"Alt": 1, "Control": 2, "Meta": 4, "Shift": 8}  # the protocol's bit field


# Waits (up to 10 s) for the paint entry: right after the load event it may not be recorded yet.
_FIRST_PAINT = """new Promise(function(done){
  var name = 'first-contentful-paint', seen = performance.getEntriesByName(name)[0];
  if (seen) return done(seen.startTime);
  new PerformanceObserver(function(list){ var e = list.getEntriesByName(name)[0]; if (e) done(e.startTime); })
    .observe({type: 'paint', buffered: true});
  setTimeout(function(){ done(null); }, 10000);
})"""


class BrowserError(RuntimeError):
    """No browser, or it failed to start, answer or do what was asked."""


def find_chromium() -> str | None:
    """The browser `ci/bootstrap.py` found or installed: ``$CHROMIUM``, else one on ``PATH``, else
    one in the platform's usual install locations (`ci.browser_locate`)."""
    return find_browser()


class Browser:
    """One headless browser process; a context manager (the process ends with the block)."""

    def __init__(self, width: int = 1400, height: int = 900):
        exe = find_chromium()
        if exe is None:
            raise BrowserError("no Chromium or Chrome found (python3 ci/bootstrap.py installs one; or set $CHROMIUM)")
        self.width, self.height = width, height
        self._profile = tempfile.mkdtemp(prefix="ci-report-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def place_fds() -> None:  # the protocol's fixed descriptors: commands on 3, replies on 4
            read_end, write_end = os.dup(to_browser_r), os.dup(from_browser_w)  # neither may be 3 or 4 now
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        try:
            self.proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={self._profile}",
                                          f"--window-size={width},{height}", "about:blank"],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, preexec_fn=place_fds, close_fds=False)
        except OSError as exc:
            shutil.rmtree(self._profile, ignore_errors=True)
            raise BrowserError(f"cannot start {exe}: {exc}") from exc
        finally:
            os.close(to_browser_r)
            os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        try:
            self.send("Browser.getVersion")
        except BrowserError:
            self.close()
            raise

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            for fd in (self._to_browser, self._from_browser):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self._profile, ignore_errors=True)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send one command and wait for its reply's ``result``; events meanwhile go to `events`."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self._to_browser, data):]
        except OSError as exc:
            raise BrowserError(f"{method}: the browser is gone ({exc})") from exc
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._read(deadline, method)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def _read(self, deadline: float, what: str) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"{what}: no answer from the browser in {TIMEOUT_S:.0f} s")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise BrowserError(f"{what}: the browser closed its pipe (exit {self.proc.poll()})")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def wait_event(self, method: str, session: str, timeout: float = TIMEOUT_S) -> dict[str, Any]:
        """The first event ``method`` of ``session`` not yet taken (it is removed from `events`)."""
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event["method"] == method and event.get("sessionId") == session:
                    return self.events.pop(i)
            self.events.append(self._read(deadline, f"waiting for {method}"))

    def open(self, path: str | Path, fragment: str = "") -> "Tab":
        """A new tab showing ``file://path`` (with ``#fragment`` when given), loaded; see `Tab`."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        tab = Tab(self, session, target)
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                         "deviceScaleFactor": 1, "mobile": False}, session)
        tab.navigate(Path(path).resolve().as_uri() + (f"#{fragment}" if fragment else ""))
        return tab


class Tab:
    """One page of a `Browser`, attached by a flat session."""

    def __init__(self, browser: Browser, session: str, target: str):
        self.browser, self.session, self.target = browser, session, target

    def close(self) -> None:
        """Close this tab (its events stay in `Browser.events`)."""
        self.browser.send("Target.closeTarget", {"targetId": self.target})

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def navigate(self, url: str) -> None:
        reply = self.send("Page.navigate", {"url": url})
        if reply.get("errorText"):
            raise BrowserError(f"cannot open {url}: {reply['errorText']}")
        self.browser.wait_event("Page.loadEventFired", self.session)

    def _mine(self, method: str) -> list[dict[str, Any]]:
        return [e["params"] for e in self.browser.events if e["method"] == method and e.get("sessionId") == self.session]

    @property
    def requests(self) -> list[str]:
        """Every URL the page requested, in order."""
        return [e["request"]["url"] for e in self._mine("Network.requestWillBeSent")]

    @property
    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors (a CSP violation is one)."""
        out = [" ".join(str(a.get("value", a.get("description", ""))) for a in e.get("args", []))
               for e in self._mine("Runtime.consoleAPICalled") if e.get("type") in ("error", "assert")]
        out += [e["exceptionDetails"].get("exception", {}).get("description") or e["exceptionDetails"].get("text", "")
                for e in self._mine("Runtime.exceptionThrown")]
        out += [e["entry"].get("text", "") for e in self._mine("Log.entryAdded") if e["entry"].get("level") == "error"]
        return out

    def eval(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page; `BrowserError` if it throws."""
        reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression[:80]}: {reply['exceptionDetails'].get('text')}")
        return reply["result"].get("value")

    def first_paint_ms(self) -> float | None:
        """First contentful paint after navigation started, in milliseconds (None if not yet)."""
        return self.eval(_FIRST_PAINT)

    def load_ms(self) -> float:
        """Milliseconds from the navigation's start to the end of its load event (Navigation Timing)."""
        return self.eval("performance.getEntriesByType('navigation')[0].loadEventEnd")

    def key(self, key: str, *held: str) -> None:
        """Press and release one key: a printable character, or one of Escape, Enter, Tab, the arrows,
        Home, End, PageUp, PageDown, Backspace; ``held`` names modifiers held meanwhile (`MODIFIERS`)."""
        if key in _SPECIAL:
            code, vk = _SPECIAL[key]
            base = {"key": key, "code": code, "windowsVirtualKeyCode": vk, "nativeVirtualKeyCode": vk,
                    "modifiers": sum(MODIFIERS[m] for m in held)}
            self.send("Input.dispatchKeyEvent", {"type": "rawKeyDown", **base})
            if key in ("Enter", "Tab"):
                self.send("Input.dispatchKeyEvent", {"type": "char", "text": "\r" if key == "Enter" else "\t", **base})
            self.send("Input.dispatchKeyEvent", {"type": "keyUp", **base})
            return
        if len(key) != 1:
            raise BrowserError(f"key {key!r}: one character, or one of {', '.join(_SPECIAL)}")
        vk = ord(key.upper()) if key.isalnum() else 0
        base = {"key": key, "windowsVirtualKeyCode": vk}
        self.send("Input.dispatchKeyEvent", {"type": "keyDown", "text": key, "unmodifiedText": key, **base})
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", **base})

    def type(self, text: str) -> None:
        for ch in text:
            self.key(ch)

    def screenshot(self, full_page: bool = False) -> bytes:
        """A PNG of the viewport (or, with ``full_page``, of the whole page)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.eval("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size[0], "height": min(size[1], 8000), "scale": 1})
        return base64.b64decode(self.send("Page.captureScreenshot", params)["data"])
