"""The public names of the mx_block16 class, from `fp4kv` and from `fp4kv.quant`.

`BlockFP4KVQuantizeUtil` and `FP4MXBlock16KVQuantizeUtil` (SGLang's current spelling, which its
own tests import) are one class and import silently; `KVFP4QuantizeUtil` (the name before the
rename) is the same class with a once-per-process DeprecationWarning. The repository's import
check (`ci.imports.check`) must accept all three and still report a name that does not exist.
"""

from __future__ import annotations

import shutil
import textwrap
import warnings
from pathlib import Path

import pytest

import fp4kv
import fp4kv.quant
from ci.imports.check import MISSING_NAME, check_imports

CURRENT = ("BlockFP4KVQuantizeUtil", "FP4MXBlock16KVQuantizeUtil")
DEPRECATED = "KVFP4QuantizeUtil"
MODULES = ("fp4kv", "fp4kv.quant")


def import_names(module: str, names: tuple[str, ...]) -> tuple[dict[str, object], list[warnings.WarningMessage]]:
    """Run ``from <module> import <names>`` as real import statements; return the names and warnings."""
    fp4kv.quant._warned.clear()  # the once-per-process state, reset so each call sees a first use
    namespace: dict[str, object] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(f"from {module} import {', '.join(names)}", namespace)
    return {n: namespace[n] for n in names}, list(caught)


@pytest.mark.parametrize("module", MODULES)
def test_current_names_import_without_any_warning_and_are_one_class(module):
    got, caught = import_names(module, CURRENT)
    assert caught == []
    assert got["BlockFP4KVQuantizeUtil"] is got["FP4MXBlock16KVQuantizeUtil"]
    assert got["BlockFP4KVQuantizeUtil"] is fp4kv.quant.mx_block16.BlockFP4KVQuantizeUtil


def test_all_three_names_from_both_modules_are_the_same_class():
    classes = []
    for module in MODULES:
        got, _ = import_names(module, (*CURRENT, DEPRECATED))
        classes += got.values()
    assert len(classes) == 6 and all(c is classes[0] for c in classes)
    assert callable(classes[0].batched_quantize) and callable(classes[0].batched_dequantize)


@pytest.mark.parametrize("module", MODULES)
def test_old_name_warns_once_per_process_naming_the_current_name(module):
    _, caught = import_names(module, (DEPRECATED,))
    (warning,) = caught
    assert issubclass(warning.category, DeprecationWarning)
    assert "BlockFP4KVQuantizeUtil" in str(warning.message) and DEPRECATED in str(warning.message)
    with warnings.catch_warnings(record=True) as again:  # same process, state not reset: silent
        warnings.simplefilter("always")
        exec(f"from {module} import {DEPRECATED}", {})
        getattr(fp4kv.quant, DEPRECATED)
    assert again == []


@pytest.mark.parametrize("module", MODULES)
def test_deprecation_warning_points_at_the_importing_line(module):
    _, caught = import_names(module, (DEPRECATED,))
    (warning,) = caught
    assert (warning.filename, warning.lineno) == ("<string>", 1)


@pytest.mark.parametrize("module", MODULES)
def test_star_import_brings_the_current_names_and_no_warning(module):
    fp4kv.quant._warned.clear()
    namespace: dict[str, object] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(f"from {module} import *", namespace)
    assert caught == []
    assert set(CURRENT) <= namespace.keys() and DEPRECATED not in namespace


def test_unknown_attribute_still_raises_attribute_error():
    with pytest.raises(AttributeError, match="NoSuchUtil"):
        fp4kv.quant.NoSuchUtil  # noqa: B018
    with pytest.raises(AttributeError, match="NoSuchUtil"):
        fp4kv.NoSuchUtil  # noqa: B018


# ---------------------------------------------------------------------------------------------
# the repository's import check on this package's real source
# ---------------------------------------------------------------------------------------------

MADE_UP = "FP4MXBlock32KVQuantizeUtil"

CALL_SITES = f"""\
import fp4kv.quant
from fp4kv import BlockFP4KVQuantizeUtil, FP4MXBlock16KVQuantizeUtil, {DEPRECATED}


def mx_sites():
    from fp4kv.quant import BlockFP4KVQuantizeUtil, FP4MXBlock16KVQuantizeUtil
    from fp4kv.quant import {DEPRECATED}
    return fp4kv.quant.FP4MXBlock16KVQuantizeUtil, fp4kv.quant.{DEPRECATED}


def stale_site():
    from fp4kv.quant import {MADE_UP}
    return {MADE_UP}
"""


def test_import_check_accepts_all_three_names_and_reports_a_made_up_one(tmp_path):
    # A copy of the real package (not a stand-in), beside a module that imports every spelling.
    real = Path(fp4kv.__file__).parent
    shutil.copytree(real, tmp_path / "fp4kv", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "callers").mkdir()
    (tmp_path / "callers" / "__init__.py").write_text("")
    (tmp_path / "callers" / "sites.py").write_text(textwrap.dedent(CALL_SITES))
    problems = check_imports(tmp_path, ("fp4kv", "callers"))
    stale_line = CALL_SITES.splitlines().index(f"    from fp4kv.quant import {MADE_UP}") + 1
    assert [(p.path, p.line, p.code) for p in problems] == [("callers/sites.py", stale_line, MISSING_NAME)]
    assert MADE_UP in problems[0].message and "fp4kv.quant" in problems[0].message
