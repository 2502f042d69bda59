"""Reading the API token and the webhook secret, and keeping them out of every message.

Contract:

* `read_secret` strips surrounding whitespace (the newline ``echo`` leaves is normal) and then
  refuses an empty or short value, or one with whitespace or a control character *inside* (a token is one
  line: an embedded newline would end up in an HTTP header, and ``requests``' error for that quotes
  the header value). The error names the file and the position, never the value.
* `redact` replaces every known secret in a text with ``***``; the CLI installs `RedactingFilter`
  on its log handler and `tools.rerun.rest` passes every error message through it, so no message,
  exception or log line carries a token.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Iterable

_MASK = "***"
MIN_LENGTH = 6  # shorter is no secret, and hiding it would mangle every message it occurs in
_lock = threading.Lock()
_known: set[str] = set()


class SecretError(ValueError):
    """A token or secret file that cannot be used; the message never contains the value."""


def remember(secret: str) -> str:
    """Register ``secret`` so `redact` hides it everywhere from now on; returns it unchanged.
    Values shorter than `MIN_LENGTH` are not registered (`check_secret` refuses them)."""
    if len(secret) >= MIN_LENGTH:
        with _lock:
            _known.add(secret)
    return secret


def redact(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with every remembered secret (and each of ``extra``) replaced by ``***``.

    Longer secrets are replaced first, so a secret that contains another is hidden whole.
    """
    with _lock:
        secrets = sorted({*_known, *(e for e in extra if len(e) >= MIN_LENGTH)}, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, _MASK)
    return text


def check_secret(value: str, what: str) -> str:
    """``value`` stripped; raises `SecretError` naming ``what`` (never the value) if it is empty
    or has whitespace or control characters inside."""
    stripped = value.strip()
    if not stripped:
        raise SecretError(f"{what} is empty; refusing to run without it")
    for index, char in enumerate(stripped):
        if not ("!" <= char <= "~"):
            kind = "a line break" if char in "\r\n" else (
                "whitespace" if char.isspace() else f"the character U+{ord(char):04X}")
            raise SecretError(f"{what} has {kind} inside it (at character {index + 1} of {len(stripped)}); "
                              f"it must be a single line of printable ASCII. The value is not shown.")
    if len(stripped) < MIN_LENGTH:
        raise SecretError(f"{what} is {len(stripped)} characters long; a token or secret has at least {MIN_LENGTH}")
    return remember(stripped)


def read_secret(path: str | Path, what: str) -> str:
    """The secret in file ``path`` (see `check_secret`); OSError and non-UTF-8 become `SecretError`."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SecretError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SecretError(f"{what} file {path} is not UTF-8 (byte {exc.start}); the value is not shown") from None
    return check_secret(text, f"{what} file {path}")


class RedactingFilter(logging.Filter):
    """A log filter that renders each record's message once and redacts it (and its traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info:
            formatted = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact(formatted)
            record.exc_info = None
        return True


__all__ = ["RedactingFilter", "SecretError", "check_secret", "read_secret", "redact", "remember"]
