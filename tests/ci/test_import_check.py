"""ci/imports/check.py on small throw-away trees: what counts as defined, what is reported where."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ci.imports.check import check_imports
from ci.project import ProjectConfig

from tree_testutil import write


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
    only_in_except = None
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
           "maybe_json", "import_error", "only_in_except", "in_else", "in_finally", "Ordered", "NotChecking", "in_while",
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
                fp4kv.quant.Listed  # noqa: B018,E501
                fp4kv.quant.InList  # noqa: B018, i001
                fp4kv.quant.Second  # type: ignore  # noqa  # noqa: I001
        """,
    })
    assert found(tmp_path) == [
        "tests/test_use.py:11:9: I001 'fp4kv.quant' has no name 'Reported'",
        "tests/test_use.py:13:5: I001 'fp4kv.quant' has no name 'Bare'",  # a bare noqa is flake8's, not ours
        "tests/test_use.py:14:5: I001 'fp4kv.quant' has no name 'OtherCode'",
        "tests/test_use.py:15:5: I001 'fp4kv.quant' has no name 'Listed'",
    ]


# -- stale imports hide in every block of a try statement (issue 13) -------------------------------

@pytest.mark.parametrize("block", ["except", "else", "finally", "for-else", "while-else", "nested-except"])
def test_stale_import_in_every_try_and_loop_block_is_reported(tmp_path, block):
    """``except ImportError: from old import Name`` fallbacks are exactly where stale names hide."""
    stale = "from fp4kv.quant import KVFP4QuantizeUtil"
    bodies = {
        "except": f"try:\n    import json\nexcept ImportError:\n    {stale}\n",
        "else": f"try:\n    import json\nexcept ImportError:\n    pass\nelse:\n    {stale}\n",
        "finally": f"try:\n    import json\nfinally:\n    {stale}\n",
        "for-else": f"for _ in ():\n    pass\nelse:\n    {stale}\n",
        "while-else": f"while False:\n    pass\nelse:\n    {stale}\n",
        "nested-except": (f"def outer():\n    def inner():\n        try:\n            pass\n"
                          f"        except (ImportError, OSError) as exc:\n            {stale}\n    return inner\n"),
    }
    write(tmp_path, {"fp4kv/__init__.py": "", "fp4kv/quant/__init__.py": "class BlockFP4KVQuantizeUtil: ...\n",
                     "fp4kv/user.py": bodies[block]})
    [problem] = check_imports(tmp_path)
    assert (problem.path, problem.code) == ("fp4kv/user.py", "I001")
    assert problem.line == bodies[block].splitlines().index(next(
        line for line in bodies[block].splitlines() if stale in line)) + 1


# -- layout from ProjectConfig (issue 12) ---------------------------------------------------------

ACME = {
    "src/acme/__init__.py": "from acme.core import Engine\n",
    "src/acme/core.py": "class Engine:\n    pass\n",
    "src/beta/__init__.py": "",
    "src/beta/util.py": "def helper():\n    return 1\n",
    "src/single.py": "VALUE = 1\n",
    "src/not_a_package/loose.py": "X = 1\n",
    "test/registered/helpers.py": "def make():\n    return 1\n",
    "test/registered/engine_test.py": """\
        from acme import Engine, _version
        from acme._version import version
        import acme._version
        from beta.util import helper
        from single import VALUE
        from helpers import make

        def test_engine():
            def nested():
                from acme.core import OldEngine
                return OldEngine
            return nested
        """,
    "test/registered/deeper/util_test.py": "from helpers import make, gone\nimport beta.missing\n",
    "test/registered/conftest.py": "",
}


def acme_project(**overrides) -> ProjectConfig:
    settings = dict(source_roots=("src",), test_roots=("test/registered",), test_patterns=("*_test.py",),
                    generated_modules=("acme._version",))
    settings.update(overrides)
    return ProjectConfig(**settings)


@pytest.mark.parametrize("first_party", [(), ("acme", "beta", "single")])
def test_src_layout_two_packages_tests_elsewhere_and_a_generated_module(tmp_path, first_party):
    write(tmp_path, ACME)
    problems = check_imports(tmp_path, project=acme_project(first_party=first_party))
    assert [str(p) for p in problems] == [
        "test/registered/deeper/util_test.py:1:1: I001 'helpers' has no name 'gone'",
        "test/registered/deeper/util_test.py:2:1: I002 no first-party module 'beta.missing'",
        "test/registered/engine_test.py:10:9: I001 'acme.core' has no name 'OldEngine' "
        "(did you mean 'Engine'?)",
    ]


def test_a_generated_module_is_missing_without_the_setting(tmp_path):
    write(tmp_path, ACME)
    codes = {(p.line, p.code) for p in check_imports(tmp_path, project=acme_project(generated_modules=()))
             if p.path == "test/registered/engine_test.py"}
    assert codes == {(1, "I001"), (2, "I002"), (3, "I002"), (10, "I001")}


def test_a_package_list_still_works_and_only_one_layout_may_be_given(tmp_path):
    write(tmp_path, {"fp4kv/__init__.py": "", "other/__init__.py": "", "other/x.py": "from fp4kv import nope\n",
                     "tests/test_a.py": "from other import gone\n"})
    assert [p.path for p in check_imports(tmp_path, ("fp4kv", "other"))] == ["other/x.py", "tests/test_a.py"]
    assert [p.path for p in check_imports(tmp_path, ("fp4kv",))] == []  # `other` is not first-party then
    with pytest.raises(TypeError, match="not both"):
        check_imports(tmp_path, ("fp4kv",), project=ProjectConfig())


def test_helpers_resolve_the_way_pytest_prepend_mode_imports_them(tmp_path):
    """A test's own folder is on sys.path (its basedir), and so are the folders of the conftests
    above it; inside a package the basedir is the first folder up without __init__.py."""
    write(tmp_path, {
        "tests/conftest.py": "",
        "tests/shared.py": "def shared(): ...\n",
        "tests/unit/__init__.py": "",
        "tests/unit/support.py": "def support(): ...\n",
        "tests/unit/test_pkg.py": "from unit.support import support, nope\nfrom .support import support\n",
        "tests/area/test_a.py": "from shared import shared, absent\nimport json\n",
    })
    assert found(tmp_path) == [
        "tests/area/test_a.py:1:1: I001 'shared' has no name 'absent'",
        "tests/unit/test_pkg.py:1:1: I001 'unit.support' has no name 'nope'",
    ]


def test_a_dangling_symlinked_test_file_is_no_traceback(tmp_path):
    write(tmp_path, {"fp4kv/__init__.py": "", "tests/test_real.py": "from fp4kv import gone\n"})
    (tmp_path / "tests" / "sub").mkdir()
    (tmp_path / "tests" / "sub" / "test_x.py").symlink_to(tmp_path / "nowhere" / "test_x.py")
    (tmp_path / "fp4kv" / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    assert found(tmp_path) == ["tests/test_real.py:1:1: I001 'fp4kv' has no name 'gone'"]


def test_unparseable_bytes_are_reported_not_raised(tmp_path):
    write(tmp_path, {"fp4kv/__init__.py": ""})
    (tmp_path / "fp4kv" / "nul.py").write_bytes(b"import os\x00\nfrom fp4kv import x\n")
    (tmp_path / "fp4kv" / "latin.py").write_bytes(b"from fp4kv import y\nNAME = 'caf\xe9'\n")
    # UTF-16 hides its imports from the byte-level prefilter, so it is never parsed: no report,
    # and above all no traceback (Python cannot import such a file either).
    (tmp_path / "fp4kv" / "utf16.py").write_bytes("from fp4kv import z\n".encode("utf-16"))
    assert sorted((p.path, p.code) for p in check_imports(tmp_path)) == [
        ("fp4kv/latin.py", "I003"), ("fp4kv/nul.py", "I003")]
