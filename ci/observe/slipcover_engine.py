"""slipcover's probe engine, imported without the rest of its package.

Every Python process that a recorded test starts imports the recorder while ``site`` starts it
(`ci.observe.child`), so what the recorder imports is paid once per subprocess. ``import
slipcover`` runs the package's ``__init__``, which imports its XML and LCOV reporters
(``xml.dom.minidom``), its import hook (``importlib.abc``, which on Python 3.11 brings
``importlib.resources``, ``tempfile``, ``shutil`` and the compression modules) and its fuzzing
helper. The recorder needs the ``Slipcover`` class and its C probe only (its own import hook is
`ci.observe.probe_imports`). Measured 2026-12-05 on the 2-core CI VM, CPU time of 40
``python -c`` children each: a plain start 21 ms; importing ``slipcover.importer`` +24 ms;
``slipcover.slipcover`` alone with its reporters deferred +12 ms.

Contract:

- `engine` returns the module ``slipcover.slipcover``. If the package was not imported yet, it
  is put in ``sys.modules`` without running its ``__init__``, and ``slipcover.slipcover`` is
  imported with ``XmlReporter`` and ``LcovReporter`` bound to stand-ins that import the real
  class when called (only slipcover's ``print_xml`` and ``print_lcov`` call them). The first
  attribute a program then asks of the package that is neither there nor one of its submodules
  runs the real ``__init__`` (a module ``__getattr__``), so a program that imports slipcover
  itself gets the whole package. A package imported already is used as it is.
- `version` is slipcover's ``__version__``, read the same way.
- Both raise ImportError when slipcover is not installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

PACKAGE = "slipcover"
_REPORTERS = (("xmlreport", "XmlReporter"), ("lcovreport", "LcovReporter"))


def engine() -> types.ModuleType:
    """See the module docstring."""
    loaded = sys.modules.get("slipcover.slipcover")
    if loaded is not None:
        return loaded
    _bare_package()
    stand_ins = {}
    for module, name in _REPORTERS:
        full = f"{PACKAGE}.{module}"
        stand_ins[full] = sys.modules[full] = types.ModuleType(full)  # none is there: nothing imported the package
        setattr(stand_ins[full], name, _deferred(module, name))
    try:
        return importlib.import_module("slipcover.slipcover")
    finally:
        for full, stand_in in stand_ins.items():
            if sys.modules.get(full) is stand_in:  # the real module imports normally from now on
                del sys.modules[full]


def version() -> str:
    """See the module docstring."""
    if PACKAGE not in sys.modules:
        _bare_package()
    return importlib.import_module("slipcover.version").__version__


def _bare_package() -> None:
    if PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"No module named {PACKAGE!r}", name=PACKAGE)
    package = importlib.util.module_from_spec(spec)
    completing: list[bool] = []

    def complete(name: str) -> object:
        if name.startswith("__") or completing:
            raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")
        try:  # ``from . import branch`` asks the package for a submodule first
            return importlib.import_module(f"slipcover.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{PACKAGE}.{name}":
                raise
        completing.append(True)
        del package.__dict__["__getattr__"]
        spec.loader.exec_module(package)
        return getattr(package, name)

    package.__getattr__ = complete  # type: ignore[method-assign]
    sys.modules[PACKAGE] = package


def _deferred(module: str, name: str):
    def make(*args, **kwargs):
        return getattr(importlib.import_module(f"slipcover.{module}"), name)(*args, **kwargs)

    make.__name__ = make.__qualname__ = name
    return make
