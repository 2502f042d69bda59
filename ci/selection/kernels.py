"""Which functions are kernels: decorated to run on a device or through a compiler.

A function decorated with a name ending in ``jit`` (``triton.jit``, ``numba.njit``, a project's
``lazy_jit``) or one of `KERNEL_DECORATORS` (``triton.autotune``, ``torch.compile``...) is a
kernel: its body never runs line by line as Python where a GPU runs it, so no map records it.
"""

from __future__ import annotations

import ast

KERNEL_DECORATORS = frozenset({"autotune", "heuristics", "compile", "script", "kernel"})


def decorator_name(node: ast.expr) -> str:
    """A decorator's last name: ``lru_cache`` of ``@functools.lru_cache(maxsize=2)``."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def is_kernel(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a decorator marks the function as a kernel (see the module docstring)."""
    names = (decorator_name(d) for d in node.decorator_list)
    return any(n.endswith("jit") or n in KERNEL_DECORATORS for n in names)


__all__ = ["KERNEL_DECORATORS", "decorator_name", "is_kernel"]
