"""Lazy Triton decoration, so one process can import `fp4kv` before or after TRITON_INTERPRET is set.

`triton.jit` decides at *decoration* time whether a function is compiled or interpreted (it reads
``TRITON_INTERPRET`` then). Decorating at import would freeze that choice for the whole process:
if anything imports `fp4kv` before a test's conftest sets the variable, the interpreter tests
would launch compiled kernels on CPU tensors. `lazy_jit` instead keeps the plain function and
builds the jitted version on first use, once per mode, with its jitted helpers swapped into a
private copy of the module globals (compiled kernels must call compiled helpers, interpreted ones
interpreted helpers).

Triton is imported only here and only on first use: importing `fp4kv` never pays for it.
"""

from __future__ import annotations

import os
import types
from typing import Any, Callable


def interpret_mode() -> bool:
    """Whether Triton would interpret kernels now (``TRITON_INTERPRET`` set to a true value)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in {"1", "true", "on", "yes"}


class LazyJit:
    """A Triton function, decorated on first use for the current mode. Index like a kernel: ``k[grid](...)``."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self._by_mode: dict[bool, Any] = {}

    def get(self) -> Any:
        """The `triton.jit` object for the current mode (built once per mode)."""
        mode = interpret_mode()
        built = self._by_mode.get(mode)
        if built is None:
            import triton  # deferred: see the module docstring
            import triton.language as tl

            fn = self.fn
            scope = dict(fn.__globals__)
            scope.update(triton=triton, tl=tl)
            for name in fn.__code__.co_names:  # only the globals this function refers to
                value = fn.__globals__.get(name)
                if isinstance(value, LazyJit) and value is not self:
                    scope[name] = value.get()
            clone = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
            clone.__module__ = fn.__module__
            clone.__qualname__ = fn.__qualname__
            clone.__doc__ = fn.__doc__
            built = triton.jit(clone)
            self._by_mode[mode] = built
        return built

    def __getitem__(self, grid: Any) -> Any:
        return self.get()[grid]


def lazy_jit(fn: Callable[..., Any]) -> LazyJit:
    """Mark ``fn`` as a Triton kernel or device helper, decorated lazily (see module docstring)."""
    return LazyJit(fn)
