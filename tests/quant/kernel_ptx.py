"""Compile every fp4kv Triton kernel specialization for a GPU architecture, without a GPU (not a
test module). Run as a script in a process without TRITON_INTERPRET:

    python tests/quant/kernel_ptx.py 90 100   ->  one JSON object per line:
    {"label": ..., "arch": 90, "error": null | "...", "cubin_bytes": N, "ptx_ops": [...]}

``ptx_ops`` lists the distinct floating-point division, conversion, multiply and fma opcodes of
the PTX (e.g. ``div.rn.f32``, ``cvt.rn.f32.f64``), which is what exactness depends on.
"""

from __future__ import annotations

import json
import re
import sys

TILE = 64
IN_POINTERS = {"bf16": ("*i16", True), "fp16": ("*fp16", False), "fp32": ("*fp32", False)}  # as the launchers pass them
OUT_POINTERS = {"bf16": ("*i16", 0), "fp16": ("*i16", 1), "fp32": ("*fp32", 2)}
_OPS = re.compile(r"\b((?:div|cvt|mul|fma|rcp|ex2|lg2)(?:\.[a-z0-9]+)+)")


def specializations() -> list[tuple[str, object, dict[str, str], dict[str, object]]]:
    """(label, lazy kernel, signature, constexprs) for every launch the launchers can make."""
    from fp4kv.quant import mx_block16, nvfp4_triton

    out = []
    for dtype, (pointer, is_bf16) in IN_POINTERS.items():
        out.append((f"mx_quantize[{dtype}]", mx_block16._mx_quantize_kernel,
                    {"x_ptr": pointer, "packed_ptr": "*u8", "scales_ptr": "*u8", "n_blocks": "i32",
                     "IN_BF16": "constexpr", "TILE": "constexpr"}, {"IN_BF16": is_bf16, "TILE": TILE}))
        out.append((f"nvfp4_quantize[{dtype}]", nvfp4_triton._nvfp4_quantize_kernel,
                    {"x_ptr": pointer, "g_ptr": "*fp32", "packed_ptr": "*u8", "scales_ptr": "*u8",
                     "n_blocks": "i32", "IN_BF16": "constexpr", "TILE": "constexpr"}, {"IN_BF16": is_bf16, "TILE": TILE}))
    for dtype, (pointer, kind) in OUT_POINTERS.items():
        out.append((f"mx_dequantize[{dtype}]", mx_block16._mx_dequantize_kernel,
                    {"packed_ptr": "*u8", "scales_ptr": "*u8", "out_ptr": pointer, "n_blocks": "i32",
                     "OUT_KIND": "constexpr", "TILE": "constexpr"}, {"OUT_KIND": kind, "TILE": TILE}))
        out.append((f"nvfp4_dequantize[{dtype}]", nvfp4_triton._nvfp4_dequantize_kernel,
                    {"packed_ptr": "*u8", "scales_ptr": "*u8", "g_ptr": "*fp32", "out_ptr": pointer,
                     "n_blocks": "i32", "OUT_KIND": "constexpr", "TILE": "constexpr"}, {"OUT_KIND": kind, "TILE": TILE}))
    return out


def main(archs: list[int]) -> int:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for arch in archs:
        for label, kernel, signature, constexprs in specializations():
            record: dict[str, object] = {"label": label, "arch": arch, "error": None, "cubin_bytes": 0, "ptx_ops": []}
            try:
                compiled = triton.compile(ASTSource(fn=kernel.get(), signature=signature, constexprs=constexprs),
                                          target=GPUTarget("cuda", arch, 32))
                record["cubin_bytes"] = len(compiled.asm["cubin"])
                record["ptx_ops"] = sorted(set(_OPS.findall(compiled.asm["ptx"])))
            except Exception as exc:  # reported to the test, which fails with the message
                record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main([int(a) for a in sys.argv[1:]]))
