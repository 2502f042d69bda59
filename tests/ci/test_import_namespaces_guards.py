"""The import check on shapes that vLLM's tree showed it misread: folders without ``__init__.py``
inside a regular test package (PEP 420 portions, which Python imports), and optional imports
under ``contextlib.suppress(ImportError)``, ``except Exception`` and a bare ``except:``. Beside
each, the real mistake of the same shape, still reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.imports.check import check_imports
from ci.project import ProjectConfig

from tree_testutil import write

PROJECT = ProjectConfig(first_party=("acme",), source_roots=(".",), test_roots=("tests",))


def found(root: Path, project: ProjectConfig = PROJECT) -> list[str]:
    return [f"{p.path}:{p.line}: {p.code} {p.message}" for p in check_imports(root, project=project)]


NAMESPACE_TREE = {
    "acme/__init__.py": "",
    "tests/__init__.py": "",
    "tests/unit/__init__.py": "",
    # a folder without __init__.py inside the regular package tests.unit
    "tests/unit/attn/utils.py": "def make_meta(): ...\n",
    "tests/unit/attn/test_meta.py": "from utils import make_meta\n",  # pytest's own name for it
    # ... and a regular package inside that namespace folder
    "tests/evals/gsm8k/__init__.py": "",
    "tests/evals/gsm8k/gsm8k_eval.py": "def evaluate(): ...\n",
    # a namespace folder inside a namespace folder
    "tests/evals/deep/er/tool.py": "TOOL = 1\n",
    "tests/compile/__init__.py": "",
    "tests/compile/test_uses.py": """\
        from tests.unit.attn.utils import make_meta
        from tests.unit.attn.utils import gone_helper
        from tests.unit.attn.nothere import thing
        from tests.evals.gsm8k.gsm8k_eval import evaluate, old_evaluate
        from tests.evals.deep.er.tool import TOOL, NOT_TOOL
        from tests.unit import attn
        from tests.evals import gsm8k
        import tests.unit.attn.utils as helpers
        STEP = helpers.make_meta, helpers.missing_meta
        """,
}


def test_a_folder_without_init_inside_a_package_resolves_as_python_imports_it(tmp_path: Path) -> None:
    """vLLM's tests/v1/attention/ (no __init__.py) under tests/ and tests/v1/ (both with one):
    ``from tests.v1.attention.utils import ...`` works in Python and under pytest; names that
    module lacks, and modules that folder lacks, are still reported."""
    write(tmp_path, NAMESPACE_TREE)
    assert found(tmp_path) == [
        "tests/compile/test_uses.py:2: I001 'tests.unit.attn.utils' has no name 'gone_helper'",
        "tests/compile/test_uses.py:3: I002 no first-party module 'tests.unit.attn.nothere'",
        "tests/compile/test_uses.py:4: I001 'tests.evals.gsm8k.gsm8k_eval' has no name 'old_evaluate' "
        "(did you mean 'evaluate'?)",
        "tests/compile/test_uses.py:5: I001 'tests.evals.deep.er.tool' has no name 'NOT_TOOL' (did you mean 'TOOL'?)",
        "tests/compile/test_uses.py:9: I001 'utils' has no name 'missing_meta'",
    ]


def test_the_same_tree_with_the_test_root_at_the_repository_root(tmp_path: Path) -> None:
    """vLLM's layout: test roots ``.``, and ``tests`` itself first-party."""
    write(tmp_path, NAMESPACE_TREE)
    project = ProjectConfig(first_party=("acme", "tests"), source_roots=(".",), test_roots=(".",))
    assert [line.split(": ", 1)[0] for line in found(tmp_path, project)] == [
        "tests/compile/test_uses.py:2", "tests/compile/test_uses.py:3", "tests/compile/test_uses.py:4",
        "tests/compile/test_uses.py:5", "tests/compile/test_uses.py:9"]


def test_a_bare_folder_at_a_basedir_is_not_claimed(tmp_path: Path) -> None:
    """Only under a package: a folder without __init__.py directly in a test basedir does not
    make its name first-party (an installed package of that name wins over a namespace portion),
    so ``import yaml.constructor`` beside a ``tests/yaml/`` folder is not checked against it."""
    write(tmp_path, {
        "acme/__init__.py": "",
        "tests/yaml/data.py": "X = 1\n",
        "tests/test_cfg.py": "import yaml.constructor\nfrom yaml import safe_load\n",
    })
    assert found(tmp_path) == []


def test_a_namespace_folder_outside_any_package_keeps_pytest_names(tmp_path: Path) -> None:
    """Without an enclosing package nothing changes: ``tests/unit`` (no __init__.py) is its own
    basedir and ``attn`` a bare folder in it, not claimed (as above); a module of ``attn``'s own
    is checked under pytest's name for it."""
    write(tmp_path, {
        "acme/__init__.py": "",
        "tests/unit/attn/utils.py": "def make_meta(): ...\n",
        "tests/unit/attn/test_meta.py": "from utils import make_meta, gone\n",
        "tests/unit/test_a.py": "from attn.utils import make_meta, gone\n",
    })
    assert found(tmp_path) == ["tests/unit/attn/test_meta.py:1: I001 'utils' has no name 'gone'"]


GUARDED = """\
    import contextlib
    from contextlib import suppress

    with contextlib.suppress(ImportError):
        import acme._moe_ext
    with suppress(ModuleNotFoundError, OSError):
        from acme.private import hook
    with suppress(Exception):
        from acme.vendored.fast import kernel
    try:
        from acme._version import __version__
    except Exception as exc:
        __version__ = "dev"
    try:
        import acme.optional_accel
    except:  # noqa: E722
        pass
    try:
        import acme.gpu_only
    except BaseException:
        pass
    """


def test_suppress_and_broad_handlers_guard_an_optional_module(tmp_path: Path) -> None:
    """vLLM's platforms/interface.py (``with contextlib.suppress(ImportError): import vllm._moe_C``)
    and version.py (``try: from ._version import ... except Exception``): an optional module may
    be absent, as under ``except ImportError``."""
    write(tmp_path, {"acme/__init__.py": "", "acme/user.py": GUARDED})
    assert found(tmp_path) == []


@pytest.mark.parametrize("guard", [
    "with suppress(ImportError):\n    {imp}\n",
    "with contextlib.suppress(Exception):\n    {imp}\n",
    "try:\n    {imp}\nexcept Exception:\n    pass\n",
    "try:\n    {imp}\nexcept:\n    pass\n",
])
def test_a_name_missing_from_a_module_that_exists_is_reported_under_every_guard(tmp_path: Path, guard: str) -> None:
    """The guard hides an absent module, never a stale name in one that exists: that is the bug."""
    imp = "from acme.core import OldEngine"
    write(tmp_path, {"acme/__init__.py": "", "acme/core.py": "class Engine: ...\n",
                     "acme/user.py": "import contextlib\nfrom contextlib import suppress\n" + guard.format(imp=imp)})
    assert found(tmp_path) == ["acme/user.py:4: I001 'acme.core' has no name 'OldEngine' (did you mean 'Engine'?)"]


def test_what_is_not_a_guard_still_reports_the_missing_module(tmp_path: Path) -> None:
    """``suppress`` of other errors, a broad handler that raises, an ``except ValueError``, and an
    import after the ``with`` block are all required imports."""
    write(tmp_path, {"acme/__init__.py": "", "acme/user.py": """\
        from contextlib import suppress, nullcontext

        with suppress(ValueError, KeyError):
            import acme.gone_a
        try:
            import acme.gone_b
        except Exception as exc:
            raise RuntimeError("build acme first") from exc
        try:
            import acme.gone_c
        except ValueError:
            pass
        with nullcontext(ImportError):
            import acme.gone_d
        with suppress(ImportError):
            pass
        import acme.gone_e
        """})
    assert [line.split(" no first-party module ")[-1] for line in found(tmp_path)] == [
        "'acme.gone_a'", "'acme.gone_b'", "'acme.gone_c'", "'acme.gone_d'", "'acme.gone_e'"]
