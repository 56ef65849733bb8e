"""Instructions per element of every CPU kernel of the C runtime, and per step of a compiled model, on Spike.

    python scripts/bench_spike.py                          # every kernel at a few representative sizes
    python scripts/bench_spike.py --only quantize,lut      # kernels whose name contains one of these
    python scripts/bench_spike.py --baseline OLD.c         # a before/after table against another o2g_runtime.c
    python scripts/bench_spike.py --baseline-rev HEAD      # ... against o2g_runtime.c of a git revision
    python scripts/bench_spike.py --model OUT              # per-step counts of OUT's `make spike` self-test
    python scripts/bench_spike.py --model OUT --baseline-rev HEAD   # ... before/after the runtime change
    python scripts/bench_spike.py --dw                     # the depthwise fit (scripts/measure_cpu_kernels.py)
    python scripts/bench_spike.py --cost-table             # re-measure onnx2gemmini/cpu/cost_table.py (--check)

Needs (nothing is downloaded): Debian's gcc-riscv64-unknown-elf, picolibc-riscv64-unknown-elf and
device-tree-compiler (`apt-get install ...`), and PyPI's `spike` (`pip install spike==0.0.5.dev20`).

Kernel mode: writes a driver that calls each o2g_runtime.c kernel on data embedded with .incbin, builds it
for rv64gc + picolibc with the flags of the generated Makefile's `riscv` target (RISCV_CFLAGS,
PICOLIBC_SPECS, RISCV_MEMORY read from runtime/templates/Makefile.in, so the measured code is the code a
user's `make riscv` builds), runs it on Spike and reads `csrr instret` around each call. Every call's
output is also hashed and compared with the NumPy reference kernel: a kernel that
is fast and wrong is reported as such (onnx2gemmini/kernels.py, numerics.py). Spike retires one instruction per cycle, so the figures are
INSTRUCTIONS RETIRED per output element (per MAC or per window tap where that says more), not the cycles
of a real core (whose loads, multiplies and divides take more than one).

Model mode: builds a copy of OUT/c with this checkout's runtime (`--as-emitted`: the copy in OUT/c) by
`make model-riscv` (or `--target baremetal` with `--make-var GEMMINI=...`), runs it on Spike
(`--spike-flags` for e.g. --extension=gemmini) and prints the self-test's per-layer
read_cycles() (= instructions on Spike) beside each step's kind from OUT/report.json. Under the
bundled host gemmini.h (`make riscv`) a Gemmini step is a C emulation of the array on the core: its count
is not Gemmini's cost; only the CPU steps' counts are what the real SoC's core would retire.

tests/runtime/test_cpu_kernels.py builds the same driver (smaller cases, edge cases) for the host and for
Spike and compares every output byte with NumPy.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "onnx2gemmini" / "runtime"
sys.path.insert(0, str(ROOT))

from onnx2gemmini import cpu, kernels, numerics  # noqa: E402  (the NumPy reference kernels; the table's)
from onnx2gemmini.cpu.float_ops import LIBM  # noqa: E402  (the tolerances the C kernels state)
from onnx2gemmini.cpu.recurrent import RECURRENCE  # noqa: E402
from onnx2gemmini.ops.resize import cubic_tables  # noqa: E402  (the compiler's own cubic taps)
from onnx2gemmini.tolerance import EXACT, Tolerance  # noqa: E402

GUARD = 0x5A       # output bytes around (and, for concat_part, inside) the written region
OUT_SLACK = 64     # guard bytes checked on each side of an output


# --- cases ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Case:
    """One kernel call: its C statement, its embedded inputs and the bytes NumPy says it must write."""
    name: str                      # "quantize n=150528"
    kernel: str                    # "quantize" (o2g_quantize)
    call: str                      # C statement; {in0}.. are input pointers, {out} the output pointer
    inputs: list[np.ndarray]       # embedded in the data blob
    expected: np.ndarray           # int8, the whole output region
    units: dict[str, int]          # {"elem": output elements, "MAC": ..}; instructions are divided by each
    offsets: tuple[int, ...] = ()  # byte misalignment of each input (default 0: 64-byte aligned)
    out_offset: int = 0            # byte misalignment of the output
    tol: Tolerance = EXACT         # the kernel's stated C tolerance: largest difference and a budget of values
    prefill: np.ndarray | None = None  # output bytes before the call (default GUARD)


def c_float(x: float) -> str:
    """An exact float32 literal in hex."""
    v = float(np.float32(x))
    if not np.isfinite(v):
        raise ValueError(f"non-finite constant {x}")
    return f"{v.hex()}f"


def ints(values) -> str:
    return ", ".join(str(int(v)) for v in values) or "0"


def i8(rng, shape, lo=-128, hi=127) -> np.ndarray:
    return rng.integers(lo, hi + 1, size=shape, dtype=np.int64).astype(np.int8)


def prod(shape) -> int:
    return int(np.prod(list(shape), dtype=np.int64))


def window_c(kernel, strides, pads, dilations, out) -> str:
    (kh, kw), (sh, sw), (dh, dw), (t, l, b, r) = kernel, strides, dilations, pads
    return (f"&(const struct o2g_window){{{kh}, {kw}, {sh}, {sw}, {t}, {l}, {b}, {r}, {dh}, {dw}, "
            f"{out[0]}, {out[1]}}}")


def out_dims(size, kernel, stride, pad_lo, pad_hi, dilation) -> int:
    return (size + pad_lo + pad_hi - ((kernel - 1) * dilation + 1)) // stride + 1


def broadcast_strides(shape, out_shape) -> list[int]:
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    strides, step = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = 0 if shape[d] == 1 and out_shape[d] != 1 else step
        step *= shape[d]
    return strides


def quantize_case(rng, n, scale=0.0123, special=False, off=0, oo=0) -> Case:
    x = (rng.standard_normal(n) * 0.5).astype(np.float32)  # 0.2% saturate, as calibrated inputs do
    if special:  # ties, saturation, NaN, infinities, signed zeros, subnormals
        s = np.float32(scale)
        k = rng.integers(-140, 140, size=n)
        x[::3] = (k[::3] + 0.5).astype(np.float32) * s   # near/at ties (rounded products)
        x[1::7] = (k[1::7].astype(np.float32) + np.float32(0.5)) * s
        x[:12] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 3e38, -3e38, 127.5 * s, -128.5 * s, 126.5 * s]
    return Case(f"quantize n={n}", "quantize", f"o2g_quantize({{in0}}, {{out}}, {n}, {c_float(scale)});",
                [x], numerics.quantize(x, scale), {"elem": n}, (off,), oo)


def quantize_nhwc_case(rng, n, c, h, w, scale=0.024, special=False, off=0, oo=0) -> Case:
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    if special:
        x.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, 2.5 * np.float32(scale), 3.5 * np.float32(scale), -0.0]
    return Case(f"quantize_nchw_to_nhwc {n}x{c}x{h}x{w}", "quantize_nchw_to_nhwc",
                f"o2g_quantize_nchw_to_nhwc({{in0}}, {{out}}, {n}, {c}, {h}, {w}, {c_float(scale)});",
                [x], numerics.quantize(x, scale).transpose(0, 2, 3, 1), {"elem": x.size}, (off,), oo)


def dequantize_case(rng, n, scale=0.0123, off=0, oo=0) -> Case:
    """o2g_dequantize; the float32 output is compared as bytes (oo: a multiple of 4)."""
    x = i8(rng, n)
    y = x.astype(np.float32) * np.float32(scale)
    return Case(f"dequantize n={n}", "dequantize", f"o2g_dequantize({{in0}}, (float *)(void *){{out}}, {n}, "
                f"{c_float(scale)});", [x], y.view(np.int8), {"elem": n}, (off,), oo)


def dequantize_nchw_case(rng, n, c, h, w, scale=0.0201, off=0, oo=0) -> Case:
    x = i8(rng, (n, h, w, c))
    y = (x.astype(np.float32) * np.float32(scale)).transpose(0, 3, 1, 2).copy()
    return Case(f"dequantize_nhwc_to_nchw {n}x{c}x{h}x{w}", "dequantize_nhwc_to_nchw",
                f"o2g_dequantize_nhwc_to_nchw({{in0}}, (float *)(void *){{out}}, {n}, {c}, {h}, {w}, {c_float(scale)});",
                [x], y.view(np.int8), {"elem": x.size}, (off,), oo)


def transpose_case(rng, shape, perm, off=0, oo=0) -> Case:
    x = i8(rng, shape)
    return Case(f"transpose {'x'.join(map(str, shape))} perm {''.join(map(str, perm))}", "transpose",
                f"o2g_transpose({{in0}}, {{out}}, {len(shape)}, (const int[]){{{ints(shape)}}}, "
                f"(const int[]){{{ints(perm)}}});", [x], np.transpose(x, perm), {"elem": x.size}, (off,), oo)


def windowed(op, rng, n, h, w, c, k, s, p, d=(1, 1), extra="", count_include_pad=0, off=0, oo=0,
             pads=None) -> Case:
    kernel, strides, dil = (k, k) if isinstance(k, int) else k, (s, s) if isinstance(s, int) else s, d
    pads = pads or ((p, p, p, p) if isinstance(p, int) else p)
    out = (out_dims(h, kernel[0], strides[0], pads[0], pads[2], dil[0]),
           out_dims(w, kernel[1], strides[1], pads[1], pads[3], dil[1]))
    x = i8(rng, (n, h, w, c))
    win = window_c(kernel, strides, pads, dil, out)
    if op == "im2col":
        ref = kernels.im2col(x, kernel, strides, pads, dil, out)
    elif op == "maxpool":
        ref = kernels.maxpool(x, kernel, strides, pads, dil, out)
    else:
        ref = kernels.avgpool(x, kernel, strides, pads, dil, out, count_include_pad)
        extra = f", {count_include_pad}"
    taps = n * out[0] * out[1] * c * kernel[0] * kernel[1]
    units = {"elem": ref.size} if op == "im2col" else {"elem": ref.size, "tap": taps}
    name = f"{op} {h}x{w}x{c} k{kernel[0]}x{kernel[1]} s{strides[0]} p{pads[0]}" + \
        (f" d{dil[0]}" if dil != (1, 1) else "") + (" incl" if count_include_pad else "")
    return Case(name, op, f"o2g_{op}({{in0}}, {{out}}, {n}, {h}, {w}, {c}, {win}{extra});", [x], ref, units,
                (off,), oo)


def clip_case(rng, n, lo, hi, off=0, oo=0) -> Case:
    x = i8(rng, n)
    return Case(f"clip n={n} [{lo},{hi}]", "clip", f"o2g_clip({{in0}}, {{out}}, {n}, {lo}, {hi});", [x],
                np.clip(x, lo, hi).astype(np.int8), {"elem": n}, (off,), oo)


def lut_case(rng, n, off=0, oo=0) -> Case:
    x, table = i8(rng, n), i8(rng, 256)
    return Case(f"lut n={n}", "lut", f"o2g_lut({{in0}}, {{out}}, {n}, {{in1}});", [x, table],
                table[x.astype(np.int16) + 128], {"elem": n}, (off, 0), oo)


def lut_f32_case(rng, n, off=0, oo=0) -> Case:
    """o2g_lut_f32: a float32 model output's table; the output is compared as bytes (oo: a multiple of 4)."""
    x, table = i8(rng, n), rng.normal(0, 1, 256).astype(np.float32)
    return Case(f"lut_f32 n={n}", "lut_f32", f"o2g_lut_f32({{in0}}, (float *)(void *){{out}}, {n}, {{in1}});",
                [x, table], table[x.astype(np.int16) + 128].view(np.int8), {"elem": n}, (off, 0), oo)


def softmax_case(rng, outer, n, inner, in_scale=0.05, out_scale=1 / 127) -> Case:
    x = i8(rng, (outer, n, inner))
    ref = kernels.softmax(x, 1, in_scale, out_scale)
    return Case(f"softmax {outer}x{n}x{inner}", "softmax",
                f"o2g_softmax({{in0}}, {{out}}, {outer}, {n}, {inner}, {c_float(in_scale)}, {c_float(out_scale)});",
                [x], ref, {"elem": x.size}, tol=LIBM)


def gather_case(rng, outer, n, inner, count, off=0, oo=0) -> Case:
    x = i8(rng, (outer, n, inner))
    idx = rng.integers(0, n, size=count).astype(np.int64)
    return Case(f"gather {outer}x{n}x{inner} take {count}", "gather",
                f"o2g_gather({{in0}}, {{out}}, {outer}, {n}, {inner}, {{in1}}, {count});", [x, idx],
                np.take(x, idx, axis=1), {"elem": outer * count * inner}, (off, 0), oo)


def embedding_case(rng, outer, rows, inner, count, index_bytes=8, off=0, oo=0) -> Case:
    """o2g_embedding: rows of a table at ids (negative ones from the end, out-of-range ones clamped)."""
    table = i8(rng, (outer, rows, inner))
    ids = rng.integers(-rows - 2, rows + 2, size=count).astype(np.int64 if index_bytes == 8 else np.int32)
    ref = cpu.Embedding(1).run([ids, table], [])[0]
    return Case(f"embedding {outer}x{rows}x{inner} take {count} (int{8 * index_bytes})", "embedding",
                f"o2g_embedding({{in0}}, {{in1}}, {{out}}, {index_bytes}, {outer}, {rows}, {inner}, {count});",
                [ids, table], ref, {"elem": outer * count * inner}, (0, off), oo)


def position_embedding_case(rng, batch, seq, rows, inner, pad, index_bytes=8) -> Case:
    """o2g_position_embedding: RoBERTa's position ids from token ids with padding (and clamping)."""
    ids = rng.integers(0, 5, size=(batch, seq)).astype(np.int64 if index_bytes == 8 else np.int32)
    ids[rng.random(ids.shape) < 0.3] = pad
    table = i8(rng, (rows, inner))
    ref = cpu.PositionEmbedding(pad).run([ids, table], [])[0]
    return Case(f"position_embedding {batch}x{seq} rows {rows} pad {pad}", "position_embedding",
                f"o2g_position_embedding({{in0}}, {{in1}}, {{out}}, {index_bytes}, {rows}, {inner}, {seq}, "
                f"{ids.size}, {pad});", [ids, table], ref, {"elem": ref.size})


def mask_rows_case(rng, rows, row_len, index_bytes=8, off=0, oo=0) -> Case:
    """o2g_mask_rows: rows of x kept where a mask input is nonzero, zeroed elsewhere."""
    x = i8(rng, (rows, row_len))
    mask = rng.integers(0, 2, size=rows).astype(np.int64 if index_bytes == 8 else np.int32)
    ref = cpu.MaskRows(rows).run([x, mask], [])[0]
    return Case(f"mask_rows {rows}x{row_len}", "mask_rows",
                f"o2g_mask_rows({{in0}}, {{in1}}, {{out}}, {index_bytes}, {rows}, {row_len});", [x, mask], ref,
                {"elem": x.size}, (off, 0), oo)


def softmax_masked_case(rng, outer, n, inner, keep_shape, in_scale=0.05, out_scale=1 / 127) -> Case:
    """o2g_softmax_masked: a constant keep table over x's trailing axes, repeated over the leading ones."""
    x = i8(rng, (outer, n, inner))
    keep = (rng.random(keep_shape) < 0.6).astype(np.int8)
    keep[..., 0, :] = 1  # every row (along the softmax axis, keep's second last) keeps a position
    kept = np.broadcast_to(keep, x.shape)
    ref = kernels.softmax(x, 1, in_scale, out_scale, kept)
    return Case(f"softmax_masked {outer}x{n}x{inner} keep {'x'.join(map(str, keep_shape))}", "softmax_masked",
                f"o2g_softmax_masked({{in0}}, {{in1}}, {{out}}, {outer}, {n}, {inner}, {keep.size}, "
                f"{c_float(in_scale)}, {c_float(out_scale)});", [x, keep], ref, {"elem": x.size}, tol=LIBM)


def softmax_input_mask_case(rng, batch, heads, queries, keys, form, index_bytes=8) -> Case:
    """o2g_softmax_input_mask: attention scores masked by a [batch][keys] mask input (kernels.MASK_FORMS)."""
    x = i8(rng, (batch, heads, queries, keys))
    mask = (rng.random((batch, keys)) < 0.7).astype(np.int64 if index_bytes == 8 else np.int32)
    mask[:, 0] = 1  # the first position kept: no query is left with nothing (causal)
    ref = cpu.InputMaskedSoftmax(3, 0.05, 1 / 127, form).run([x, mask], [])[0]
    rows = x.size // keys
    return Case(f"softmax_input_mask {batch}x{heads}x{queries}x{keys} {form}",
                "softmax_input_mask",
                f"o2g_softmax_input_mask({{in0}}, {{in1}}, {{out}}, {rows}, {keys}, {queries}, {rows // batch}, "
                f"{index_bytes}, {kernels.MASK_FORMS.index(form)}, {c_float(0.05)}, {c_float(1 / 127)});", [x, mask], ref,
                {"elem": x.size}, tol=LIBM)


def remap_case(rng, in_shape, maps, value=0, what="", off=0, oo=0) -> Case:
    """maps: one int64 array per axis (-1 = `value`)."""
    x = i8(rng, in_shape)
    out_shape = [len(m) for m in maps]
    index = np.concatenate([np.asarray(m, np.int64) for m in maps]) if maps else np.zeros(1, np.int64)
    ref = kernels.remap(x, index.tolist(), out_shape, value)
    return Case(f"remap {what} {'x'.join(map(str, in_shape))}->{'x'.join(map(str, out_shape))}", "remap",
                f"o2g_remap({{in0}}, {{out}}, {len(in_shape)}, (const int[]){{{ints(in_shape) or '1'}}}, "
                f"(const int[]){{{ints(out_shape) or '1'}}}, {{in1}}, {value});", [x, index], ref,
                {"elem": max(ref.size, 1)}, (off, 0), oo)


def pad_map(n, lo, hi):
    return [-1] * lo + list(range(n)) + [-1] * hi


def concat_case(rng, outer, part, inner, total, offset, in_scale, out_scale, off=0, oo=0) -> Case:
    x = i8(rng, (outer, part, inner))
    pre = np.full((outer, total, inner), GUARD, np.int8)
    ref = pre.copy()
    ref[:, offset:offset + part] = numerics.requantize(x, in_scale, out_scale)
    same = "same scale" if np.float32(in_scale) == np.float32(out_scale) else "requantize"
    return Case(f"concat_part {outer}x{part}x{inner} into {total} ({same})", "concat_part",
                f"o2g_concat_part({{in0}}, {{out}}, {outer}, {part}, {inner}, {total}, {offset}, "
                f"{c_float(in_scale)}, {c_float(out_scale)});", [x], ref, {"elem": x.size}, (off,), oo,
                prefill=pre)


def concat_f32_case(rng, outer, part, inner, total, offset, scale=None, off=0, oo=0) -> Case:
    """o2g_concat_part_f32 (scale None: a float32 input copied) or o2g_concat_part_dequantize (an int8 input
    times `scale`) into a float32 output; compared as bytes."""
    pre = np.full((outer, total, inner), np.float32(-7.5))
    ref = pre.copy()
    if scale is None:
        x = rng.normal(0, 3, (outer, part, inner)).astype(np.float32)
        ref[:, offset:offset + part] = x
        call = f"o2g_concat_part_f32({{in0}}, (float *)(void *){{out}}, {outer}, {part}, {inner}, {total}, {offset});"
        kernel = "concat_part_f32"
    else:
        x = i8(rng, (outer, part, inner))
        ref[:, offset:offset + part] = x.astype(np.float32) * np.float32(scale)
        call = (f"o2g_concat_part_dequantize({{in0}}, (float *)(void *){{out}}, {outer}, {part}, {inner}, {total}, "
                f"{offset}, {c_float(scale)});")
        kernel = "concat_part_dequantize"
    return Case(f"{kernel} {outer}x{part}x{inner} into {total}", kernel, call, [x], ref.view(np.int8),
                {"elem": x.size}, (off,), oo, prefill=pre.view(np.int8))


def resize_tables(n_in, n_out):
    """Half-pixel linear tables (as onnxruntime builds them) for one axis."""
    scale = n_out / n_in
    pos = np.clip((np.arange(n_out) + 0.5) / scale - 0.5, 0, n_in - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    w_hi = (pos - lo).astype(np.float32)
    return lo, hi, (np.float32(1) - w_hi).astype(np.float32), w_hi


def resize_case(rng, in_shape, out_shape, axes, in_scale=0.03, out_scale=0.031) -> Case:
    x = i8(rng, in_shape)
    tabs = [resize_tables(in_shape[a], out_shape[a]) for a in axes]
    lo, hi, w_lo, w_hi = (np.concatenate([t[k] for t in tabs]) for k in range(4))
    p = {"axes": list(axes), "out_shape": list(out_shape), "lo": lo.tolist(), "hi": hi.tolist(),
         "w_lo": w_lo.tolist(), "w_hi": w_hi.tolist(), "in_scale": in_scale, "out_scale": out_scale}
    f = numerics.dequantize(x, in_scale)
    ref = numerics.quantize(kernels.linear_interpolate(f, p["axes"], p["lo"], p["hi"], p["w_lo"], p["w_hi"],
                                                       p["out_shape"]), out_scale)
    r = len(in_shape)
    return Case(f"resize_linear {'x'.join(map(str, in_shape))}->{'x'.join(map(str, out_shape))} axes "
                f"{''.join(map(str, axes))}", "resize_linear",
                f"o2g_resize_linear({{in0}}, {{out}}, {r}, (const int[]){{{ints(in_shape)}}}, "
                f"(const int[]){{{ints(out_shape)}}}, {len(axes)}, (const int[]){{{ints(axes)}}}, {{in1}}, {{in2}}, "
                f"{{in3}}, {{in4}}, {c_float(in_scale)}, {c_float(out_scale)});", [x, lo, hi, w_lo, w_hi], ref,
                {"elem": ref.size})


def cubic_resize_case(rng, in_shape, out_shape, axes, onnx_shape=None, mode="half_pixel", a=-0.75,
                      exclude_outside=False, in_scale=0.03, out_scale=0.031) -> Case:
    """Cubic resize of `in_shape` along storage `axes` (height, width), with the compiler's own tables
    for the ONNX shapes (`onnx_shape`, default the storage shape, NCHW)."""
    x = i8(rng, in_shape)
    perm = (0, 2, 3, 1) if onnx_shape is not None else tuple(range(len(in_shape)))
    onnx_in = onnx_shape or in_shape
    onnx_out = [0] * len(perm)
    for s, d in enumerate(perm):
        onnx_out[d] = out_shape[s]
    scales = np.float32(onnx_out) / np.float32(onnx_in)
    t = cubic_tables(onnx_in, onnx_out, scales, mode, a, exclude_outside)
    pos, weight, divisor = np.int64(t["pos"]), np.float32(t["weight"]), np.float32(t["divisor"])
    ref = numerics.quantize(kernels.cubic_interpolate(numerics.dequantize(x, in_scale), axes, pos, weight,
                                                      divisor, out_shape), out_scale)
    r = len(in_shape)
    return Case(f"resize_cubic {'x'.join(map(str, in_shape))}->{'x'.join(map(str, out_shape))} axes "
                f"{''.join(map(str, axes))} {mode}{' exclude_outside' if exclude_outside else ''}", "resize_cubic",
                f"o2g_resize_cubic({{in0}}, {{out}}, {r}, (const int[]){{{ints(in_shape)}}}, "
                f"(const int[]){{{ints(out_shape)}}}, (const int[]){{{ints(axes)}}}, {{in1}}, {{in2}}, {{in3}}, "
                f"{c_float(in_scale)}, {c_float(out_scale)});", [x, pos, weight, divisor], ref,
                {"elem": ref.size, "MAC": 16 * ref.size})


BINARY_FNS = {"add": "O2G_ADD", "sub": "O2G_SUB", "mul": "O2G_MUL", "div": "O2G_DIV", "max": "O2G_MAX",
              "min": "O2G_MIN", "prelu": "O2G_PRELU", "hypot": "O2G_HYPOT"}


def binary_case(rng, fn, a_shape, b_shape, a_float=False, b_float=False, relu=False, sa=0.02, sb=0.03,
                so=None, what="", zeros=False, offs=(0, 0), oo=0) -> Case:
    """so=None: the output scale a calibration would choose (99.9th percentile of |result| / 127)."""
    out_shape = np.broadcast_shapes(a_shape, b_shape)

    def operand(shape, is_float, scale):
        if is_float:
            v = (rng.standard_normal(shape) * 2).astype(np.float32)
            if zeros:
                v.reshape(-1)[::5] = 0.0
            return v, None
        v = i8(rng, shape)
        if zeros:
            v.reshape(-1)[::4] = 0
        return v, scale
    (a, a_s), (b, b_s) = operand(a_shape, a_float, sa), operand(b_shape, b_float, sb)
    if so is None:
        fa, fb = (v.astype(np.float32) * np.float32(s if s is not None else 1) for v, s in ((a, a_s), (b, b_s)))
        with np.errstate(all="ignore"):
            r = np.abs(kernels.BINARY[fn](fa, fb))
        so = float(np.percentile(r[np.isfinite(r)], 99.9)) / 127 or 1.0
    with np.errstate(all="ignore"):
        ref = kernels.binary(fn, [a, b], [a_s, b_s], so, relu)
    ops = []
    for k, (v, s) in enumerate(((a, a_s), (b, b_s))):
        st = ints(broadcast_strides(v.shape, out_shape))
        ops.append(f"&(const struct o2g_operand){{{{in{k}}}, {int(s is None)}, {c_float(1.0 if s is None else s)}, "
                   f"(const int[]){{{st}}}}}")
    kinds = ("f" if a_float else "q") + ("f" if b_float else "q")
    return Case(f"binary {fn} {'x'.join(map(str, a_shape))}{kinds[0]} . {'x'.join(map(str, b_shape))}{kinds[1]}"
                f"{' relu' if relu else ''}{' ' + what if what else ''}", "binary",
                f"o2g_binary({BINARY_FNS[fn]}, {ops[0]}, {ops[1]}, {{out}}, {len(out_shape)}, "
                f"(const int[]){{{ints(out_shape) or '1'}}}, {c_float(so)}, {int(relu)});", [a, b], ref,
                {"elem": prod(out_shape)}, offs, oo)


def dwconv_case(rng, n, h, w, c, k, s, p, multiplier=1, bias=True, relu=True, scale=0.0123, d=(1, 1),
                off=0, oo=0, big_bias=False) -> Case:
    kernel, strides, pads = (k, k), (s, s), (p, p, p, p) if isinstance(p, int) else p
    out = (out_dims(h, k, s, pads[0], pads[2], d[0]), out_dims(w, k, s, pads[1], pads[3], d[1]))
    x, wt = i8(rng, (n, h, w, c)), i8(rng, (k, k, c * multiplier))
    b = (rng.integers(-2**31 if big_bias else -4000, 2**31 - 1 if big_bias else 4000, size=c * multiplier)
         .astype(np.int32))
    ref = kernels.depthwise_conv(x, wt, b if bias else None, kernel, strides, pads, d, out, multiplier, scale, relu)
    macs = n * out[0] * out[1] * c * multiplier * k * k
    return Case(f"dwconv {h}x{w}x{c} k{k} s{s}" + (f" m{multiplier}" if multiplier > 1 else "") +
                (f" d{d[0]}" if d != (1, 1) else ""), "dwconv",
                f"o2g_dwconv({{in0}}, {{in1}}, {'{in2}' if bias else 'NULL'}, {{out}}, {n}, {h}, {w}, {c}, "
                f"{window_c(kernel, strides, pads, d, out)}, {multiplier}, {c_float(scale)}, {int(relu)});",
                [x, wt, b], ref, {"elem": ref.size, "MAC": macs}, (off, 0, 0), oo)


def affine_case(rng, outer, c, inner, x_row=None, relu=False, in_scale=0.02, out_scale=0.05, off=0, oo=0) -> Case:
    x_row = x_row or c * inner
    wide = i8(rng, (outer, x_row))
    x = wide[:, :c * inner].reshape(outer, c, inner)
    mul, add = (rng.standard_normal(c) * 1.5).astype(np.float32), (rng.standard_normal(c)).astype(np.float32)
    ref = kernels.affine(x, mul, add, 1, in_scale, out_scale, relu)
    return Case(f"affine {outer}x{c}x{inner}" + (f" row {x_row}" if x_row != c * inner else "") +
                (" relu" if relu else ""), "affine",
                f"o2g_affine({{in0}}, {x_row}, {{in1}}, {{in2}}, {{out}}, {outer}, {c}, {inner}, {c_float(in_scale)}, "
                f"{c_float(out_scale)}, {int(relu)});", [wide, mul, add], ref, {"elem": x.size}, (off, 0, 0), oo)


def lrn_case(rng, outer, c, inner, size=5, alpha=1e-4, beta=0.75, bias=1.0, in_scale=0.5, out_scale=0.4) -> Case:
    x = i8(rng, (outer, c, inner))
    ref = kernels.lrn(x, 1, size, alpha, beta, bias, in_scale, out_scale)
    return Case(f"lrn {outer}x{c}x{inner} size {size}", "lrn",
                f"o2g_lrn({{in0}}, {{out}}, {outer}, {c}, {inner}, {size}, {c_float(alpha / size)}, {c_float(beta)}, "
                f"{c_float(bias)}, {c_float(in_scale)}, {c_float(out_scale)});", [x], ref, {"elem": x.size}, tol=LIBM)


def layernorm_case(rng, outer, n, eps=1e-5, in_scale=0.03, out_scale=0.02) -> Case:
    x = i8(rng, (outer, n))
    gamma, beta = (rng.standard_normal(n) * 0.5 + 1).astype(np.float32), (rng.standard_normal(n) * 0.1).astype(np.float32)
    ref = kernels.layernorm(x, gamma, beta, 1, eps, in_scale, out_scale)
    return Case(f"layernorm {outer}x{n}", "layernorm",
                f"o2g_layernorm({{in0}}, {{in1}}, {{in2}}, {{out}}, {outer}, {n}, {c_float(eps)}, {c_float(in_scale)}, "
                f"{c_float(out_scale)});", [x, gamma, beta], ref, {"elem": x.size}, tol=LIBM)


def reduce_case(rng, outer, axis_len, inner, kind, in_scale=0.03, out_scale=None) -> Case:
    """The table's own NumPy semantics (cpu.Reduce.run) as the reference; max/min keep the input's scale."""
    out_scale = out_scale or (in_scale if kind in ("max", "min") else 0.05 if kind != "l2" else 0.5)
    x = i8(rng, (outer, axis_len, inner))
    [ref] = cpu.Reduce(kind, 1, 2, in_scale, out_scale).run([x], [(outer, inner)])
    k = cpu.float_ops.REDUCE_KINDS.index(kind)
    return Case(f"reduce {kind} {outer}x{axis_len}x{inner}", "reduce",
                f"o2g_reduce({{in0}}, {{out}}, {outer}, {axis_len}, {inner}, {k}, {c_float(in_scale)}, "
                f"{c_float(out_scale)});", [x], ref, {"elem": x.size})


def recurrent_case(rng, cell, seq, batch, hidden, directions=1, reverse=False, linear_before_reset=False,
                   p_scale=0.05, y_scale=1 / 127, state_scale=0.02, wide=False) -> Case:
    """The table's own NumPy semantics (cpu.Recurrent.run) as the reference; Y, Y_h (and Y_c) written one
    after the other into the output region. `wide`: the projections are int32 accumulators (a full_C
    matmul's), at a scale that gives them the int8 case's range."""
    gates = cpu.recurrent.GATES[cell]
    p = i8(rng, (seq, batch, directions * gates * hidden))
    if wide:
        p = rng.integers(-2**20, 2**20, p.shape).astype(np.int32)
        p_scale = p_scale * 127 / 2**20
    r = (rng.standard_normal((directions, gates * hidden, hidden)) * 0.3).astype(np.float32)
    bias = (rng.standard_normal((directions, gates * hidden)) * 0.2).astype(np.float32)
    peephole = (rng.standard_normal((directions, 3 * hidden)) * 0.2).astype(np.float32)
    h0, c0 = ((rng.standard_normal((directions, batch, hidden)) * 0.5).astype(np.float32) for _ in range(2))
    lstm = cell == "lstm"
    params = cpu.Recurrent(cell, directions, reverse, linear_before_reset, p_scale, y_scale, state_scale,
                           state_scale if lstm else 0.0)
    inputs = [p, r, bias] + ([peephole, h0, c0] if lstm else [h0])
    shapes = [(seq, directions, batch, hidden)] + [(directions, batch, hidden)] * (3 if lstm else 2)
    outs = params.run(inputs, shapes[:3 if lstm else 2])
    n_y, n_h = outs[0].size, outs[1].size
    ins = ", ".join(f"{{in{k}}}" + (f", {int(wide)}" if k == 0 else "") for k in range(len(inputs)))
    ptrs = f"{{out}}, {{out}} + {n_y}" + (f", {{out}} + {n_y + n_h}" if lstm else "")
    shape = f"{seq}, {batch}, {hidden}, {directions}, {int(reverse)}"
    tail = f"{c_float(p_scale)}, {c_float(y_scale)}, {c_float(state_scale)}" + (f", {c_float(state_scale)}" if lstm else "")
    extra = "" if lstm else f"{int(linear_before_reset)}, "
    name = f"{cell} {seq}x{batch}x{hidden} dirs={directions}{' reverse' if reverse else ''}" + \
        (" linear_before_reset" if linear_before_reset else "") + (" int32 projections" if wide else "")
    return Case(name, cell, f"o2g_{cell}({ins}, {ptrs}, {shape}, {extra}{tail});", inputs,
                np.concatenate([o.reshape(-1) for o in outs]),
                {"elem": n_y, "MAC": seq * batch * directions * gates * hidden * hidden}, tol=RECURRENCE)


def float_conv_case(rng, n, h, w, c, oc, k, s, p, groups=1, d=(1, 1), bias=True, relu=False, in_scale=0.02,
                    out_scale=None, off=0, oo=0) -> Case:
    """A layer kept float (--keep-float): the table's own NumPy semantics (cpu.FloatConv.run) as the reference;
    weights N(0, 1/sqrt(K)), so the outputs span the int8 range at out_scale (a little saturates)."""
    kernel, strides, pads = (k, k) if isinstance(k, int) else k, (s, s), (p, p, p, p) if isinstance(p, int) else p
    out = (out_dims(h, kernel[0], s, pads[0], pads[2], d[0]), out_dims(w, kernel[1], s, pads[1], pads[3], d[1]))
    depth = kernel[0] * kernel[1] * (c // groups)
    x = i8(rng, (n, h, w, c))
    wt = (rng.standard_normal((kernel[0], kernel[1], c // groups, oc)) / np.sqrt(depth)).astype(np.float32)
    b = (rng.standard_normal(oc) * 0.1).astype(np.float32)
    out_scale = out_scale or in_scale * 40 / 127
    params = cpu.FloatConv(cpu.Window(kernel, strides, pads, d, out), groups, in_scale, out_scale, relu)
    [ref] = params.run([x, wt] + ([b] if bias else []), [(n, out[0], out[1], oc)])
    inside = (taps_inside(h, kernel[0], s, pads[0], d[0], out[0]) * taps_inside(w, kernel[1], s, pads[1], d[1], out[1]))
    return Case(f"float_conv {h}x{w}x{c}->{oc} k{kernel[0]}x{kernel[1]} s{s}" + (f" g{groups}" if groups > 1 else "")
                + (f" d{d[0]}" if d != (1, 1) else ""), "float_conv",
                f"o2g_float_conv({{in0}}, {{in1}}, {'{in2}' if bias else 'NULL'}, {{out}}, {n}, {h}, {w}, {c}, "
                f"{window_c(kernel, strides, pads, d, out)}, {groups}, {oc}, {c_float(in_scale)}, "
                f"{c_float(out_scale)}, {int(relu)});", [x, wt, b], ref,
                {"elem": ref.size, "MAC": n * inside * (c // groups) * oc, "pixel": n * out[0] * out[1]}, (off, 0, 0), oo)


def taps_inside(size, kernel, stride, pad, dilation, out) -> int:
    """Window taps of one axis, over its `out` positions, inside the input (o2g_float_conv skips the rest)."""
    return sum(1 for o in range(out) for t in range(kernel) if 0 <= o * stride + t * dilation - pad < size)


def bench_cases(seed: int = 0) -> list[Case]:
    """A few representative sizes per kernel (shapes of the models the project compiles)."""
    r = np.random.default_rng(seed)
    return [
        quantize_case(r, 4096), quantize_case(r, 150528),
        quantize_nhwc_case(r, 1, 3, 224, 224), quantize_nhwc_case(r, 1, 1, 28, 28), quantize_nhwc_case(r, 1, 16, 32, 32),
        dequantize_case(r, 4096), dequantize_nchw_case(r, 1, 3, 32, 32), dequantize_nchw_case(r, 1, 16, 14, 14),
        transpose_case(r, (1, 28, 28, 64), (0, 3, 1, 2)), transpose_case(r, (1, 64, 28, 28), (0, 2, 3, 1)),
        transpose_case(r, (1, 28, 28, 2, 58), (0, 1, 2, 4, 3)), transpose_case(r, (4, 49, 8, 32), (0, 2, 1, 3)),
        windowed("im2col", r, 1, 28, 28, 32, 3, 1, 1), windowed("im2col", r, 1, 56, 56, 3, 7, 2, 3),
        windowed("maxpool", r, 1, 56, 56, 64, 3, 2, 1), windowed("maxpool", r, 1, 28, 28, 32, 2, 2, 0),
        windowed("avgpool", r, 1, 28, 28, 64, 3, 1, 1), windowed("avgpool", r, 1, 14, 14, 128, 2, 2, 0),
        clip_case(r, 65536, 0, 127), clip_case(r, 65536, -50, 60), clip_case(r, 1000, -20, 127),
        softmax_case(r, 1, 1000, 1), softmax_case(r, 32, 64, 1), softmax_case(r, 1, 10, 64),
        gather_case(r, 1, 1000, 64, 128), gather_case(r, 784, 64, 1, 32),
        remap_case(r, (1, 28, 28, 64), [[0], pad_map(28, 1, 1), pad_map(28, 1, 1), list(range(64))], 0, "pad"),
        remap_case(r, (1, 28, 28, 128), [[0], list(range(28)), list(range(28)), list(range(32, 96))], 0, "slice C"),
        remap_case(r, (1, 56, 56, 32), [[0], list(range(0, 56, 2)), list(range(0, 56, 2)), list(range(32))], 0,
                   "stride 2"),
        remap_case(r, (1, 14, 14, 64), [[0], [i // 2 for i in range(28)], [i // 2 for i in range(28)],
                                        list(range(64))], 0, "nearest 2x"),
        remap_case(r, (1, 64, 28, 28), [[0], list(range(64)), list(range(1, 27)), list(range(1, 27))], 0, "crop NCHW"),
        concat_case(r, 784, 32, 1, 96, 32, 0.02, 0.02), concat_case(r, 784, 32, 1, 96, 32, 0.02, 0.03),
        concat_case(r, 1, 64, 784, 128, 64, 0.02, 0.02),
        resize_case(r, (1, 14, 14, 64), (1, 28, 28, 64), (1, 2)), resize_case(r, (1, 8, 16, 16), (1, 8, 32, 32), (2, 3)),
        cubic_resize_case(r, (1, 14, 14, 64), (1, 28, 28, 64), (1, 2), onnx_shape=(1, 64, 14, 14)),
        cubic_resize_case(r, (1, 8, 16, 16), (1, 8, 32, 32), (2, 3)),
        lut_case(r, 65536), lut_case(r, 1000),
        binary_case(r, "add", (1, 28, 28, 64), (1, 28, 28, 64)),
        binary_case(r, "mul", (1, 28, 28, 64), (1, 1, 1, 64), what="(SE scale)"),
        binary_case(r, "mul", (1, 28, 28, 64), (1,), b_float=True, what="(scalar)"),
        binary_case(r, "add", (1, 28, 28, 64), (64,), b_float=True, relu=True, what="(bias)"),
        binary_case(r, "div", (1, 28, 28, 64), (1, 28, 28, 1)),
        binary_case(r, "max", (1, 64, 28, 28), (1, 64, 28, 28)),
        binary_case(r, "prelu", (1, 28, 28, 64), (64,), b_float=True),
        dwconv_case(r, 1, 28, 28, 64, 3, 1, 1), dwconv_case(r, 1, 14, 14, 128, 5, 2, 2),
        dwconv_case(r, 1, 56, 56, 16, 3, 2, 1),
        affine_case(r, 784, 64, 1), affine_case(r, 1, 64, 784), affine_case(r, 784, 32, 1, x_row=96, relu=True),
        lrn_case(r, 784, 64, 1), lrn_case(r, 1, 64, 196),
        layernorm_case(r, 128, 256), layernorm_case(r, 16, 768),
        reduce_case(r, 1, 196, 64, "mean"), reduce_case(r, 64, 196, 1, "mean"), reduce_case(r, 128, 256, 1, "max"),
        recurrent_case(r, "lstm", 24, 1, 128, 2, wide=True), recurrent_case(r, "gru", 24, 1, 128, 2, wide=True),
        float_conv_case(r, 1, 28, 28, 32, 32, 3, 1, 1), float_conv_case(r, 1, 14, 14, 64, 64, 3, 1, 1, groups=64),
        float_conv_case(r, 1, 1, 1, 512, 10, 1, 1, 0),  # a classifier kept float: a 512 x 10 matmul
    ]


# --- build and run --------------------------------------------------------------------------------------

DRIVER = r"""/* bench_spike.py driver: one measured call per case */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "o2g_runtime.h"

extern const unsigned char o2g_bench_blob[];
static int8_t out_area[@OUT_BYTES@] __attribute__((aligned(64)));

static uint64_t counter(void)
{
#if defined(__riscv)
    uint64_t v;
    __asm__ __volatile__("csrr %0, instret" : "=r"(v));
    return v;
#else
    return 0;
#endif
}

static uint64_t fnv(const int8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    size_t i;
    for (i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

static void prefill(int8_t *out, const unsigned char *pre, size_t n)
{
    memset(out - @SLACK@, @GUARD@, n + 2 * @SLACK@);
    if (pre != NULL)
        memcpy(out, pre, n);
}

static void finish(int index, uint64_t instret, const int8_t *out, size_t n, int dump)
{
    size_t j, bad = 0;
    for (j = 1; j <= @SLACK@; j++)
        bad += (out[-(long)j] != (int8_t)@GUARD@) + (out[n - 1 + j] != (int8_t)@GUARD@);
    printf("case %d %llu %016llx %lu\n", index, (unsigned long long)instret, (unsigned long long)fnv(out, n),
           (unsigned long)bad);
    for (j = 0; dump && j < n; j++) {
        if (j % 48 == 0)
            printf("%sdata %d:", j ? "\n" : "", index);
        printf(" %02x", (unsigned)(uint8_t)out[j]);
    }
    if (dump && n)
        printf("\n");
}

int main(void)
{
    uint64_t t0, t1, empty;
    t0 = counter();
    t1 = counter();
    empty = t1 - t0;
@CASES@
    printf("done\n");
    return 0;
}
"""

BLOB_S = """    .section .rodata
    .balign 64
    .globl o2g_bench_blob
o2g_bench_blob:
    .incbin "blob.bin"
"""


def makefile_vars(path: Path = RUNTIME / "templates" / "Makefile.in") -> dict[str, str]:
    """The generated Makefile's `NAME ?= value` settings with $(NAME) expanded (what `make riscv` uses)."""
    text = path.read_text().replace("\\\n", " ")
    raw = dict(re.findall(r"^([A-Z_]+)\s*\?=[ \t]*(.*)$", text, re.M))

    def expand(value: str) -> str:
        return re.sub(r"\$\((\w+)\)", lambda m: expand(raw.get(m.group(1), "")), value)
    return {name: expand(value) for name, value in raw.items()}


def c_type(a: np.ndarray) -> str:
    return {np.dtype(np.float32): "const float *", np.dtype(np.int8): "const int8_t *",
            np.dtype(np.int64): "const int64_t *", np.dtype(np.int32): "const int32_t *"}[a.dtype]


def write_driver(cases: list[Case], work: Path, dump: bool) -> None:
    blob, body, out_bytes = bytearray(), [], 0
    for k, case in enumerate(cases):
        ptrs = {}
        for j, a in enumerate(case.inputs):
            off = case.offsets[j] if j < len(case.offsets) else 0
            blob += bytes((-len(blob)) % 64 + off)
            ptrs[f"in{j}"] = f"(({c_type(a)})(const void *)(o2g_bench_blob + {len(blob)}))"
            blob += np.ascontiguousarray(a).tobytes()
        n = case.expected.size
        pre = "NULL"
        if case.prefill is not None:
            blob += bytes((-len(blob)) % 64)
            pre = f"o2g_bench_blob + {len(blob)}"
            blob += case.prefill.astype(np.int8).tobytes()
        out_bytes = max(out_bytes, n)
        out = f"(out_area + {OUT_SLACK + case.out_offset})"
        ptrs["out"] = out
        call = re.sub(r"\{(in\d+|out)\}", lambda m: ptrs[m.group(1)], case.call)
        body += [f"    /* {k}: {case.name} */", f"    prefill({out}, {pre}, {n});",
                 "    t0 = counter();", f"    {call}", "    t1 = counter();",
                 f"    finish({k}, t1 - t0 - empty, {out}, {n}, {int(dump)});"]
    text = (DRIVER.replace("@OUT_BYTES@", str(out_bytes + 3 * OUT_SLACK + 64)).replace("@SLACK@", str(OUT_SLACK))
            .replace("@GUARD@", str(GUARD)).replace("@CASES@", "\n".join(body)))
    (work / "driver.c").write_text(text)
    (work / "blob.bin").write_bytes(bytes(blob))
    (work / "blob.S").write_text(BLOB_S)


def build(cases: list[Case], work: Path, target: str = "riscv", cross: str = "riscv64-unknown-elf-",
          runtime_c: Path | None = None, dump: bool = False, cc: str = "cc") -> Path:
    """The driver for `target` ("riscv": the Makefile's riscv flags; "host": its host flags)."""
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(runtime_c or RUNTIME / "o2g_runtime.c", work / "o2g_runtime.c")
    runtime_h = (runtime_c.with_suffix(".h") if runtime_c and runtime_c.with_suffix(".h").exists()
                 else RUNTIME / "o2g_runtime.h")
    shutil.copy(runtime_h, work / "o2g_runtime.h")
    shutil.copy(RUNTIME / "o2g_htif.c", work / "o2g_htif.c")
    write_driver(cases, work, dump)
    v = makefile_vars()
    if target == "riscv":
        cmd = [f"{cross}gcc", *v["RISCV_CFLAGS"].split(), *v["PICOLIBC_SPECS"].split(), "-I.", "-o", "bench-riscv",
               "driver.c", "o2g_runtime.c", "o2g_htif.c", "blob.S", *v["RISCV_MEMORY"].split(), "-lm"]
        exe = work / "bench-riscv"
    else:
        cmd = [cc, "-std=gnu99", *v["WARNINGS"].split(), "-DO2G_HOST=1", *v["CFLAGS"].split(), "-I.", "-o",
               "bench-host", "driver.c", "o2g_runtime.c", "blob.S", "-lm"]
        exe = work / "bench-host"
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"build failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return exe


@dataclasses.dataclass
class Result:
    case: Case
    instret: int
    ok: bool          # output within tolerance of NumPy and guard bytes intact
    detail: str = ""


def fnv(data: bytes) -> int:
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def compare(case: Case, got: np.ndarray) -> tuple[bool, str]:
    """(ok, why not) for a kernel's dumped output against NumPy, within the kernel's stated tolerance."""
    want = case.expected.astype(np.int8).reshape(-1)
    if got.size != want.size:
        return False, f"{got.size} bytes dumped, {want.size} expected"
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    why = case.tol.failure(int(diff.max(initial=0)), int(np.count_nonzero(diff)), diff.size)
    if why is None:
        return True, ""
    first = int(np.argmax(diff > 0))
    return False, f"{why}; first difference at {first}: got {int(got[first])} want {int(want[first])}"


def run(exe: Path, cases: list[Case], cmd_prefix: list[str], timeout: float = 3600) -> list[Result]:
    """Runs the driver; checks each output (hash, or the dumped bytes when built with dump=True)."""
    proc = subprocess.run([*cmd_prefix, str(exe)], capture_output=True, text=True, timeout=timeout,
                          cwd=exe.parent)
    text = proc.stdout
    if proc.returncode != 0 or "done" not in text.splitlines():
        raise RuntimeError(f"{exe.name} failed (rc {proc.returncode}):\n{text[-3000:]}{proc.stderr[-2000:]}")
    data: dict[int, list[int]] = {}
    for index, values in re.findall(r"^data (\d+):((?: [0-9a-f]{2})+)$", text, re.M):
        data.setdefault(int(index), []).extend(int(v, 16) for v in values.split())
    results = []
    for index, instret, digest, guard in re.findall(r"^case (\d+) (\d+) ([0-9a-f]{16}) (\d+)$", text, re.M):
        case = cases[int(index)]
        want = case.expected.astype(np.int8).reshape(-1)
        detail = ""
        if int(index) in data:
            ok, detail = compare(case, np.asarray(data[int(index)], np.uint8).view(np.int8))
        else:
            ok = int(digest, 16) == fnv(want.tobytes())
            if not ok:
                detail = "hash differs" + (" (kernels with a tolerance may differ: rerun with --check)"
                                           if case.tol != EXACT else "")
        if int(guard):
            ok, detail = False, f"{guard} guard bytes around the output overwritten; " + detail
        results.append(Result(case, int(instret), ok, detail))
    if len(results) != len(cases):
        raise RuntimeError(f"expected {len(cases)} results, got {len(results)}:\n{text[-3000:]}")
    return results


def measure(cases: list[Case], work: Path, spike: str = "spike", cross: str = "riscv64-unknown-elf-",
            runtime_c: Path | None = None, dump: bool = False) -> list[Result]:
    return run(build(cases, work, "riscv", cross, runtime_c, dump), cases, [spike])


def missing_tools(cross: str = "riscv64-unknown-elf-", spike: str = "spike") -> list[str]:
    return [t for t in (f"{cross}gcc", spike, "dtc") if shutil.which(t) is None]


INSTALL_HINT = ("apt-get install gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf device-tree-compiler; "
                "pip install spike==0.0.5.dev20")


# (n, h, w, c, oc, k, s, p, groups): dense convs (3x3, 1x1, 5x5 strided), depthwise convs, matmuls of I rows
FLOAT_CONV_FIT = [(1, 28, 28, 16, 16, 3, 1, 1, 1), (1, 14, 14, 64, 64, 3, 1, 1, 1), (1, 7, 7, 128, 128, 3, 1, 1, 1),
                  (1, 14, 14, 32, 96, 1, 1, 0, 1), (1, 28, 28, 3, 16, 5, 2, 2, 1), (1, 8, 8, 256, 32, 3, 2, 1, 1),
                  (1, 28, 28, 32, 32, 3, 1, 1, 32), (1, 14, 14, 128, 128, 3, 2, 1, 128),
                  (1, 7, 7, 256, 256, 5, 1, 2, 256),
                  (1, 1, 1, 512, 10, 1, 1, 0, 1), (1, 1, 16, 256, 256, 1, 1, 0, 1), (1, 1, 49, 64, 1000, 1, 1, 0, 1),
                  (1, 1, 1, 2048, 100, 1, 1, 0, 1)]


def float_conv_counts(work: Path, spike: str, cross: str, geometries=FLOAT_CONV_FIT) -> list[tuple[Case, int]]:
    """Each geometry's o2g_float_conv call on Spike (outputs checked against cpu.FloatConv.run): its case and
    the instructions it retired."""
    r = np.random.default_rng(0)
    cases = [float_conv_case(r, *g[:8], groups=g[8]) for g in geometries]
    results = measure(cases, work, spike, cross)
    bad = [res.case.name for res in results if not res.ok]
    if bad:
        raise SystemExit(f"wrong outputs: {', '.join(bad)}")
    return [(res.case, res.instret) for res in results]


def fit_float_conv(work: Path, spike: str, cross: str) -> None:
    """o2g_float_conv on Spike over FLOAT_CONV_FIT: instructions = a * MACs inside the input (a_dw for one input
    channel per group: depthwise) + b * outputs + c * output pixels, by relative least squares (each geometry
    counts alike); prints the constants for onnx2gemmini/cpu/float_layers.py and each geometry's error."""
    counted = float_conv_counts(work, spike, cross)
    depthwise = [g[3] // g[8] == 1 for g in FLOAT_CONV_FIT]
    terms = np.array([[0 if dw else case.units["MAC"], case.units["MAC"] if dw else 0, case.units["elem"],
                       case.units["pixel"]] for (case, _), dw in zip(counted, depthwise)], np.float64)
    counts = np.array([n for _, n in counted], np.float64)
    coef, *_ = np.linalg.lstsq(terms / counts[:, None], np.ones(len(counts)), rcond=None)
    print(f"INSTRUCTIONS_PER_MAC = {coef[0]:.2f}\nINSTRUCTIONS_PER_DEPTHWISE_MAC = {coef[1]:.2f}\n"
          f"INSTRUCTIONS_PER_OUTPUT = {coef[2]:.2f}\nINSTRUCTIONS_PER_PIXEL = {coef[3]:.2f}")
    for (case, _), t, n in zip(counted, terms, counts):
        print(f"  {case.name:44} {int(n):>12,} instructions, fit {(t @ coef) / n - 1:+.1%}")


# --- report ----------------------------------------------------------------------------------------------

def print_table(results: list[Result], baseline: list[Result] | None = None) -> None:
    width = max(len(r.case.name) for r in results)
    head = f"{'case':<{width}} {'instructions':>13} {'per element':>12} {'other':>12}"
    if baseline:
        head += f" {'before':>13} {'before/elem':>12} {'speed-up':>8}"
    print(head)
    for k, r in enumerate(results):
        elem = max(r.case.units["elem"], 1)
        other = ", ".join(f"{r.instret / n:.2f}/{u}" for u, n in r.case.units.items() if u != "elem" and n)
        line = f"{r.case.name:<{width}} {r.instret:>13,} {r.instret / elem:>12.2f} {other:>12}"
        if baseline and baseline[k] is None:
            line += f" {'(new)':>13}"
        elif baseline:
            b = baseline[k]
            line += f" {b.instret:>13,} {b.instret / elem:>12.2f} {b.instret / max(r.instret, 1):>7.1f}x"
            if not b.ok:
                line += "  (before: WRONG)"
        if not r.ok:
            line += f"  WRONG: {r.detail}"
        print(line)


def print_summary(results: list[Result], baseline: list[Result] | None = None) -> None:
    """Per kernel: the instructions per output element of its largest case."""
    print("\nper kernel, largest case (instructions per output element):")
    seen: dict[str, int] = {}
    for k, r in enumerate(results):
        if r.case.kernel not in seen or r.case.units["elem"] > results[seen[r.case.kernel]].case.units["elem"]:
            seen[r.case.kernel] = k
    for kernel, k in seen.items():
        r = results[k]
        elem = max(r.case.units["elem"], 1)
        line = f"  o2g_{kernel:<28} {r.instret / elem:8.2f}"
        if baseline and baseline[k] is not None:
            line += f"   before {baseline[k].instret / elem:8.2f}"
        print(line + f"   ({r.case.name})")


def baseline_from_rev(rev: str, work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    for name in ("o2g_runtime.c", "o2g_runtime.h"):
        text = subprocess.run(["git", "show", f"{rev}:onnx2gemmini/runtime/{name}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
        (work / name).write_text(text)
    return work / "o2g_runtime.c"


# --- model mode ------------------------------------------------------------------------------------------

def model_steps(out: Path) -> tuple[Path, list[dict]]:
    c_dir = out / "c" if (out / "c" / "Makefile").exists() else out
    if not (c_dir / "Makefile").exists():
        raise SystemExit(f"{out}: no Makefile (give the compiler's output folder, e.g. onnx2gemmini m.onnx -o OUT)")
    report = out / "report.json" if (out / "report.json").exists() else c_dir.parent / "report.json"
    layers = json.loads(report.read_text())["layers"] if report.exists() else []
    return c_dir, layers


def model_counts(c_dir: Path, work: Path, runtime_c: Path | None, spike: str, spike_flags: list[str], target: str,
                 make_vars: list[str], timeout: float) -> tuple[list[tuple[int, str, int]], str]:
    """Builds a copy of c_dir (with another o2g_runtime.c/.h when runtime_c is given), runs its self-test on
    Spike, returns [(layer index, name, read_cycles)] and the program's output."""
    exe = {"riscv": "model-riscv", "baremetal": "model-baremetal"}[target]
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(c_dir, work)
    if runtime_c is not None:
        shutil.copy(runtime_c, work / "o2g_runtime.c")
        shutil.copy(runtime_c.with_suffix(".h"), work / "o2g_runtime.h")
    for stale in ("model-riscv", "model-baremetal"):
        (work / stale).unlink(missing_ok=True)
    proc = subprocess.run(["make", "-C", str(work), exe, *make_vars], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"make {exe} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    proc = subprocess.run([spike, *spike_flags, exe], cwd=work, capture_output=True, text=True, timeout=timeout)
    rows = [(int(i), name, int(c)) for i, name, c in re.findall(r"^layer (\d+) (.*): (\d+) cycles$", proc.stdout, re.M)]
    if not rows:
        raise SystemExit(f"no per-layer counts in the output (rc {proc.returncode}):\n{proc.stdout[-2000:]}"
                         f"{proc.stderr[-2000:]}")
    return rows, proc.stdout


def run_model(out: Path, spike: str, spike_flags: list[str], target: str, make_vars: list[str], timeout: float,
              work: Path, as_emitted: bool, baseline: Path | None) -> None:
    c_dir, layers = model_steps(out)
    runtime = None if as_emitted else RUNTIME / "o2g_runtime.c"
    rows, text = model_counts(c_dir, work / "model", runtime, spike, spike_flags, target, make_vars, timeout)
    before = None
    if baseline is not None:
        before, _ = model_counts(c_dir, work / "model-baseline", baseline, spike, spike_flags, target, make_vars, timeout)
    total = sum(c for _, _, c in rows)
    cpu_total, cpu_before, by_call = 0, 0, {}
    head = f"{'#':>4} {'step':<44} {'call':<24} {'instructions':>14} {'share':>6}"
    print(head + (f" {'before':>14} {'speed-up':>8}" if before else ""))
    for k, (i, name, count) in enumerate(rows):
        layer = layers[i] if i < len(layers) else {}
        call, on = layer.get("call", "?"), layer.get("target", "?")
        line = f"{i:>4} {name[:44]:<44} {call[:24]:<24} {count:>14,} {count / max(total, 1):>6.1%}"
        if before:
            line += f" {before[k][2]:>14,} {before[k][2] / max(count, 1):>7.1f}x"
        print(line)
        if on == "cpu":
            cpu_total += count
            cpu_before += before[k][2] if before else 0
        by_call[call] = by_call.get(call, 0) + count
    print(f"\ntotal {total:,} instructions (Spike: read_cycles() = instructions retired); CPU steps {cpu_total:,} "
          f"({cpu_total / max(total, 1):.1%})" + (f"; CPU steps before {cpu_before:,}" if before else ""))
    for call, count in sorted(by_call.items(), key=lambda kv: -kv[1]):
        print(f"  {call:<30} {count:>14,}")
    if target == "riscv":
        print("Gemmini steps ran on the bundled host gemmini.h (a C emulation on the core): their counts are "
              "not Gemmini's cost. Use --target baremetal with Gemmini's Spike extension for those.")
    print("runtime: " + ("the copy in " + str(c_dir) if as_emitted else "this checkout's onnx2gemmini/runtime"))
    verdict = re.search(r"^(PASS|FAIL).*$", text, re.M)
    print(verdict.group(0) if verdict else "(no PASS/FAIL line)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--cross", default="riscv64-unknown-elf-")
    parser.add_argument("--spike", default="spike")
    parser.add_argument("--only", help="comma-separated kernel names (substrings) to measure")
    parser.add_argument("--baseline", type=Path, help="another o2g_runtime.c (its .h beside it) to compare with")
    parser.add_argument("--baseline-rev", help="compare with o2g_runtime.c/.h of this git revision")
    parser.add_argument("--check", action="store_true", help="dump and compare every output byte (slower)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", type=Path, help="build in this directory and keep it")
    parser.add_argument("--model", type=Path, help="a compiled output folder: per-step counts of its self-test")
    parser.add_argument("--target", choices=("riscv", "baremetal"), default="riscv", help="with --model")
    parser.add_argument("--make-var", action="append", default=[], help="with --model: NAME=VALUE for make")
    parser.add_argument("--spike-flags", default="", help="with --model: extra Spike flags")
    parser.add_argument("--as-emitted", action="store_true",
                        help="with --model: build with the runtime copy in OUT/c instead of this checkout's")
    parser.add_argument("--timeout", type=float, default=7200)
    parser.add_argument("--dw", action="store_true", help="run scripts/measure_cpu_kernels.py's depthwise fit")
    parser.add_argument("--cost-table", action="store_true",
                        help="check the compiler's CPU cost table against Spike (measure_cpu_kernels.py --check)")
    parser.add_argument("--float-conv", action="store_true",
                        help="fit o2g_float_conv's instructions (a layer kept float): cpu/float_layers.py's constants")
    args = parser.parse_args()

    missing = missing_tools(args.cross, args.spike)
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: {INSTALL_HINT}")
    if args.model:
        work = args.keep or Path(tempfile.mkdtemp(prefix="o2g-bench-model-"))
        try:
            baseline = args.baseline or (baseline_from_rev(args.baseline_rev, work / "baseline-src")
                                         if args.baseline_rev else None)
            run_model(args.model, args.spike, args.spike_flags.split(), args.target, args.make_var, args.timeout,
                      work, args.as_emitted, baseline)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        return
    if args.float_conv:
        work = args.keep or Path(tempfile.mkdtemp(prefix="o2g-bench-float-conv-"))
        try:
            fit_float_conv(work, args.spike, args.cross)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        return
    if args.cost_table:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "measure_cpu_kernels.py"), "--check", "--cross",
                        args.cross, "--spike", args.spike], check=True)
        return
    if args.dw:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "measure_cpu_kernels.py"), "--cross", args.cross,
                        "--spike", args.spike], check=True)
        return
    cases = bench_cases()
    if args.only:
        keys = args.only.split(",")
        cases = [c for c in cases if any(k in c.kernel for k in keys)]
    work = args.keep or Path(tempfile.mkdtemp(prefix="o2g-bench-spike-"))
    try:
        results = measure(cases, work / "now", args.spike, args.cross, dump=args.check)
        baseline = None
        if args.baseline or args.baseline_rev:
            old = args.baseline or baseline_from_rev(args.baseline_rev, work / "baseline-src")
            declared = set(re.findall(r"^void o2g_(\w+)\(", old.with_suffix(".h").read_text(), re.M))
            known = [c for c in cases if c.kernel in declared]  # kernels the older runtime has
            measured = iter(measure(known, work / "before", args.spike, args.cross, old, dump=args.check))
            baseline = [next(measured) if c.kernel in declared else None for c in cases]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print_table(results, baseline)
    print_summary(results, baseline)
    print("\nInstructions retired on Spike (one per cycle there), per output element; not a real core's cycles.")
    if args.json:
        rows = [{"case": r.case.name, "kernel": r.case.kernel, "instret": r.instret, "ok": r.ok,
                 **{f"per_{u}": r.instret / n for u, n in r.case.units.items() if n},
                 **({"before_instret": baseline[k].instret} if baseline and baseline[k] else {})}
                for k, r in enumerate(results)]
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    if not all(r.ok for r in results):
        raise SystemExit("some kernels computed wrong results (see WRONG above)")


if __name__ == "__main__":
    main()
