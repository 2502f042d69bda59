"""A tree shaped like SGLang's, for the adoption tests: a python/ source root with setuptools-scm and
a Rust extension, tests under test/ run from test/pytest.ini, and files elsewhere that no pytest
configuration runs. Tests add what they need on top (`write`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

PASSING = "def test_ok():\n    assert True\n"

SGLANG_LIKE = {
    # the package, under a python/ source root; srt/ is a namespace package (no __init__.py)
    "python/pyproject.toml": """\
        [build-system]
        requires = ["setuptools>=61.0", "setuptools-scm>=8.0", "setuptools-rust>=1.10"]
        [project]
        name = "sglang"
        dynamic = ["version"]
        [tool.setuptools_scm]
        root = ".."
        version_file = "sglang/_version.py"
        [[tool.setuptools-rust.ext-modules]]
        target = "sglang.srt.grpc._core"
        path = "../rust/grpc/Cargo.toml"
        """,
    "python/sglang/__init__.py": "from sglang.version import __version__\n",
    "python/sglang/version.py": "try:\n    from sglang._version import __version__\nexcept ImportError:\n    __version__ = '0'\n",
    "python/sglang/srt/utils/__init__.py": "def helper():\n    return 1\n",
    "python/sglang/srt/grpc/__init__.py": "def client():\n    from sglang.srt.grpc._core import Channel\n    return Channel\n",
    "python/sglang/srt/fast/__init__.py": "from sglang.srt.fast._kernels import add\n",
    "python/sglang/srt/fast/_kernels.pyi": "def add(a: int, b: int) -> int: ...\n",
    # a helper module named like a test, inside the package: library code, not a test
    "python/sglang/test/__init__.py": "",
    "python/sglang/test/test_utils.py": "DEFAULT_MODEL = 'm'\n",
    # the tests pytest runs, from test/ (its rootdir: test/pytest.ini)
    "test/pytest.ini": "[pytest]\nasyncio_mode = auto\n",
    "test/registered/core/test_alpha.py": "from sglang.srt.utils import helper\n\n\ndef test_alpha():\n    assert helper() == 1\n",
    "test/manual/test_beta.py": PASSING,
    # elsewhere, tests no pytest configuration of this repository runs
    "sgl-kernel/tests/test_kernel.py": PASSING,
    "scripts/release/test_utils.py": "def bump():\n    return 2\n",
    # a Rust-built router whose bindings name their extension module (not first-party here)
    "router/bindings/python/pyproject.toml": "[tool.maturin]\nmodule-name = \"router.router_rs\"\n",
}


def write(root: Path, files: dict[str, str]) -> None:
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))
