"""Bounds shared by the registry, the JUnit reader, the durations writer and the commands' numeric
flags (no dependencies, so the lightweight commands that read reports never import YAML)."""

import argparse
import re
from typing import Callable

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


# The largest value of a PostgreSQL INTEGER column (the history's pull request numbers and attempts).
MAX_INT4 = 2**31 - 1
_ASCII_DIGITS = re.compile(r"[0-9]{1,20}")


def parse_whole(text: str, what: str, low: int, high: int) -> int:
    """``text`` as a whole number from ``low`` to ``high``, written in ASCII digits only; else
    ValueError naming ``what`` (a flag or an environment variable). ``int()`` would also take
    ``٣`` (Arabic-Indic 3), ``1_000``, `` 7 `` and ``+7``, and ``str.isdigit`` accepts ``²``, which
    ``int()`` then refuses."""
    if _ASCII_DIGITS.fullmatch(text) is None or not low <= int(text) <= high:
        shown = repr(text) if len(text) <= 40 else repr(text[:37]) + "..."
        raise ValueError(f"{what} must be a whole number from {low} to {high} in ASCII digits, got {shown}")
    return int(text)


def whole_number(low: int, high: int = MAX_INT4) -> Callable[[str], int]:
    """An argparse ``type``: `parse_whole` from ``low`` to ``high`` (argparse then says
    ``argument --flag: must be a whole number ...`` and exits 2)."""
    def parse(text: str) -> int:
        try:
            return parse_whole(text, "", low, high)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).strip()) from None
    return parse


__all__ = ["MAX_INT4", "MAX_SECONDS", "is_plain_decimal", "parse_whole", "whole_number"]
