"""Serve a `FakeGitHub` over real HTTP on 127.0.0.1: in a thread (`serve`) or as its own process.

``python -m tools.rerun.fake_server --setup SETUP.json --port-file FILE`` runs it as a process (the
benchmark does, so that the fake's CPU time does not share the bot's or the senders' interpreter).
SETUP.json: ``{"token": ..., "users": {login: permission}, "pulls": {number: head_sha},
"run_name_template": ...}``. The port is written to FILE once listening; ``GET /_fake/state``
returns `FakeGitHub.state` as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

from tools.rerun.fake_github import CUT_HEADER, FakeGitHub


class _Handler(BaseHTTPRequestHandler):
    server: "_FakeServer"
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if len(raw) < length:  # the client died mid-request (a kill -9 test): GitHub never sees such a request
            self.close_connection = True
            return
        if self.command == "GET" and self.path == "/_fake/state":
            status, extra, body, delay = 200, {}, self.server.fake.state(), 0.0
        else:
            headers = {k.lower(): v for k, v in self.headers.items()}
            (status, extra, body), delay = self.server.fake.respond(self.command, self.path, headers, raw)
        if delay:
            time.sleep(delay)
        data = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
        cut = extra.pop(CUT_HEADER, None) is not None
        try:
            self.send_response(status)
            for key, value in extra.items():
                self.send_header(key, value)
            if data and "Content-Type" not in extra:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:len(data) // 2] if cut else data)
            if cut:
                self.wfile.flush()
                self.close_connection = True
        except OSError:  # the client gave up (timed out) while we were "hanging"
            self.close_connection = True

    do_GET = do_POST = do_PATCH = _serve


class _FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, fake: FakeGitHub, port: int = 0):
        self.fake = fake
        super().__init__(("127.0.0.1", port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up mid-request; nothing to report in a fake


@contextmanager
def serve(fake: FakeGitHub) -> Iterator[str]:
    """Serve ``fake`` on 127.0.0.1 (a free port) in a thread; yields the base URL."""
    server = _FakeServer(fake)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-github", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def from_setup(setup: dict[str, Any]) -> FakeGitHub:
    """A `FakeGitHub` configured from a SETUP.json document (see the module docstring)."""
    fake = FakeGitHub(token=setup.get("token", "test-token"), run_name_template=setup.get("run_name_template"))
    for user, permission in setup.get("users", {}).items():
        fake.add_user(user, permission)
    for number, sha in setup.get("pulls", {}).items():
        fake.add_pull(int(number), sha)
    return fake


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.rerun.fake_server", description=__doc__.splitlines()[0])
    parser.add_argument("--setup", required=True, help="SETUP.json (see the module docstring)")
    parser.add_argument("--port-file", required=True, help="file to write the listening port to")
    args = parser.parse_args(argv)
    server = _FakeServer(from_setup(json.loads(Path(args.setup).read_text(encoding="utf-8"))))
    tmp = Path(args.port_file + ".tmp")
    tmp.write_text(str(server.server_address[1]), encoding="utf-8")
    tmp.replace(args.port_file)
    try:
        server.serve_forever(0.05)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
