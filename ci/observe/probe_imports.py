"""The import hook that puts slipcover's probes into repository modules as they are imported.

slipcover's own hook (``slipcover.importer``) subclasses ``importlib.abc``'s finder and loader,
and importing ``importlib.abc`` on Python 3.11 costs a recorded subprocess about 6 ms of CPU
(it brings ``importlib.resources``, ``tempfile``, ``shutil`` and the compression modules) before
the program runs a line. The import system needs no base class, so this hook does the same
work duck-typed; it is slipcover's ``SlipcoverMetaPathFinder``/``SlipcoverLoader`` and
``wrap_spec_from_file_location`` without branch coverage, which the recorder never asks for.

Contract:

- `ProbeImports` is a meta path finder: `enter` puts it first in ``sys.meta_path``, `leave`
  takes it out. For a module that a later finder finds as source with a code object
  (``get_code``) and whose origin ``matches``, it returns that finder's spec with the loader
  wrapped (`ProbedLoader`): the module's code gets probes (``instrument``) before it runs.
  Extension, built-in and frozen modules, pytest's assertion rewriting hook (slipcover's
  ``wrap_pytest`` handles those) and modules of other files are left to their own loaders.
- `wrap_spec_from_file_location` makes ``importlib.util.spec_from_file_location`` (how
  plugins and tools load a file by path) return such a wrapped loader for a matching file;
  `leave` puts the original back.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from importlib import machinery

from ci.observe.finder_guard import FinderGuard


class ProbedLoader:
    """A loader that runs ``loader``'s code for a module after ``instrument`` put probes in it."""

    def __init__(self, instrument: Callable, loader, origin: str, register: Callable | None = None):
        self.instrument, self.loader, self.origin, self.register = instrument, loader, origin, register

    def __getattr__(self, name: str):
        # get_resource_reader, is_package, get_source, get_filename...: the wrapped loader's
        if name == "loader":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def get_code(self, name: str):
        return self.loader.get_code(name)

    def exec_module(self, module) -> None:
        code = self.loader.get_code(module.__name__)
        if code is None:
            raise ImportError(f"cannot load {module.__name__!r} from {self.origin}: its loader gives no code",
                              name=module.__name__)
        if self.register is not None:
            self.register(module)
        exec(self.instrument(code), module.__dict__)


def _wrappable(spec) -> bool:
    # pytest's assertion rewriting hook has no get_code; built-in and frozen modules no location
    return spec.has_location and hasattr(spec.loader, "get_code") \
        and not isinstance(spec.loader, (machinery.ExtensionFileLoader, ProbedLoader))


class ProbeImports:
    """See the module docstring; ``matches(origin)`` says which files get probes."""

    def __init__(self, instrument: Callable, matches: Callable[[str], bool], register: Callable | None = None):
        self.instrument, self.matches, self.register = instrument, matches, register
        self._unwrapped: Callable | None = None
        self._wrapper: Callable | None = None
        self._guard = FinderGuard()

    def find_spec(self, fullname, path, target=None):
        with self._guard.asking(fullname) as first:
            if not first:  # asked back (`ci.observe.finder_guard`): another copy of this class, slipcover's
                return None
            for finder in list(sys.meta_path):
                if finder is self or isinstance(finder, ProbeImports) or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is None or spec.loader is None:
                    continue
                if _wrappable(spec) and self.matches(spec.origin):
                    spec.loader = ProbedLoader(self.instrument, spec.loader, spec.origin, self.register)
                return spec
            return None

    def enter(self) -> None:
        sys.meta_path.insert(0, self)

    def leave(self) -> None:
        """Take the finder out, and the wrapper of ``spec_from_file_location`` unless another
        was put over it since."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if self._unwrapped is not None and importlib.util.spec_from_file_location is self._wrapper:
            importlib.util.spec_from_file_location = self._unwrapped
        self._unwrapped = self._wrapper = None

    def wrap_spec_from_file_location(self) -> None:
        """See the module docstring."""
        original = importlib.util.spec_from_file_location

        def spec_from_file_location(name, location=None, *, loader=None, submodule_search_locations=None):
            spec = original(name, location, loader=loader, submodule_search_locations=submodule_search_locations)
            if spec is None or spec.loader is None or not _wrappable(spec):
                return spec
            origin = spec.origin or (str(location) if location else None)
            if origin and self.matches(origin):
                spec.loader = ProbedLoader(self.instrument, spec.loader, origin, self.register)
            return spec

        self._unwrapped, self._wrapper = original, spec_from_file_location
        importlib.util.spec_from_file_location = spec_from_file_location
