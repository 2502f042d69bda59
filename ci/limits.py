"""Bounds shared by the registry, the JUnit reader and the durations writer (no dependencies, so
the lightweight commands that read reports never import YAML)."""

import re

# Upper bound for est_time, timeout and any measured time, in seconds (one day): a larger number is
# a typo or a corrupt timing report, never a real test file.
MAX_SECONDS = 86_400

# The only spelling of a number the registry and the JUnit reader accept: ASCII decimal digits, an
# optional minus sign and fraction, no leading zero. YAML 1.1 would also read 5_0 (50), 0x10 (16),
# 017 (15, octal), 1:30 (90) and 1e3; Python's float() reads Arabic-Indic digits and underscores.
# Each is a typo or a trick more often than a number, and none is what a reader of the file sees.
_PLAIN_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")
_PLAIN_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_WITH_EXPONENT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


def is_plain_decimal(text: str, *, integer: bool = False, exponent: bool = False) -> bool:
    """True if ``text`` is a plain decimal number (``30``, ``2.5``, ``-1``; an integer only when
    ``integer``): ASCII digits, no leading zero, no underscore, sign ``+`` or base prefix, and no
    exponent unless ``exponent`` (JUnit writers other than pytest may write ``1e-05``)."""
    pattern = _PLAIN_INTEGER if integer else _WITH_EXPONENT if exponent else _PLAIN_DECIMAL
    return pattern.fullmatch(text) is not None


__all__ = ["MAX_SECONDS", "is_plain_decimal"]
