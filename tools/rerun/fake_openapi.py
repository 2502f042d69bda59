"""A dev-time check of the fake GitHub against GitHub's own OpenAPI description.

The description is not in this repository (73 MB): ``npm pack @octokit/openapi`` and unpack
``package/generated/api.github.com.deref.json`` (every ``$ref`` resolved), then point
``$RERUN_GITHUB_OPENAPI`` at it; tests/rerun/conftest.py then gives every fake a `Contract` and
fails a test whose requests or answers disagree with it. Without the variable nothing is checked.

`Contract.check` looks up the operation of a request (method and path template; an unknown one is
a problem: the fake answers an endpoint GitHub does not have) and checks, with ``jsonschema``:

* the request: each documented query parameter's value against its schema (integers and booleans
  parsed from the query string), the JSON body against the request body schema, ``required``
  included (what the bot sends must be complete);
* the answer, when its status is documented for the operation: the JSON body against that
  status's schema, without ``required`` unless ``require_all`` (the fake still leaves out most of
  the fields GitHub sends: an answer must not contradict the description, it need not be whole);
  a status the description does not list is a problem, except for scripted failures (5xx,
  rate limits) which GitHub sends on any endpoint.

OpenAPI 3.0's ``nullable`` becomes JSON Schema's ``null`` type; ``format`` is not checked.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator

ENV = "RERUN_GITHUB_OPENAPI"
_METHODS = ("get", "post", "patch", "put", "delete")


def _json_schema(schema: Any, require_all: bool) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema (``nullable``; ``required`` dropped unless asked)."""
    if isinstance(schema, list):
        return [_json_schema(item, require_all) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _json_schema(v, require_all) for k, v in schema.items()
           if not k.startswith("x-") and k not in ("nullable", "example", "examples", "discriminator")
           and (require_all or k != "required" or not isinstance(v, list))}
    if schema.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


@dataclass(frozen=True)
class _Operation:
    template: str
    pattern: re.Pattern[str]
    spec: dict[str, Any]


class Contract:
    """The operations of one OpenAPI description, to check the fake's traffic against."""

    def __init__(self, spec: dict[str, Any], *, require_all: bool = False):
        self.require_all = require_all
        self._operations: dict[str, list[_Operation]] = {m: [] for m in _METHODS}
        for template, item in spec["paths"].items():
            pattern = re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)))
            for method in _METHODS:
                if method in item:
                    self._operations[method].append(_Operation(template, pattern, item[method]))
        self._validators: dict[int, Draft7Validator] = {}

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> "Contract":
        return cls(json.loads(Path(path).read_text(encoding="utf-8")), **kwargs)

    def operation(self, method: str, path: str) -> _Operation | None:
        """The operation of a request; the template with the most literal text wins a tie."""
        found = [op for op in self._operations.get(method.lower(), []) if op.pattern.fullmatch(path)]
        return max(found, key=lambda op: len(re.sub(r"\{[^}]+\}", "", op.template)), default=None)

    def check(self, method: str, path: str, query: dict[str, list[str]], body: Any, status: int,
              answer: Any, scripted: bool = False) -> list[str]:
        """Every way this request and its answer disagree with the description (empty: none)."""
        where = f"{method} {path}"
        op = self.operation(method, path)
        if op is None:
            return [f"{where}: GitHub has no such operation"]
        problems = [f"{where} ({op.template}): {p}" for p in self._request(op, query, body)]
        responses = op.spec.get("responses", {})
        if str(status) not in responses:
            if not scripted:
                problems.append(f"{where} ({op.template}): status {status} is not documented "
                                f"(documented: {', '.join(responses)})")
            return problems
        content = (responses[str(status)].get("content") or {}).get("application/json")
        if content is None:
            if answer not in (None, b"", ""):
                problems.append(f"{where} ({op.template}): status {status} has no body, the fake sent one")
            return problems
        problems += [f"{where} ({op.template}) -> {status}: {p}"
                     for p in self._errors(content.get("schema", {}), answer, self.require_all)]
        return problems

    def _request(self, op: _Operation, query: dict[str, list[str]], body: Any) -> list[str]:
        problems = []
        params = {p["name"]: p for p in op.spec.get("parameters", []) if p.get("in") == "query"}
        for name, values in query.items():
            if name not in params:
                problems.append(f"query parameter {name!r} is not documented")
                continue
            schema = params[name].get("schema", {})
            for value in values:
                problems += [f"query {name}={value!r}: {p}" for p in self._errors(schema, _typed(value, schema), True)]
        content = ((op.spec.get("requestBody") or {}).get("content") or {}).get("application/json")
        if content is not None and body is not None:
            problems += [f"request body: {p}" for p in self._errors(content.get("schema", {}), body, True)]
        elif body is not None and content is None:
            problems.append("the operation takes no JSON body")
        return problems

    def _errors(self, schema: dict[str, Any], value: Any, require_all: bool) -> list[str]:
        key = id(schema) * 2 + require_all
        if key not in self._validators:
            self._validators[key] = Draft7Validator(_json_schema(schema, require_all))
        return sorted(f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}"
                      for e in self._validators[key].iter_errors(value))


def _typed(value: str, schema: dict[str, Any]) -> Any:
    """A query string value as the type its schema says (left a string when it does not parse)."""
    kind = schema.get("type")
    if kind == "integer" and re.fullmatch(r"-?\d+", value):
        return int(value)
    if kind == "boolean" and value in ("true", "false"):
        return value == "true"
    return value


__all__ = ["Contract", "ENV"]
