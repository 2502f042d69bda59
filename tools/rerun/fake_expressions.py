"""GitHub Actions expressions for the fake GitHub: the subset the project's ``run-name`` lines use.

The fake gives each run the ``display_title`` GitHub would: the workflow's ``run-name`` with every
``${{ ... }}`` evaluated against the run's contexts (``github`` with ``event`` and ``event_name``
for an event-triggered run, ``inputs`` for a dispatched one). Supported, with GitHub's semantics:

* literals: ``'text'`` (``''`` is a quote), integers, ``true``, ``false``, ``null``;
* context paths ``github.event.pull_request.number`` (a missing property is ``null``);
* ``!``, ``==``, ``!=`` (strings compared case-insensitively), ``&&`` and ``||`` (each returns one
  of its operands: ``a || b`` is ``a`` when truthy, else ``b``), parentheses;
* ``format('{0} and {1}', a, b)``.

``null``, ``false``, ``0`` and ``''`` are falsy; ``null`` renders as the empty string. Anything
else (another function, an index ``a[0]``, a context the run does not have) is a ValueError: the
fake refuses what it cannot evaluate instead of rendering a title GitHub would not.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+)|(?P<op>&&|\|\||==|!=|[!(),])"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*))")
_EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.S)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, at = [], 0
    while at < len(text.rstrip()):
        match = _TOKEN.match(text, at)
        if match is None:
            raise ValueError(f"the fake cannot evaluate {text.strip()!r} (at {text[at:at + 20]!r})")
        kind = match.lastgroup or ""
        out.append((kind, match[kind]))
        at = match.end()
    return out


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class _Parser:
    def __init__(self, text: str, contexts: Mapping[str, Any]):
        self.tokens, self.at, self.contexts, self.text = _tokens(text), 0, contexts, text.strip()

    def parse(self) -> Any:
        value = self._or()
        if self.at != len(self.tokens):
            raise ValueError(f"the fake cannot evaluate {self.text!r}: unexpected {self.tokens[self.at][1]!r}")
        return value

    def _peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def _take(self, expected: str | None = None) -> tuple[str, str]:
        if self.at >= len(self.tokens) or (expected is not None and self.tokens[self.at][1] != expected):
            raise ValueError(f"the fake cannot evaluate {self.text!r}: expected {expected or 'more'}")
        self.at += 1
        return self.tokens[self.at - 1]

    def _or(self) -> Any:
        value = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            value = value if _truthy(value) else right
        return value

    def _and(self) -> Any:
        value = self._compare()
        while self._peek() == "&&":
            self._take()
            right = self._compare()
            value = right if _truthy(value) else value
        return value

    def _compare(self) -> Any:
        value = self._unary()
        while self._peek() in ("==", "!="):
            op = self._take()[1]
            right = self._unary()
            same = (value.lower() == right.lower() if isinstance(value, str) and isinstance(right, str)
                    else value == right)
            value = same if op == "==" else not same
        return value

    def _unary(self) -> Any:
        if self._peek() == "!":
            self._take()
            return not _truthy(self._unary())
        return self._primary()

    def _primary(self) -> Any:
        kind, token = self._take()
        if token == "(":
            value = self._or()
            self._take(")")
            return value
        if kind == "str":
            return token[1:-1].replace("''", "'")
        if kind == "num":
            return int(token)
        if kind != "name":
            raise ValueError(f"the fake cannot evaluate {self.text!r}: unexpected {token!r}")
        if token in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[token]
        if token == "format" and self._peek() == "(":
            return self._format()
        root, *path = token.split(".")
        if root not in self.contexts:
            raise ValueError(f"the fake cannot evaluate {self.text!r}: this run has no {root!r} context")
        value: Any = self.contexts[root]
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def _format(self) -> str:
        self._take("(")
        args = [self._or()]
        while self._peek() == ",":
            self._take()
            args.append(self._or())
        self._take(")")
        template = args[0]
        if not isinstance(template, str):
            raise ValueError(f"the fake cannot evaluate {self.text!r}: format() needs a string first")
        return re.sub(r"\{(\d+)\}", lambda m: _text(args[int(m[1]) + 1]), template)


def evaluate(expression: str, contexts: Mapping[str, Any]) -> Any:
    """The value of one expression (the text between ``${{`` and ``}}``)."""
    return _Parser(expression, contexts).parse()


def render(template: str, contexts: Mapping[str, Any]) -> str:
    """``template`` with every ``${{ ... }}`` replaced by its value as text."""
    return _EXPRESSION.sub(lambda m: _text(evaluate(m[1], contexts)), template)


__all__ = ["evaluate", "render"]
