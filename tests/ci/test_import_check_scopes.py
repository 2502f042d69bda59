"""The import check on the shapes of real code that it used to misread (SGLang's tree): each
false report has a test, and beside it the real mistake of the same shape, still reported."""

from __future__ import annotations

from pathlib import Path

from ci.imports.check import check_imports

from tree_testutil import write


def found(root: Path) -> list[str]:
    return [f"{p.path}:{p.line}: {p.code} {p.message}" for p in check_imports(root)]


def test_one_alias_bound_to_different_modules_in_different_functions(tmp_path: Path) -> None:
    """SGLang's k3_ar_fusion.py: ``from ...kimi_k3 import all_reduce as mod`` in some functions,
    ``... import gemm_ag as mod`` in others; each use is checked against its own function's binding."""
    write(tmp_path, {
        "fp4kv/__init__.py": "",
        "fp4kv/ops/__init__.py": "",
        "fp4kv/ops/all_reduce.py": "MAX_TOKENS = 8\ndef push(): ...\n",
        "fp4kv/ops/gemm_ag.py": "def up_proj(): ...\n",
        "fp4kv/fusion.py": """\
            def reduce():
                from fp4kv.ops import all_reduce as mod
                return mod.push(), mod.MAX_TOKENS

            def gemm():
                from fp4kv.ops import gemm_ag as mod
                return mod.up_proj(), mod.MAX_TOKENS

            def outer():
                from fp4kv.ops import gemm_ag as mod

                def nested():
                    return mod.up_proj(), mod.push
                return nested
            """,
    })
    assert found(tmp_path) == [
        "fp4kv/fusion.py:7: I001 'fp4kv.ops.gemm_ag' has no name 'MAX_TOKENS'",
        "fp4kv/fusion.py:13: I001 'fp4kv.ops.gemm_ag' has no name 'push'",
    ]


def test_module_and_function_bindings_and_class_bodies(tmp_path: Path) -> None:
    write(tmp_path, {
        "fp4kv/__init__.py": "",
        "fp4kv/a.py": "ONLY_A = 1\n",
        "fp4kv/b.py": "ONLY_B = 1\n",
        "fp4kv/use.py": """\
            import fp4kv.a as m

            def local():
                import fp4kv.b as m
                return m.ONLY_B

            def module_level():
                return m.ONLY_A, m.ONLY_B

            class Holder:
                import fp4kv.b as m
                VALUE = m.ONLY_B

                def method(self):
                    return m.ONLY_A
            """,
    })
    assert found(tmp_path) == ["fp4kv/use.py:8: I001 'fp4kv.a' has no name 'ONLY_B' (did you mean 'ONLY_A'?)"]


def test_one_scope_binding_an_alias_to_two_modules_is_not_guessed(tmp_path: Path) -> None:
    write(tmp_path, {
        "fp4kv/__init__.py": "",
        "fp4kv/fast.py": "def run(): ...\n",
        "fp4kv/slow.py": "def run(): ...\ndef fallback(): ...\n",
        "fp4kv/pick.py": """\
            try:
                import fp4kv.fast as impl
            except ImportError:
                import fp4kv.slow as impl
            RESULT = impl.fallback
            """,
    })
    assert found(tmp_path) == []


def test_a_package_attribute_that_is_an_object_shadows_its_submodule(tmp_path: Path) -> None:
    """SGLang's sglang/kernels: ``from sglang.kernels.registry import registry`` in the package's
    __init__ makes ``sglang.kernels.registry`` the registry object, not the submodule."""
    write(tmp_path, {
        "fp4kv/__init__.py": "",
        "fp4kv/kernels/__init__.py": "from fp4kv.kernels.registry import KernelRegistry, registry\n",
        "fp4kv/kernels/registry.py": "class KernelRegistry:\n    def get(self, name): ...\n\nregistry = KernelRegistry()\n",
        "fp4kv/plain/__init__.py": "from . import sub\n",
        "fp4kv/plain/sub.py": "X = 1\n",
        "fp4kv/bare/__init__.py": "",
        "fp4kv/bare/sub.py": "X = 1\n",
        "tests/test_k.py": """\
            import fp4kv.kernels as K
            from fp4kv.kernels import registry
            import fp4kv.plain
            import fp4kv.bare.sub

            def test_k():
                assert K.registry.get("x") is None and registry.get("y") is None
                assert K.registry.all_specs and K.KernelRegistry.get
                assert fp4kv.plain.sub.X and fp4kv.plain.sub.Y
                assert fp4kv.bare.sub.X and fp4kv.bare.sub.Z
            """,
    })
    assert found(tmp_path) == [
        "tests/test_k.py:9: I001 'fp4kv.plain.sub' has no name 'Y'",
        "tests/test_k.py:10: I001 'fp4kv.bare.sub' has no name 'Z'",
    ]


def test_unittest_assert_raises_blocks_expect_the_failure(tmp_path: Path) -> None:
    write(tmp_path, {
        "fp4kv/__init__.py": "",
        "fp4kv/platforms.py": "def current(): ...\n",
        "tests/test_p.py": """\
            import unittest
            import fp4kv.platforms as plat

            class TestPlatforms(unittest.TestCase):
                def test_missing_attribute(self):
                    with self.assertRaises(AttributeError):
                        _ = plat.nonexistent_attribute
                    with self.assertRaisesRegex(ImportError, "gone"):
                        from fp4kv.platforms import gone
                    with self.assertRaises(ValueError):
                        _ = plat.not_what_this_block_expects
            """,
    })
    assert found(tmp_path) == ["tests/test_p.py:11: I001 'fp4kv.platforms' has no name 'not_what_this_block_expects'"]


def test_an_optional_module_guarded_by_except_import_error_may_be_absent(tmp_path: Path) -> None:
    """SGLang's request_metrics_exporter.py tries a private fork's module and goes on without it:
    intended, not reported. A name missing from a module that exists is a stale import even
    there (SGLang's manual mooncake test imports a moved helper inside such a try, and the
    fallback hid it); a handler that raises means the import is required; and a guarded alias's
    attribute uses are still checked."""
    write(tmp_path, {
        "fp4kv/__init__.py": "",
        "fp4kv/fast.py": "def run(): ...\n",
        "fp4kv/exporter.py": """\
            try:
                from fp4kv.private.factory import create
                import fp4kv.vendor_only
            except ImportError:
                create = None
            try:
                from fp4kv.fast import walk
            except (ModuleNotFoundError, ImportError):
                walk = None
            try:
                from fp4kv.gone import thing
            except ImportError as exc:
                raise RuntimeError("install fp4kv[gone]") from exc
            try:
                from fp4kv.absent import other
            except ValueError:
                pass
            """,
        "fp4kv/user.py": """\
            try:
                import fp4kv.fast as accel
            except ImportError:
                pass
            STEP = accel.missing_step
            """,
    })
    assert found(tmp_path) == [
        "fp4kv/exporter.py:7: I001 'fp4kv.fast' has no name 'walk'",
        "fp4kv/exporter.py:11: I002 no first-party module 'fp4kv.gone'",
        "fp4kv/exporter.py:15: I002 no first-party module 'fp4kv.absent'",
        "fp4kv/user.py:5: I001 'fp4kv.fast' has no name 'missing_step'",
    ]
