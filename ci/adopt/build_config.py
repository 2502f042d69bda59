"""Modules that exist only after a build, read from the build configuration (never run).

The import check must not call them missing, so ``ci init`` writes them to
``project.generated_modules``. Found in every ``pyproject.toml`` and ``setup.py`` at the root, in
a source root, or a few folders below (`MAX_DEPTH`; SGLang keeps its package's in ``python/``):

* setuptools-scm (``[tool.setuptools_scm] version_file`` / ``write_to``) and hatch-vcs
  (``[tool.hatch.build.hooks.vcs] version-file``): a path relative to that ``pyproject.toml``'s
  folder, turned into a dotted name under the source root that holds it;
* setuptools-rust (``[[tool.setuptools-rust.ext-modules]] target``) and maturin
  (``[tool.maturin] module-name``): dotted names as written;
* ``setup.py`` calls ``Extension("pkg._C", ...)`` / ``RustExtension("pkg._core", ...)`` with a
  literal name, positional or ``name=``, and calls of every class the file derives from one
  (``class CMakeExtension(Extension)``; ``CMakeExtension(name="pkg._moe_C")``), read with `ast`;
* setuptools-scm version files that ``setup.py`` names (``get_version(write_to="pkg/_version.py")``,
  ``use_scm_version={"version_file": ...}``), relative to its folder;
* build outputs that ``.gitignore`` lists inside a package (`ci.adopt.gitignore_modules`), as
  dotted globs (``pkg/vendored/*`` -> ``pkg.vendored`` and ``pkg.vendored.*``);
* ``Cargo.toml`` crates that name their Python module in package metadata
  (``[package.metadata.<tool>] python-module`` or maturin's ``name``: SGLang's setup.py builds
  every crate of its ``rust/`` workspace that declares one);
* ``.pyi`` stubs under a source root with no ``.py`` beside them (a compiled module's interface).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path, PurePosixPath

from ci.adopt.gitignore_modules import gitignored_module_paths
from ci.adopt.pytest_config import read_config_text, read_toml, shallow_folders
from ci.project import dotted_glob_problem

MAX_DEPTH = 3
_EXTENSION_CALLS = {"Extension", "RustExtension", "CUDAExtension", "CppExtension", "Pybind11Extension"}
_VERSION_FILE_KEYS = {"write_to", "version_file"}  # setuptools-scm's, as keywords or dict keys


def _files_named(root: Path, names: tuple[str, ...], max_depth: int) -> list[str]:
    """Repo-relative paths of files called one of ``names``, at most ``max_depth`` folders down."""
    return sorted(rel + name for rel, files in shallow_folders(root, max_depth) for name in names if name in files)


def dotted_under(path: str, source_roots: tuple[str, ...]) -> str | None:
    """The dotted module of repo-relative ``path`` (``python/pkg/_version.py`` -> ``pkg._version``)
    under the deepest source root holding it; None if no source root holds it."""
    parts = PurePosixPath(path).with_suffix("").parts
    for source in sorted(source_roots, key=len, reverse=True):
        prefix = () if source in ("", ".") else PurePosixPath(source).parts
        if parts[:len(prefix)] == prefix and len(parts) > len(prefix):
            return ".".join(parts[len(prefix):])
    return None


def _from_pyproject(root: Path, rel: str, source_roots: tuple[str, ...]) -> list[str]:
    try:
        data = read_toml(root / rel)
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    tool = data.get("tool")
    tool = tool if isinstance(tool, dict) else {}
    out: list[str] = []
    scm = tool.get("setuptools_scm") if isinstance(tool.get("setuptools_scm"), dict) else {}
    hatch = tool.get("hatch", {})
    vcs = hatch.get("build", {}).get("hooks", {}).get("vcs", {}) if isinstance(hatch, dict) else {}
    files = (scm.get("version_file"), scm.get("write_to"), vcs.get("version-file") if isinstance(vcs, dict) else None)
    out += _version_modules(rel, [f for f in files if isinstance(f, str)], source_roots)
    rust = tool.get("setuptools-rust", {})
    for ext in (rust.get("ext-modules", []) if isinstance(rust, dict) else []):
        if isinstance(ext, dict) and isinstance(ext.get("target"), str):
            out.append(ext["target"])
    maturin = tool.get("maturin", {})
    if isinstance(maturin, dict) and isinstance(maturin.get("module-name"), str):
        out.append(maturin["module-name"])
    return out


def _from_cargo(root: Path, rel: str) -> list[str]:
    try:
        data = read_toml(root / rel)
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    package = data.get("package")
    metadata = package.get("metadata") if isinstance(package, dict) else None
    out = []
    for tool, table in (metadata.items() if isinstance(metadata, dict) else ()):
        if isinstance(table, dict):
            for key in ("python-module", "python_module", "module-name") + (("name",) if tool == "maturin" else ()):
                if isinstance(table.get(key), str):
                    out.append(table[key])
    return out


def _extension_classes(tree: ast.Module) -> set[str]:
    """`_EXTENSION_CALLS` and every class the file derives from one, however indirectly
    (``class CMakeExtension(Extension)``, ``class CUDAExt(CMakeExtension)``)."""
    known = set(_EXTENSION_CALLS)
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    grew = True
    while grew:
        grew = False
        for cls in classes:
            if cls.name not in known and any(_callee(base) in known for base in cls.bases):
                known.add(cls.name)
                grew = True
    return known


def _callee(expr: ast.expr) -> str:
    """``Extension`` for ``Extension`` and ``setuptools.Extension``; "" for anything else."""
    return expr.attr if isinstance(expr, ast.Attribute) else expr.id if isinstance(expr, ast.Name) else ""


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _from_setup_py(root: Path, rel: str, source_roots: tuple[str, ...]) -> list[str]:
    """Extension modules (``Extension("pkg._C")``, ``CMakeExtension(name="pkg._C")`` of a subclass
    the file defines) and setuptools-scm version files (``get_version(write_to="pkg/_version.py")``,
    ``setup(use_scm_version={"version_file": ...})``, relative to the file's folder)."""
    try:
        tree = ast.parse(read_config_text(root / rel))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    extensions = _extension_classes(tree)
    out: list[str] = []
    version_files: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if _callee(node.func) in extensions:
                name = _literal(node.args[0]) if node.args else next(
                    (_literal(k.value) for k in node.keywords if k.arg == "name"), None)
                if name is not None:
                    out.append(name)
            version_files += [v for k in node.keywords if k.arg in _VERSION_FILE_KEYS
                              for v in [_literal(k.value)] if v is not None]
        elif isinstance(node, ast.Dict):
            version_files += [v for key, value in zip(node.keys, node.values)
                              if _literal(key) in _VERSION_FILE_KEYS for v in [_literal(value)] if v is not None]
    return out + _version_modules(rel, version_files, source_roots)


def _version_modules(config_rel: str, files: list[str], source_roots: tuple[str, ...]) -> list[str]:
    """The dotted modules of version files named relative to ``config_rel``'s folder."""
    folder = PurePosixPath(config_rel).parent
    out = []
    for file in files:
        if file.endswith(".py"):
            path = os.path.normpath(PurePosixPath(folder, file.replace("\\", "/")).as_posix()).replace(os.sep, "/")
            module = dotted_under(path, source_roots)
            if module:
                out.append(module)
    return out


def _stub_only(root: Path, source_roots: tuple[str, ...]) -> list[str]:
    out = []
    for source in source_roots:
        base = root / source
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "__pycache__")) and d != "node_modules"]
            names = set(filenames)
            for name in filenames:
                if name.endswith(".pyi") and name[:-1] not in names and not (name == "__init__.pyi"):
                    rel = Path(dirpath, name).relative_to(root).as_posix()
                    module = dotted_under(rel, source_roots)
                    if module:
                        out.append(module)
    return out


def generated_modules(root: Path, source_roots: tuple[str, ...], first_party: tuple[str, ...] = (),
                      max_depth: int = MAX_DEPTH) -> tuple[str, ...]:
    """Every module the build configuration below ``root`` says a build creates (see the module
    docstring), sorted; only those under ``first_party`` packages when that is given."""
    found: list[str] = []
    for rel in _files_named(root, ("pyproject.toml", "setup.py", "Cargo.toml"), max_depth):
        if rel.endswith("Cargo.toml"):
            found += _from_cargo(root, rel)
        elif rel.endswith(".toml"):
            found += _from_pyproject(root, rel, source_roots)
        else:
            found += _from_setup_py(root, rel, source_roots)
    found += _stub_only(root, source_roots)
    valid = {m for m in found if all(part.isidentifier() for part in m.split("."))}
    for path in gitignored_module_paths(root, max_depth):
        module = dotted_under(path, source_roots)
        parts = module.split(".") if module else []
        # a literal package first, then names or globs of names ('acme.my-dir' names no module)
        if parts and parts[0].isidentifier() and dotted_glob_problem(module) is None and all(
                p.isidentifier() or any(c in p for c in "*?[") for p in parts):
            valid.add(module)
    if first_party:
        valid = {m for m in valid if m.split(".", 1)[0] in first_party}
    return tuple(sorted(valid))


__all__ = ["MAX_DEPTH", "dotted_under", "generated_modules"]
