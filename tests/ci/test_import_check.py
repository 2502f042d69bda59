"""ci/import_check.py on small throw-away trees: what counts as defined, what is reported where."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ci.import_check import check_imports


def write(root: Path, files: dict[str, str]) -> None:
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))


def found(root: Path) -> list[str]:
    return [f"{p.path}:{p.line}:{p.col}: {p.code} {p.message}" for p in check_imports(root)]


def test_module_attributes_every_module_has_are_defined(tmp_path):
    write(tmp_path, {
        "fp4kv/__init__.py": "",
        "fp4kv/mod.py": "X = 1\n",
        "tests/test_a.py": """\
            import os
            import fp4kv
            import fp4kv.mod as m
            HERE = os.path.dirname(fp4kv.__file__), fp4kv.__path__, m.__name__, m.__spec__, m.__doc__
            MISSING = m.__nope__
            """,
    })
    assert [p.split(": ", 1)[1] for p in found(tmp_path)] == [
        "I001 'fp4kv.mod' has no name '__nope__' (did you mean '__spec__'?)"]


TARGET = """\
import os
from typing import TYPE_CHECKING
from .impl import *
from .explicit import *
from . import sub as renamed_sub

def func(): ...
class Klass: ...
CONST = 1
a, (b, *c) = 1, (2, 3)
ann: int = 3
only_annotated: str
total = 0
total += 1
for loop_var in range(2):
    pass
with open(os.devnull) as handle:
    pass
try:
    import json as maybe_json
except ImportError as import_error:
    maybe_json = None
else:
    in_else = 1
finally:
    in_finally = 1
if TYPE_CHECKING:
    from collections import OrderedDict as Ordered
else:
    NotChecking = 1
while False:
    in_while = 1
if (walrus := 5):
    pass

def declares():
    global from_global
    from_global = 1
    local_only = 2

class Holder:
    class_attr = 1
"""


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    write(tmp_path, {
        "fp4kv/__init__.py": "",
        "fp4kv/target/__init__.py": TARGET,
        "fp4kv/target/impl.py": "def from_star(): ...\n_private_star = 1\n",
        "fp4kv/target/explicit.py": "__all__ = ['listed']\nlisted = 1\nunlisted = 2\n",
        "fp4kv/target/sub.py": "x = 1\n",
        "fp4kv/target/nested/__init__.py": "",
    })
    return tmp_path


DEFINED = ["func", "Klass", "CONST", "a", "b", "c", "ann", "only_annotated", "total", "loop_var", "handle",
           "maybe_json", "import_error", "in_else", "in_finally", "Ordered", "NotChecking", "in_while",
           "walrus", "from_global", "os", "TYPE_CHECKING", "renamed_sub", "sub", "nested", "from_star",
           "listed", "Holder", "declares"]


@pytest.mark.parametrize("name", DEFINED)
def test_every_kind_of_top_level_binding_counts(pkg, name):
    write(pkg, {"tests/test_use.py": f"from fp4kv.target import {name}\n"})
    assert found(pkg) == []


@pytest.mark.parametrize("name", ["local_only", "class_attr", "unlisted", "_private_star", "x"])
def test_names_not_bound_at_module_level_are_reported(pkg, name):
    write(pkg, {"tests/test_use.py": f"def f():\n    from fp4kv.target import {name}\n"})
    [problem] = found(pkg)
    assert problem.startswith(f"tests/test_use.py:2:5: I001 'fp4kv.target' has no name '{name}'")


def test_story_fourteen_function_local_sites_then_fixed(tmp_path):
    """The rename broke 14 call sites that import inside functions; lint names each one."""
    quant = "class BlockFP4KVQuantizeUtil:\n    pass\n"
    sites = []
    pool = ["import fp4kv.quant as q", "from typing import TYPE_CHECKING", ""]
    for i in range(11):
        pool += [f"def make_{i}():", "    from fp4kv.quant import KVFP4QuantizeUtil",
                 "    return KVFP4QuantizeUtil()", ""]
        sites.append((len(pool) - 2, 5))
    pool += ["class Pool:", "    def alloc(self):", "        try:",
             "            from ..quant import KVFP4QuantizeUtil"]
    sites.append((len(pool), 13))
    pool += ["        except ImportError:", "            raise", ""]
    pool += ["if TYPE_CHECKING:", "    from fp4kv.quant import KVFP4QuantizeUtil"]
    sites.append((len(pool), 5))
    pool += ["", "def via_module():", "    return q.KVFP4QuantizeUtil()"]
    sites.append((len(pool), 12))
    write(tmp_path, {"fp4kv/__init__.py": "", "fp4kv/quant/__init__.py": quant,
                     "fp4kv/mem_cache/__init__.py": "", "fp4kv/mem_cache/pool.py": "\n".join(pool) + "\n"})

    problems = check_imports(tmp_path)
    assert len(sites) == 14
    assert [(p.path, p.line, p.col, p.code) for p in problems] == [
        ("fp4kv/mem_cache/pool.py", line, col, "I001") for line, col in sites]
    assert {p.message for p in problems} == {
        "'fp4kv.quant' has no name 'KVFP4QuantizeUtil' (did you mean 'BlockFP4KVQuantizeUtil'?)"}

    # The fix that shipped: a PEP 562 deprecated alias in the package.
    write(tmp_path, {"fp4kv/quant/__init__.py": quant + textwrap.dedent("""
        import warnings

        _DEPRECATED_ALIASES = {"KVFP4QuantizeUtil": "BlockFP4KVQuantizeUtil"}

        def __getattr__(name):
            if name in _DEPRECATED_ALIASES:
                warnings.warn(f"{name} is deprecated", DeprecationWarning, stacklevel=2)
                return globals()[_DEPRECATED_ALIASES[name]]
            raise AttributeError(name)
    """)})
    assert check_imports(tmp_path) == []


def test_getattr_string_comparisons_define_names(tmp_path):
    write(tmp_path, {
        "fp4kv/__init__.py": """
            def __getattr__(name):
                if name == "Lazy" or name in ("Other",):
                    return 1
                raise AttributeError(name)
        """,
        "tests/test_use.py": "from fp4kv import Lazy, Other, Missing\n",
    })
    assert found(tmp_path) == ["tests/test_use.py:1:1: I001 'fp4kv' has no name 'Missing'"]


def test_opaque_getattr_and_third_party_star_accept_anything(tmp_path):
    write(tmp_path, {
        "fp4kv/__init__.py": "",
        "fp4kv/dyn.py": "import importlib\n\ndef __getattr__(name):\n    return importlib.import_module(name)\n",
        "fp4kv/star.py": "from os.path import *\n",
        "tests/test_use.py": "from fp4kv.dyn import anything\nfrom fp4kv.star import whatever\n",
    })
    assert found(tmp_path) == []


def test_relative_imports_resolve_against_the_package(tmp_path):
    write(tmp_path, {
        "fp4kv/__init__.py": "TOP = 1\n",
        "fp4kv/a/__init__.py": "from .b import good\nfrom .b import bad\n",
        "fp4kv/a/b.py": "from .. import TOP, NOPE\nfrom ..a import c\ngood = 1\n",
        "fp4kv/a/c.py": "from . import b, missing_child\nfrom ...beyond import x\n",
    })
    assert found(tmp_path) == [
        "fp4kv/a/__init__.py:2:1: I001 'fp4kv.a.b' has no name 'bad'",
        "fp4kv/a/b.py:1:1: I001 'fp4kv' has no name 'NOPE'",
        "fp4kv/a/c.py:1:1: I001 'fp4kv.a' has no name 'missing_child'",
        "fp4kv/a/c.py:2:1: I002 relative import beyond the top-level package",
    ]


def test_missing_modules_and_attribute_chains(tmp_path):
    write(tmp_path, {
        "fp4kv/__init__.py": "",
        "fp4kv/quant/__init__.py": "class Util: ...\n",
        "tools/__init__.py": "",
        "tools/use.py": """
            import fp4kv.quant
            import fp4kv.gone
            from fp4kv.also_gone import thing
            from fp4kv import quant as qmod
            import numpy, json.decoder

            def f():
                fp4kv.quant.Util()
                fp4kv.quant.Utill()
                qmod.Missing
                qmod.attr_set_here = 1
                numpy.anything
        """,
    })
    assert found(tmp_path) == [
        "tools/use.py:3:1: I002 no first-party module 'fp4kv.gone'",
        "tools/use.py:4:1: I002 no first-party module 'fp4kv.also_gone'",
        "tools/use.py:10:5: I001 'fp4kv.quant' has no name 'Utill' (did you mean 'Util'?)",
        "tools/use.py:11:5: I001 'fp4kv.quant' has no name 'Missing'",
    ]


def test_an_alias_the_file_rebinds_is_not_trusted(tmp_path):
    write(tmp_path, {
        "fp4kv/__init__.py": "",
        "fp4kv/quant.py": "x = 1\n",
        "tests/test_use.py": """
            import fp4kv.quant as q

            def f(q):
                return q.not_the_module
        """,
    })
    assert found(tmp_path) == []


def test_syntax_errors_are_reported_not_raised(tmp_path):
    write(tmp_path, {"fp4kv/__init__.py": "", "fp4kv/broken.py": "def f(:\n",
                     "tests/test_use.py": "from fp4kv.broken import f\n"})
    [problem] = check_imports(tmp_path)
    assert (problem.path, problem.line, problem.code) == ("fp4kv/broken.py", 1, "I003")


def test_mutual_star_imports_terminate(tmp_path):
    write(tmp_path, {"fp4kv/__init__.py": "", "fp4kv/a.py": "from fp4kv.b import *\nA = 1\n",
                     "fp4kv/b.py": "from fp4kv.a import *\nB = 1\n",
                     "tests/test_use.py": "from fp4kv.a import A, B\nfrom fp4kv.b import A, B, C\n"})
    assert found(tmp_path) == ["tests/test_use.py:2:1: I001 'fp4kv.b' has no name 'C'"]


def test_expected_failures_and_noqa_are_not_reported(tmp_path):
    write(tmp_path, {
        "fp4kv/__init__.py": "",
        "fp4kv/quant.py": "x = 1\n",
        "tests/test_use.py": """
            import pytest
            import fp4kv.quant

            def test_missing_attribute_raises():
                with pytest.raises(AttributeError, match="Nope"):
                    fp4kv.quant.Nope
                with pytest.raises((ValueError, ImportError)):
                    from fp4kv.quant import AlsoNope
                with pytest.raises(ValueError):
                    fp4kv.quant.Reported
                fp4kv.quant.Silenced  # noqa: I001
                fp4kv.quant.Bare  # noqa
                fp4kv.quant.OtherCode  # noqa: B018
        """,
    })
    assert found(tmp_path) == [
        "tests/test_use.py:11:9: I001 'fp4kv.quant' has no name 'Reported'",
        "tests/test_use.py:14:5: I001 'fp4kv.quant' has no name 'OtherCode'",
    ]
