"""`ci.registry.model.plain_tag` settles a plain scalar's YAML tag without PyYAML where it can,
and always gives PyYAML's resolver's answer (the oracle: `yaml.resolver.Resolver`, which SafeLoader
and CSafeLoader use): compared on every short string over the characters the resolver cares
about, on YAML 1.1's typed words and numbers, and on every token of the registries here. A
registry in the fast path's subset loads without importing PyYAML at all (a fresh interpreter).
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import yaml

from ci.registry import model

ROOT = Path(__file__).resolve().parents[2]
PLAIN_TAG = model.plain_tag.__wrapped__  # uncached: every call takes the path its input takes

# The characters PyYAML's resolver keys on, the characters its patterns match after them, and a few
# it never names.
ALPHABET = "yYnNtTfFoOeEsSuUlLrRaA0179._-+:<=~iIxXbB/ c"
EDGES = ["", "~", "<<", "=", ".", "-", "+", "..", "./x", ".ci/", "-k", "--deselect", "+x", "-.5", "+.5", ".5", "._",
         ".inf", ".Inf", ".INF", "-.inf", "+.INF", ".nan", ".NaN", ".NAN", ".iNf", ".infinity", "0", "00", "07", "08",
         "09", "012", "0o7", "0x1f", "0X1F", "0b101", "1_000", "1e5", "1E+5", "1.5e+3", "1.", "1.0", "0.5", "00.5",
         "10.25", "123456789012345678901234", "1:30", "190:20:30", "2024-01-01", "2001-12-14t21:59:43.10-05:00",
         "y", "Y", "n", "N", "yes", "Yes", "YES", "yEs", "no", "No", "NO", "nO", "true", "True", "TRUE", "tRUE",
         "false", "False", "FALSE", "on", "On", "ON", "oN", "off", "Off", "OFF", "oFF", "null", "Null", "NULL",
         "nULL", "none", "None", "yes!", "true1", "offline", "ontology", "nullable", "tests", "cpu", "x86-64 Linux",
         "@team", "é", "１２", "٣", "²"]


def _pyyaml(value: str) -> str:
    return yaml.resolver.Resolver().resolve(yaml.ScalarNode, value, (True, False))


def test_the_typed_first_characters_are_pyyamls() -> None:
    keys = set(yaml.resolver.Resolver.yaml_implicit_resolvers)
    assert None not in keys  # no resolver for every first character
    assert keys - {""} == set(model._TYPED_FIRST)


def test_the_typed_words_are_pyyamls() -> None:
    # every resolver of a letter is one anchored alternation of words; those words, and no others
    words: dict[str, str] = {}
    for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items():
        if first and first.isalpha():
            for tag, pattern in resolvers:
                body = re.sub(r"\s", "", pattern.pattern)
                assert body.startswith("^(?:") and body.endswith(")$"), body
                for word in body[4:-2].split("|"):
                    if word[:1].isalpha():
                        assert words.setdefault(word, tag) == tag
    assert words == model._WORDS


def test_plain_tag_is_pyyamls_on_every_short_string() -> None:
    checked = 0
    for size in range(4):
        for chars in itertools.product(ALPHABET, repeat=size):
            value = "".join(chars)
            assert PLAIN_TAG(value) == _pyyaml(value), value
            checked += 1
    assert checked == sum(len(ALPHABET) ** n for n in range(4))


def test_plain_tag_is_pyyamls_on_edge_cases_and_their_signed_forms() -> None:
    for value in EDGES + [sign + v for v in EDGES for sign in "-+"]:
        assert PLAIN_TAG(value) == _pyyaml(value), value
    assert PLAIN_TAG("30") == model.INT_TAG and PLAIN_TAG("2.5") == model.FLOAT_TAG
    assert PLAIN_TAG("cpu") == PLAIN_TAG(".") == PLAIN_TAG("tests") == model.STR_TAG


def test_plain_tag_is_pyyamls_on_every_token_of_the_registries_here() -> None:
    tokens: set[str] = set()
    for path in [ROOT / "registry.yaml", *sorted((ROOT / "tests").rglob("*.yaml"))]:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            tokens.update(t.strip("[],'\"") for t in re.split(r"[\s:]+", line))
    assert len(tokens) > 200
    for value in tokens:
        assert PLAIN_TAG(value) == _pyyaml(value), value


def _imports_yaml(text: str) -> tuple[bool, int]:
    code = ("import sys; from ci.registry import parse_registry; r, p = parse_registry(sys.stdin.read()); "
            "assert r is not None, p; print('yaml' in sys.modules, len(r.tests))")
    out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout.split()
    return out[0] == "True", int(out[1])


def test_a_registry_in_the_fast_subset_loads_without_pyyaml_and_another_with_it() -> None:
    registry = (ROOT / "registry.yaml").read_text(encoding="utf-8")
    count = registry.count("\n    tiers: ")
    assert count > 100
    assert _imports_yaml(registry) == (False, count)
    # a document marker is outside the fast path's subset: the precise parser (and PyYAML) reads it
    assert _imports_yaml("---\n" + registry) == (True, count)
