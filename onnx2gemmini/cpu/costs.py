"""What a CPU kernel costs on the SoC's core: instructions retired, from counts measured on Spike.

Each C call of a CPU step is one *cost key* (a C function, or one of its paths where the function takes very
different loops: a clip that is a copy, SWAR or a table; a binary op by function and operand kinds) and a few
*terms*: `call` (1 per call), `elem` (output elements), and where the kernel's loops say so `row`
(contiguous runs it walks), `tap` (window taps), `mac` (multiply-accumulates) or `pixel` (output pixels).
Its instructions are the dot product of the terms with the key's coefficients in cost_table.COSTS, which
`python scripts/measure_cpu_kernels.py --write` fits on Spike (`--check` re-measures and compares; the
C functions here are the runtime's, built with the generated Makefile's `riscv` flags).

The term functions below are shared by the kernels (cpu/*.py, `CpuKernel.cost_terms`) and the measuring
script, so the fit and the estimate count the same things. Cycles are instructions x the config's
`cpu_cpi` (config.py; docs/cost_model.md says where its figure comes from).
"""
from __future__ import annotations

import math

import numpy as np

from .cost_table import COSTS

Terms = dict  # term name -> count

TABLE_MIN = 512   # O2G_TABLE_MIN of o2g_runtime.c: runs at least this long get a 256-entry table


def prod(shape) -> int:
    return int(np.prod(list(shape), dtype=np.int64)) if len(shape) else 1


def instructions(key: str, terms: Terms) -> float:
    """Estimated instructions of one C call: the key's coefficients times the terms."""
    coef = COSTS.get(key)
    if coef is None:
        raise KeyError(f"no measured cost for CPU kernel path {key!r} (scripts/measure_cpu_kernels.py --write)")
    return sum(coef.get(name, 0.0) * count for name, count in terms.items())


def total_instructions(parts) -> float:
    """Sum over a step's (key, terms) parts."""
    return sum(instructions(key, terms) for key, terms in parts)


# --- term functions: (key, terms) of one C call, from the call's own arguments -------------------------

def quantize_terms(count: int) -> tuple[str, Terms]:
    return "quantize", {"call": 1, "elem": count}


def quantize_nhwc_terms(n: int, c: int, h: int, w: int) -> tuple[str, Terms]:
    return "quantize_nchw_to_nhwc", {"call": 1, "elem": n * c * h * w, "pixel": n * h * w}


def transpose_terms(shape, perm) -> tuple[str, Terms]:
    """o2g_transpose: output dims merged where they stay adjacent (size 1 dropped); when the innermost output
    dim is contiguous in x, row copies, else 2-D transposes of the input's contiguous dim against the
    output's ("row": copies or 2-D transposes; "pixel": 2-D rows along the output's contiguous dim)."""
    size = prod(shape)
    in_stride, acc = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        in_stride[d], acc = acc, acc * shape[d]
    n, st = [], []
    for d in perm:
        if shape[d] == 1:
            continue
        if n and st[-1] == in_stride[d] * shape[d]:
            n[-1] *= shape[d]
            st[-1] = in_stride[d]
        else:
            n.append(shape[d])
            st.append(in_stride[d])
    if not n or st[-1] == 1:
        block = n[-1] if n else 1
        return "transpose_copy", {"call": 1, "elem": size, "row": size // block}
    j = st.index(1)
    calls = size // (n[j] * n[-1])
    return "transpose", {"call": 1, "elem": size, "row": calls, "pixel": calls * min(n[j], n[-1])}


def clip_terms(count: int, lo: int, hi: int) -> tuple[str, Terms]:
    """o2g_clip_run: the full range is a copy; lo >= 0 works on 8 lanes per word (which bounds it tests
    matters); other bounds are a table (from 64 values) or a scalar loop."""
    lo = min(lo, hi)
    lo, hi = max(-128, min(127, lo)), max(-128, min(127, hi))
    if lo == -128 and hi == 127:
        return "copy", {"call": 1, "elem": count}
    if lo >= 0:
        return "clip_swar" + ("_lo" if lo > 0 else "") + ("_hi" if hi < 127 else ""), {"call": 1, "elem": count}
    return ("lut" if count >= 64 else "clip_scalar"), {"call": 1, "elem": count}


def lut_terms(count: int) -> tuple[str, Terms]:
    return "lut", {"call": 1, "elem": count}


def gather_terms(outer: int, inner: int, count: int) -> tuple[str, Terms]:
    return ("gather" if inner == 1 else "gather_rows"), {"call": 1, "elem": outer * count * inner,
                                                          "row": outer * count}


def remap_terms(in_shape, out_shape, index) -> tuple[str, Terms]:
    """o2g_remap: trailing axes mapped onto themselves are blocks; the last other axis is split once into
    runs of consecutive sources (or padding), copied per row ("tap": one copy or fill), else element by
    element."""
    size = prod(out_shape)
    maps, at = [], 0
    for n in out_shape:
        maps.append(list(index[at:at + n]))
        at += n
    block, last = 1, len(out_shape) - 1
    while last >= 0 and out_shape[last] == in_shape[last] and maps[last] == list(range(out_shape[last])):
        block *= out_shape[last]
        last -= 1
    if last < 0:
        return "copy", {"call": 1, "elem": size}
    m = maps[last]
    runs, j = 0, 0
    while j < len(m):
        k = j + 1
        while k < len(m) and ((m[j] < 0 and m[k] < 0) or (m[j] >= 0 and m[k] == m[j] + k - j)):
            k += 1
        runs, j = runs + 1, k
    rows = size // max(len(m) * block, 1)
    if block > 1 or runs * 8 <= len(m):
        return "remap_runs", {"call": 1, "elem": size, "row": rows, "tap": rows * runs}
    return "remap_elem", {"call": 1, "elem": size, "row": rows}


def concat_terms(outer: int, part: int, inner: int, total: int, same_scale: bool) -> tuple[str, Terms]:
    run = part * inner
    if same_scale:
        rows = 1 if part == total else outer
        return "concat_copy", {"call": 1, "elem": outer * run, "row": rows}
    if outer * run >= TABLE_MIN:
        return "concat_table", {"call": 1, "elem": outer * run, "row": outer}
    return "concat_scalar", {"call": 1, "elem": outer * run, "row": outer}


def window_terms(op: str, n: int, c: int, kernel, out) -> tuple[str, Terms]:
    pixels = n * out[0] * out[1]
    taps = pixels * kernel[0] * kernel[1]
    if op == "im2col":  # one copy of c bytes per tap
        return op, {"call": 1, "elem": taps * c, "pixel": pixels, "tap": taps}
    return op, {"call": 1, "elem": pixels * c, "pixel": pixels, "tap": taps * c}


def taps_inside(size: int, kernel: int, stride: int, pad: int, dilation: int, out: int) -> int:
    """Window taps of one axis, summed over its `out` positions, that fall inside the input (not padding)."""
    pos = np.arange(out)[:, None] * stride + np.arange(kernel)[None, :] * dilation - pad
    return int(np.count_nonzero((pos >= 0) & (pos < size)))


def dwconv_terms(n: int, h: int, w: int, c: int, multiplier: int, kernel, strides, pads, dilations,
                 out) -> tuple[str, Terms]:
    """o2g_dwconv skips the taps in the padding and sets up each output pixel once for all its channels."""
    inside = (taps_inside(h, kernel[0], strides[0], pads[0], dilations[0], out[0])
              * taps_inside(w, kernel[1], strides[1], pads[1], dilations[1], out[1]))
    pixels = n * out[0] * out[1]
    oc = c * multiplier
    return "dwconv", {"call": 1, "mac": n * inside * oc, "elem": pixels * oc, "pixel": pixels}


def softmax_terms(outer: int, axis_len: int, inner: int, kind: str = "softmax") -> tuple[str, Terms]:
    """o2g_softmax: one table of at most 256 exps per call of at least 256 values, each exp(-d * in_scale) for a
    value d steps below its row's largest; a smaller call one exp per value ("tap": the exps). `kind`
    softmax_masked / softmax_input_mask: the masked kernels (one table per call, filled as rows need it)."""
    rows = outer * inner
    return (kind if inner == 1 else f"{kind}_strided"), {"call": 1, "elem": rows * axis_len, "row": rows,
                                                          "tap": min(rows * axis_len, 256)}


def lookup_terms(kind: str, inner: int, count: int) -> tuple[str, Terms]:
    """o2g_embedding / o2g_position_embedding: one row of `inner` bytes copied per id."""
    return kind, {"call": 1, "elem": count * inner, "row": count}


def layernorm_terms(outer: int, norm: int) -> tuple[str, Terms]:
    return "layernorm", {"call": 1, "elem": outer * norm, "row": outer}


def lrn_terms(outer: int, channels: int, inner: int, size: int) -> tuple[str, Terms]:
    elem = outer * channels * inner
    return "lrn", {"call": 1, "elem": elem, "tap": elem * size}


def affine_terms(outer: int, channels: int, inner: int) -> tuple[str, Terms]:
    """o2g_affine: channels last over at least 384 rows is a 256-entry table per channel, else float math."""
    elem = outer * channels * inner
    if inner == 1 and outer >= 384:
        return "affine_table", {"call": 1, "elem": elem, "row": channels}
    return "affine", {"call": 1, "elem": elem, "row": outer * (channels if inner > 1 else 1)}


def reduce_terms(kind: str, outer: int, axis_len: int, inner: int) -> tuple[str, Terms]:
    key = f"reduce_{kind}" + ("" if inner == 1 else "_strided")
    return key, {"call": 1, "elem": outer * axis_len * inner, "row": outer * inner}


def resize_terms(kind: str, in_shape, out_shape) -> tuple[str, Terms]:
    size = prod(out_shape)
    last = out_shape[-1] if len(out_shape) else 1
    return f"resize_{kind}", {"call": 1, "elem": size, "row": size // max(last, 1)}


def recurrent_terms(cell: str, seq: int, batch: int, hidden: int, directions: int) -> tuple[str, Terms]:
    gates = {"lstm": 4, "gru": 3}[cell]
    steps = seq * batch * directions
    return cell, {"call": 1, "mac": steps * gates * hidden * hidden, "elem": steps * hidden, "row": seq * directions}


RUN_KINDS = "QFS"  # int8 run, float run, one (broadcast) value: o2g_run_kind


def binary_terms(fn: str, shape, a_strides, b_strides, a_float: bool, b_float: bool, relu: bool) -> list:
    """o2g_binary's loops: dims of size 1 dropped, neighbours both operands walk contiguously merged; the
    innermost run and the rows above it are one block (an odometer walks the others); a run of at least
    TABLE_MIN int8 values against one value is a 256-entry table per row; a fused ReLU is a second pass."""
    n, sa, sb = [], [], []
    for size, da, db in zip(shape, a_strides, b_strides):
        if size == 1:
            continue
        if n and sa[-1] == da * size and sb[-1] == db * size:
            n[-1] *= size
            sa[-1], sb[-1] = da, db
        else:
            n.append(size)
            sa.append(da)
            sb.append(db)
    while len(n) < 2:
        n.insert(0, 1)
        sa.insert(0, 0)
        sb.insert(0, 0)
    total = prod(n)
    run, rows = n[-1], total // max(n[-1], 1)
    if sa[-1] not in (0, 1) or sb[-1] not in (0, 1):
        return [("binary_strided", {"call": 1, "elem": total, "row": rows})]
    ka = "S" if sa[-1] == 0 else "F" if a_float else "Q"
    kb = "S" if sb[-1] == 0 else "F" if b_float else "Q"
    if run >= TABLE_MIN and {ka, kb} == {"Q", "S"}:
        return [("binary_table", {"call": 1, "elem": total, "row": rows})]
    parts = [(f"binary_{fn}_{ka}{kb}", {"call": 1, "elem": total, "row": rows})]
    if relu:
        parts.append(clip_terms(total, 0, 127))
    return parts


def cycles(instr: float, cpi: float) -> int:
    """Estimated core cycles of `instr` instructions at `cpi` cycles per instruction: at least 1."""
    return max(1, math.ceil(instr * cpi))
