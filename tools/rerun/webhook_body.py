"""The JSON document of a webhook delivery, in either content type a GitHub webhook can send.

A webhook's "Content type" setting is ``application/json`` (the body is the JSON document) or
``application/x-www-form-urlencoded`` (GitHub's default for a new repository webhook: the body is
``payload=<the JSON document, URL-encoded>``). ``X-Hub-Signature-256`` is computed over the raw
body as sent in both cases, so the server checks the signature first and decodes after. A request
without a Content-Type is read as JSON; any other type is refused with a message that names the
setting to change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

JSON_TYPE = "application/json"
FORM_TYPE = "application/x-www-form-urlencoded"
SETTING_HINT = (f"set the webhook's Content type to {JSON_TYPE} (or {FORM_TYPE}) in the repository's "
                f"Settings > Webhooks")


class BodyError(ValueError):
    """The body cannot be read as a delivery; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Delivery:
    """``document``: the JSON text (what the journal keeps, whatever the content type was);
    ``payload``: it parsed."""

    document: bytes
    payload: Any


def decode(content_type: str | None, body: bytes) -> Delivery:
    """The delivery in ``body`` (see the module docstring); `BodyError` says what is wrong."""
    media = (content_type or JSON_TYPE).split(";", 1)[0].strip().lower()
    if media == FORM_TYPE:
        document = _form_payload(body)
    elif media == JSON_TYPE:
        document = body
    else:
        raise BodyError(415, f"unsupported Content-Type {media[:60]!r}: {SETTING_HINT}")
    try:
        return Delivery(document, json.loads(document))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BodyError(400, f"malformed JSON: {exc}") from None


def _form_payload(body: bytes) -> bytes:
    try:
        fields = parse_qs(body.decode("ascii"), keep_blank_values=True, strict_parsing=True, max_num_fields=16,
                          encoding="utf-8", errors="strict")
    except (UnicodeDecodeError, ValueError) as exc:
        raise BodyError(400, f"malformed {FORM_TYPE} body: {exc}") from None
    values = fields.get("payload", [])
    if len(values) != 1:
        raise BodyError(400, f"a {FORM_TYPE} delivery needs exactly one `payload` field, got {len(values)}")
    return values[0].encode("utf-8")


__all__ = ["BodyError", "Delivery", "FORM_TYPE", "JSON_TYPE", "SETTING_HINT", "decode"]
