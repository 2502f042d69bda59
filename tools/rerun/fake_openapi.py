"""The fake GitHub held to GitHub's own published OpenAPI description, on every exchange.

The description is `tools/rerun/github_contract/openapi.json`: the operations the fake answers,
extracted (dereferenced, prose dropped) from the pinned npm package ``@octokit/openapi`` by
`tools.rerun.contract_extract`, which a test re-derives from the package. `published` loads it;
every `tools.rerun.fake_github.FakeGitHub` checks its traffic against it unless told otherwise.

`Contract.check` looks up the operation of a request (method and path template; one the extract
lacks is a problem: the fake answers an endpoint it was not held to) and checks, with
``jsonschema``:

* the request: each path parameter and documented query parameter against its schema (integers
  and booleans parsed from the text), required query parameters and bodies present, the JSON body
  against the request body schema, ``required`` included (what the bot sends must be complete);
* the answer, when its status is documented for the operation: the JSON body against that
  status's schema, every ``required`` field included when ``require_all`` (`published`'s default:
  the fake's answers are whole); a status the description does not list is a problem, except for
  scripted failures (5xx, rate limits) which GitHub sends on any endpoint.

`Contract.example` gives GitHub's example answer of an operation; `complete` lays the fake's
answer over it, so the fields the fake does not model still come, as GitHub sends them.

OpenAPI 3.0's ``nullable`` becomes JSON Schema's ``null`` type; ``format`` is not checked.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from jsonschema import Draft7Validator, ValidationError, validators

ENV = "RERUN_GITHUB_OPENAPI"  # another description to check against (the whole published one, say)
EXTRACT = Path(__file__).resolve().parent / "github_contract" / "openapi.json"
# Statuses GitHub really sends that its description leaves out, per (method, template).
UNDOCUMENTED = {
    # "No ref found for: ...", more than 25 inputs: answered 422; the description lists 200 and 204
    ("post", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches"): {422},
}
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
        return {"anyOf": [{"type": "null"}, out]}  # null first: most nullable fields the fake sends are null
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
            pattern = re.compile(re.sub(r"\\\{([^}]+)\\\}", lambda m: f"(?P<{_group(m[1])}>[^/]+)",
                                        re.escape(template)))
            for method in _METHODS:
                if method in item:
                    self._operations[method].append(_Operation(template, pattern, item[method]))
        self._validators: dict[int, Any] = {}

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
            return [f"{where}: no such operation in GitHub's description"]
        match = op.pattern.fullmatch(path)
        assert match is not None
        problems = [f"{where} ({op.template}): {p}" for p in self._request(op, match, query, body)]
        responses = op.spec.get("responses", {})
        if str(status) not in responses:
            if not scripted and status not in UNDOCUMENTED.get((method.lower(), op.template), ()):
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

    def example(self, method: str, path: str, status: int) -> Any:
        """GitHub's example answer (a fresh copy) for this request and status, or None."""
        op = self.operation(method, path)
        answer = None if op is None else op.spec.get("responses", {}).get(str(status), {})
        content = ((answer or {}).get("content") or {}).get("application/json") or {}
        return copy.deepcopy(content["example"]) if "example" in content else None

    def _request(self, op: _Operation, match: re.Match[str], query: dict[str, list[str]], body: Any) -> list[str]:
        problems = []
        for param in op.spec.get("parameters", []):
            if param.get("in") == "path":
                value = match.groupdict().get(_group(param["name"]))
                schema = param.get("schema", {})
                if value is not None:
                    problems += [f"path {param['name']}={value!r}: {p}"
                                 for p in self._errors(schema, _typed(value, schema), True)]
            elif param.get("in") == "query" and param.get("required") and param["name"] not in query:
                problems.append(f"required query parameter {param['name']!r} is missing")
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
        elif body is None and (op.spec.get("requestBody") or {}).get("required"):
            problems.append("the operation requires a JSON body, none was sent")
        return problems

    def _errors(self, schema: dict[str, Any], value: Any, require_all: bool) -> list[str]:
        key = id(schema) * 2 + require_all
        if key not in self._validators:
            self._validators[key] = _Validator(_json_schema(schema, require_all))
        return sorted(f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}"
                      for e in _leaves(self._validators[key].iter_errors(value)))


# (id of an items schema, item as JSON) -> that schema (kept alive, so that its id is not reused)
_valid_items: dict[tuple[int, str], Any] = {}
_valid_items_lock = threading.Lock()


def _items(validator: Any, items: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """Draft 7's ``items``, remembering the array items found valid: a runs listing holds the
    same runs page after page, and each run is a large schema (two repositories, two users)."""
    if not validator.is_type(instance, "array") or not isinstance(items, dict):
        yield from _DRAFT7_ITEMS(validator, items, instance, schema)
        return
    for index, item in enumerate(instance):
        key = (id(items), json.dumps(item, sort_keys=True))
        if key in _valid_items:
            continue
        errors = list(validator.descend(item, items, path=index))
        if not errors:
            with _valid_items_lock:
                if len(_valid_items) > 50_000:
                    _valid_items.clear()
                _valid_items[key] = items
        yield from errors


_DRAFT7_ITEMS = Draft7Validator.VALIDATORS["items"]
_Validator = validators.extend(Draft7Validator, {"items": _items})


def _leaves(errors: Any) -> Iterator[ValidationError]:
    """The errors that say what is wrong: inside a ``nullable`` value (an ``anyOf`` with null), the
    errors of the non-null branch, not "is not valid under any of the given schemas"."""
    for error in errors:
        inner = [e for e in error.context or [] if not (e.validator == "type" and e.validator_value == "null")]
        yield from (_leaves(inner) if inner else [error])


def _group(name: str) -> str:
    return "p_" + re.sub(r"\W", "_", name)


@functools.lru_cache(maxsize=None)
def published(require_all: bool = True) -> Contract:
    """The committed extract of GitHub's description (`EXTRACT`), loaded once per process."""
    return Contract.load(EXTRACT, require_all=require_all)


WEBHOOKS = EXTRACT.with_name("webhooks.json")  # @octokit/openapi-webhooks' payload schemas (contract_extract)


@functools.lru_cache(maxsize=1)
def _webhook_schemas() -> dict[str, Any]:
    return json.loads(WEBHOOKS.read_text(encoding="utf-8"))


def webhook_problems(event: str, payload: Any) -> list[str]:
    """What is wrong with ``payload`` as GitHub's ``event`` delivery of its ``action``, by the
    extract of @octokit/openapi-webhooks (OpenAPI 3.1: plain JSON Schema); `KeyError` for an
    event and action the extract does not hold."""
    action = payload.get("action") if isinstance(payload, dict) else None
    schema = _webhook_schemas()[f"{event}.{action}"]
    return [f"{event}.{action} {'/'.join(map(str, e.absolute_path)) or '(payload)'}: {e.message[:200]}"
            for e in _leaves(Draft7Validator(schema).iter_errors(payload))]


OMIT: Any = object()  # a field of the fake's answer that must not come from the example


def complete(answer: Any, example: Any) -> Any:
    """``answer`` laid over GitHub's ``example``: the answer's fields win (`OMIT` removes one),
    nested objects merge, the items of an answer's list each merge with the example's first item."""
    if isinstance(answer, dict) and isinstance(example, dict):
        out = dict(example)
        for key, value in answer.items():
            if value is OMIT:
                out.pop(key, None)
            else:
                out[key] = complete(value, example.get(key)) if key in example else value
        return out
    if isinstance(answer, list) and isinstance(example, list) and example:
        return [complete(item, example[0]) for item in answer]
    return answer


def _typed(value: str, schema: dict[str, Any]) -> Any:
    """A query string value as the type its schema says (left a string when it does not parse)."""
    kind = schema.get("type")
    if kind == "integer" and re.fullmatch(r"-?\d+", value):
        return int(value)
    if kind == "boolean" and value in ("true", "false"):
        return value == "true"
    return value


__all__ = ["Contract", "ENV", "EXTRACT", "OMIT", "WEBHOOKS", "complete", "published", "webhook_problems"]
