"""The C runtime's CPU kernels (runtime/o2g_runtime.c) against the NumPy reference kernels (kernels.py), byte for
byte (softmax, LRN and LayerNorm within 1 LSB), on the shapes and data that reach each code path: word-wide
and byte-wise moves, mutually misaligned buffers, tables and direct loops, ties, saturation, NaN and
infinities. Built and run on this host (the generated Makefile's host flags, -Wall -Wextra -Werror, plus
-ffast-math and -O0 variants) and, when the tools are installed, for rv64gc on Spike, where the
quantization runs as fdiv.s/fcvt.w.s with static rne rounding. The cases and the driver are
scripts/bench_spike.py's."""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_spike", ROOT / "scripts" / "bench_spike.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_spike", module)  # dataclasses look their module up
    spec.loader.exec_module(sys.modules["bench_spike"])
    return sys.modules["bench_spike"]


B = _bench()


def pads_of(p):
    return (p, p, p, p) if isinstance(p, int) else p


def kernel_cases() -> list:
    r = np.random.default_rng(1)
    c = []
    # quantize: ties, saturation, NaN, infinities, signed zeros; every tail length; misaligned buffers
    for n, off, oo in [(0, 0, 0), (1, 0, 1), (7, 4, 3), (8, 0, 0), (9, 4, 7), (100, 8, 5), (1000, 0, 0)]:
        c.append(B.quantize_case(r, n, 0.0123, special=n >= 12, off=off, oo=oo))
    c.append(B.quantize_case(r, 333, 1.0, special=True))  # scale 1: values are ties at k + 0.5
    for shape, oo in [((1, 3, 5, 7), 0), ((2, 3, 4, 4), 1), ((1, 1, 3, 3), 0), ((1, 5, 3, 3), 3),
                      ((1, 16, 2, 3), 0), ((2, 4, 1, 1), 0), ((1, 3, 1, 3), 2), ((2, 2, 3, 5), 0)]:
        c.append(B.quantize_nhwc_case(r, *shape, scale=0.0201, special=True, oo=oo))
    for n, off, oo in [(0, 0, 0), (5, 1, 4), (8, 0, 0), (77, 3, 0)]:
        c.append(B.dequantize_case(r, n, 0.0123, off, oo))
    for shape in [(1, 3, 4, 5), (2, 1, 3, 3), (1, 5, 2, 3), (2, 3, 1, 1)]:
        c.append(B.dequantize_nchw_case(r, *shape))
    # transpose: copies of contiguous rows, 8x8 register blocks (aligned or not), interleaves, gathers
    for shape, perm, off, oo in [((3, 5), (1, 0), 0, 0), ((8, 16), (1, 0), 0, 0), ((16, 24), (1, 0), 0, 0),
                                 ((16, 24), (1, 0), 1, 0), ((16, 24), (1, 0), 0, 3), ((13, 17), (1, 0), 0, 0),
                                 ((20, 37), (1, 0), 0, 0), ((37, 20), (1, 0), 0, 0), ((1, 8, 8, 16), (0, 3, 1, 2), 0, 0),
                                 ((1, 16, 8, 8), (0, 2, 3, 1), 0, 0), ((2, 9, 10, 3), (0, 3, 1, 2), 0, 0),
                                 ((1, 4, 4, 2, 5), (0, 1, 2, 4, 3), 0, 0), ((1, 3, 3, 3, 7), (0, 1, 2, 4, 3), 0, 1),
                                 ((1, 2, 2, 4, 6), (0, 1, 2, 4, 3), 0, 0), ((1, 2, 2, 4, 5), (0, 1, 2, 4, 3), 0, 0),
                                 ((1, 2, 2, 5, 3), (0, 1, 2, 4, 3), 0, 0), ((5,), (0,), 0, 0), ((1, 1, 1), (2, 1, 0), 0, 0),
                                 ((4, 6, 40), (1, 0, 2), 0, 0), ((4, 6, 40), (1, 0, 2), 1, 2), ((2, 3, 4, 5), (3, 1, 0, 2), 0, 0),
                                 ((2, 3, 4, 5), (2, 3, 0, 1), 0, 0), ((3, 1, 4, 1, 2), (4, 2, 0, 3, 1), 0, 0)]:
        c.append(B.transpose_case(r, shape, perm, off, oo))
    c.append(B.transpose_case(r, (24, 19), (1, 0)))
    c.append(B.transpose_case(r, (19, 24), (1, 0)))
    c.append(B.transpose_case(r, (1, 0, 3), (2, 1, 0)))  # empty
    # windows
    geoms = [(1, 5, 5, 3, 3, 1, 1, (1, 1)), (2, 6, 7, 4, 3, 2, 1, (1, 1)), (1, 7, 7, 8, (3, 2), (2, 1), (0, 1, 2, 0), (1, 1)),
             (1, 9, 9, 8, 3, 2, 1, (1, 1)), (1, 8, 8, 16, 3, 1, 2, (2, 2)), (1, 4, 4, 1, 5, 1, 2, (1, 1)),
             (1, 6, 6, 13, 3, 1, 1, (1, 1)), (1, 10, 10, 24, 2, 2, 0, (1, 1)), (1, 5, 6, 9, 2, 1, (2, 2, 2, 2), (1, 1)),
             (1, 7, 5, 16, (1, 3), (1, 2), (0, 1, 0, 1), (1, 2))]
    for n, h, w, ch, k, s, p, d in geoms:
        c.append(B.windowed("im2col", r, n, h, w, ch, k, s, p, d))
        c.append(B.windowed("maxpool", r, n, h, w, ch, k, s, p, d))
        c.append(B.windowed("avgpool", r, n, h, w, ch, k, s, p, d, count_include_pad=0))
        c.append(B.windowed("avgpool", r, n, h, w, ch, k, s, p, d, count_include_pad=1))
    c.append(B.windowed("maxpool", r, 1, 9, 9, 16, 3, 2, 1, off=1))  # SWAR path refused: misaligned
    c.append(B.windowed("maxpool", r, 1, 9, 9, 16, 3, 2, 1, oo=4))
    c.append(B.windowed("im2col", r, 1, 12, 12, 40, 3, 1, 1, off=3, oo=5))
    # clip and lut
    for lo, hi, n, off, oo in [(0, 127, 1000, 0, 0), (0, 6, 1000, 0, 0), (3, 100, 1000, 0, 0), (5, 127, 999, 0, 0),
                               (-50, 60, 1000, 0, 0), (-128, 127, 100, 0, 0), (-128, 0, 1000, 0, 0), (0, 127, 1000, 3, 3),
                               (0, 127, 1000, 1, 0), (7, 9, 1000, 5, 2), (10, 3, 300, 0, 0),
                               (-20, 127, 63, 0, 0), (0, 0, 77, 0, 0), (127, 127, 80, 0, 0), (-128, -128, 80, 0, 0)]:
        c.append(B.clip_case(r, n, lo, hi, off, oo))
    for n, off, oo in [(0, 0, 0), (1, 0, 0), (15, 1, 2), (16, 0, 0), (17, 0, 5), (1000, 3, 0)]:
        c.append(B.lut_case(r, n, off, oo))
    for n, off, oo in [(0, 0, 0), (1, 0, 0), (3, 1, 4), (4, 0, 0), (1001, 3, 8)]:
        c.append(B.lut_f32_case(r, n, off, oo))
    for outer, part, inner, total, offset, scale, oo in [(1, 3, 40, 7, 4, None, 0), (2, 4, 5, 9, 0, 0.37, 4),
                                                         (3, 5, 1, 5, 0, None, 0), (1, 6, 7, 6, 0, 0.0123, 0)]:
        c.append(B.concat_f32_case(r, outer, part, inner, total, offset, scale, oo=oo))
    # softmax (exps buffered, or one per distinct value through a table; pairwise or in-order sums)
    for outer, n, inner in [(1, 10, 1), (2, 300, 1), (3, 5, 4), (1, 1000, 1), (2, 7, 3), (1, 129, 1), (1, 300, 2), (4, 1, 1)]:
        c.append(B.softmax_case(r, outer, n, inner))
    x_narrow = B.softmax_case(r, 2, 40, 1)
    xs = r.integers(-3, 4, size=(2, 40, 1)).astype(np.int8)  # few distinct values: the table path
    x_narrow.inputs = [xs]
    x_narrow.expected = B.kernels.softmax(xs, 1, 0.05, 1 / 127)
    c.append(x_narrow)
    # gather
    for outer, n, inner, count, off, oo in [(1, 10, 1, 7, 0, 0), (3, 7, 5, 4, 1, 2), (2, 50, 64, 9, 0, 0), (4, 3, 1, 0, 0, 0)]:
        c.append(B.gather_case(r, outer, n, inner, count, off, oo))
    # embedding lookups by int64 / int32 ids (negative, out of range), RoBERTa's position ids
    for outer, rows, inner, count, nbytes, off, oo in [(1, 30, 16, 9, 8, 0, 0), (2, 7, 5, 6, 4, 1, 3),
                                                       (1, 50, 1, 40, 8, 0, 0), (1, 4, 64, 0, 8, 0, 0)]:
        c.append(B.embedding_case(r, outer, rows, inner, count, nbytes, off, oo))
    for batch, seq, rows, inner, pad, nbytes in [(1, 12, 15, 8, 1, 8), (2, 7, 9, 5, 0, 4), (1, 20, 6, 3, 2, 8)]:
        c.append(B.position_embedding_case(r, batch, seq, rows, inner, pad, nbytes))
    for rows, row_len, nbytes, off, oo in [(6, 16, 8, 0, 0), (5, 7, 4, 1, 3), (1, 100, 8, 0, 0), (0, 4, 8, 0, 0)]:
        c.append(B.mask_rows_case(r, rows, row_len, nbytes, off, oo))
    # masked softmax: a constant keep table (one per call or repeated over leading axes; strided axis), and a
    # mask input (padding and causal, int64 and int32 ids, more keys than queries)
    for outer, n, inner, keep_shape in [(4, 6, 1, (6, 1)), (2, 40, 1, (2, 40, 1)), (3, 5, 4, (5, 4)),
                                        (2, 300, 1, (300, 1))]:
        c.append(B.softmax_masked_case(r, outer, n, inner, keep_shape))
    for batch, heads, queries, keys, form, nbytes in [(1, 2, 6, 6, "padding", 8), (2, 3, 5, 5, "causal", 8),
                                                      (2, 1, 3, 7, "causal", 4), (1, 1, 1, 300, "padding", 4),
                                                      (2, 2, 5, 5, "query_key", 8), (1, 1, 3, 6, "query_key", 4)]:
        c.append(B.softmax_input_mask_case(r, batch, heads, queries, keys, form, nbytes))
    # remap: pads, slices, strides, nearest upsampling, crops, many runs, padding along the last axis
    c += [B.remap_case(r, (1, 5, 5, 8), [[0], B.pad_map(5, 1, 2), B.pad_map(5, 2, 1), list(range(8))], -3, "pad"),
          B.remap_case(r, (1, 5, 5, 16), [[0], list(range(5)), list(range(5)), list(range(3, 11))], 0, "slice C"),
          B.remap_case(r, (1, 8, 8, 4), [[0], list(range(0, 8, 2)), list(range(1, 8, 3)), list(range(4))], 0, "stride"),
          B.remap_case(r, (1, 3, 3, 5), [[0], [i // 2 for i in range(6)], [i // 2 for i in range(6)], list(range(5))], 0,
                       "nearest"),
          B.remap_case(r, (1, 4, 9, 9), [[0], list(range(4)), list(range(1, 8)), list(range(1, 8))], 0, "crop", off=3),
          B.remap_case(r, (2, 3, 7), [[1, 0], [2, 0, 1], B.pad_map(7, 3, 2)], 5, "pad last"),
          B.remap_case(r, (2, 150, 2), [[0, 1], list(range(0, 150, 2)), [0, 1]], 0, "runs > 64"),
          B.remap_case(r, (2, 150), [[0, 1], list(range(0, 150, 2))], 0, "strided last"),
          B.remap_case(r, (2, 150), [[0, 1], [-1, 2, 3, 4, -1, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, -1]], 7, "mixed"),
          B.remap_case(r, (7,), [[6, 5, 4, -1, 0]], 1, "rank 1"),
          B.remap_case(r, (2, 3, 4), [[-1, 1], [0, 1, 2], [0, 1, 2, 3]], 9, "pad outer"),
          B.remap_case(r, (2, 3, 4), [[0, 1], [0, 1, 2], [0, 1, 2, 3]], 0, "identity")]
    # concat
    for outer, part, inner, total, offset, si, so, oo in [(5, 3, 1, 8, 2, 0.02, 0.02, 0), (5, 3, 1, 8, 2, 0.02, 0.03, 1),
                                                         (40, 16, 1, 40, 8, 0.02, 0.015, 0), (2, 64, 9, 128, 64, 0.02, 0.02, 3),
                                                         (1, 4, 5, 4, 0, 0.02, 0.02, 0), (3, 40, 7, 50, 10, 0.05, 0.02, 0)]:
        c.append(B.concat_case(r, outer, part, inner, total, offset, si, so, oo=oo))
    # linear resize: NHWC and NCHW images, one axis, three axes, downsampling
    for ins, outs, axes in [((1, 4, 5, 3), (1, 8, 10, 3), (1, 2)), ((1, 3, 4, 5), (1, 3, 8, 10), (2, 3)),
                            ((1, 4, 5, 3), (1, 7, 5, 3), (1,)), ((1, 4, 5, 3), (1, 4, 9, 3), (2,)),
                            ((1, 3, 4, 4, 2), (1, 5, 6, 7, 2), (1, 2, 3)), ((1, 2, 3, 4, 5), (1, 2, 5, 7, 9), (2, 3, 4)),
                            ((1, 8, 8, 2), (1, 3, 5, 2), (1, 2)), ((2, 6), (2, 11), (1,))]:
        c.append(B.resize_case(r, ins, outs, axes))
    # cubic resize: NHWC (channels run innermost) and NCHW / 2-D (width taps per position), up and down,
    # exclude_outside (height divisors != 1), a copy (no size changes), one pixel
    for ins, outs, axes, nchw, mode, excl in [
            ((1, 4, 5, 3), (1, 8, 10, 3), (1, 2), (1, 3, 4, 5), "half_pixel", False),
            ((2, 7, 6, 5), (2, 3, 11, 5), (1, 2), (2, 5, 7, 6), "align_corners", True),
            ((1, 3, 4, 5), (1, 3, 8, 3), (2, 3), None, "asymmetric", True),
            ((1, 2, 5, 6), (1, 2, 5, 6), (2, 3), None, "half_pixel", False),
            ((1, 2, 1, 1), (1, 2, 3, 4), (2, 3), None, "pytorch_half_pixel", True),
            ((6, 9), (13, 4), (0, 1), None, "half_pixel_symmetric", True)]:
        c.append(B.cubic_resize_case(r, ins, outs, axes, onnx_shape=nchw, mode=mode, a=-0.5 if excl else -0.75,
                                     exclude_outside=excl))
    # binary: every function and operand kind; broadcasts (scalar, channel, rows, both sides); ReLU; 0/0 and x/0
    shapes = [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (1, 1, 1, 5)), ((2, 3, 4, 5), (1, 3, 1, 1)),
              ((4, 1, 5), (1, 3, 1)), ((3, 7), (1,)), ((1,), (5, 3)), ((7,), (7,)), ((), ())]
    for fn in B.BINARY_FNS:
        for k, (sa_, sb_) in enumerate(shapes):
            kinds = [(False, False), (False, True), (True, False), (True, True)][k % 4]
            c.append(B.binary_case(r, fn, sa_, sb_, *kinds, relu=k % 3 == 1, so=0.05, zeros=fn == "div",
                                   oo=k % 5))
        c.append(B.binary_case(r, fn, (3, 601), (3, 1), so=0.05, relu=fn == "add", what="rows of tables"))
        c.append(B.binary_case(r, fn, (1,), (700,), a_float=True, so=0.05, what="table, constant first"))
        c.append(B.binary_case(r, fn, (2, 3, 4, 5), (4, 1), b_float=True, relu=True, so=0.05))
    c.append(B.binary_case(r, "mul", (6, 5), (5,), b_float=True, so=1e-30, what="overflow to inf"))
    c.append(B.binary_case(r, "div", (50,), (50,), zeros=True, relu=True, so=0.01))
    # depthwise conv
    for n, h, w, ch, k, s, p, m, bias, relu, d, big in [(1, 6, 6, 8, 3, 1, 1, 1, True, True, (1, 1), False),
                                                        (1, 7, 5, 16, 3, 2, 1, 1, True, False, (1, 1), False),
                                                        (2, 6, 6, 13, 3, 1, 1, 1, False, True, (1, 1), False),
                                                        (1, 5, 5, 4, 3, 1, 1, 2, True, False, (1, 1), False),
                                                        (1, 8, 8, 8, 3, 1, 2, 1, True, True, (2, 2), False),
                                                        (1, 3, 3, 8, 5, 1, 3, 1, True, False, (1, 1), False),
                                                        (1, 6, 6, 24, 3, 1, (0, 2, 1, 0), 1, True, False, (1, 1), True),
                                                        (1, 9, 9, 8, 5, 2, 2, 1, True, True, (1, 1), False)]:
        c.append(B.dwconv_case(r, n, h, w, ch, k, s, p, m, bias, relu, d=d, big_bias=big))
    # affine: channels last (direct, and tables in chunks), channels first (direct, and a table per channel)
    for outer, ch, inner, row, relu in [(10, 5, 1, None, False), (400, 40, 1, None, True), (400, 13, 1, 20, False),
                                        (2, 3, 7, None, True), (2, 3, 600, None, False), (1, 2, 520, 1100, True),
                                        (390, 8, 1, 9, False)]:
        c.append(B.affine_case(r, outer, ch, inner, row, relu))
    for outer, ch, inner, size in [(3, 7, 1, 5), (1, 6, 4, 3), (2, 10, 3, 4)]:
        c.append(B.lrn_case(r, outer, ch, inner, size))
    for outer, n in [(3, 5), (2, 8), (2, 129), (1, 300), (2, 1024)]:
        c.append(B.layernorm_case(r, outer, n))
    # reductions: chunks of 64 inner positions and their tails, a single value, ties of the mean, saturation
    for outer, axis_len, inner, kind in [(1, 1, 1, "sum"), (2, 5, 3, "sum"), (1, 7, 130, "mean"), (3, 4, 64, "mean"),
                                         (2, 200, 1, "mean"), (1, 9, 65, "max"), (4, 3, 1, "min"), (1, 300, 2, "sum"),
                                         (2, 16, 3, "l2"), (1, 70, 66, "l2")]:
        c.append(B.reduce_case(r, outer, axis_len, inner, kind))
    c.append(B.reduce_case(r, 2, 4, 5, "mean", in_scale=1.0, out_scale=1.0))   # sums of 4 ints: ties at .5
    c.append(B.reduce_case(r, 1, 50, 8, "sum", in_scale=0.1, out_scale=0.01))  # saturates both ways
    # the recurrence: both cells, every direction, GRU's two reset orders, a batch, one hidden unit; int8
    # projections and a full_C matmul's int32 accumulators
    for cell, seq, batch, hidden, dirs, reverse, lbr, wide in [
            ("lstm", 5, 2, 8, 1, False, False, False), ("lstm", 7, 1, 16, 2, False, False, True),
            ("lstm", 3, 3, 1, 1, True, False, False), ("lstm", 4, 2, 8, 2, True, False, True),
            ("gru", 6, 2, 8, 1, False, False, False), ("gru", 4, 1, 12, 2, False, True, True),
            ("gru", 5, 2, 4, 1, True, True, False), ("gru", 6, 3, 8, 1, False, False, True)]:
        c.append(B.recurrent_case(r, cell, seq, batch, hidden, dirs, reverse, lbr, wide=wide))
    # float_conv (layers kept float): blocks of 8 outputs and their tails, a group's channels ending mid-block,
    # depthwise (multiplier 1 and 3), padding-only border pixels, strides, dilation, asymmetric windows, no bias,
    # ReLU, saturation both ways (a small output scale), matmuls (1x1 over a row of pixels), misaligned input
    for n, h, w, ch, oc, k, s, p, g, d, bias, relu, out_scale in [
            (1, 5, 5, 3, 8, 3, 1, 1, 1, (1, 1), True, False, None),
            (2, 6, 5, 16, 13, 3, 2, 1, 1, (1, 1), False, True, None),
            (1, 7, 6, 12, 20, (2, 3), 1, (0, 1, 2, 1), 2, (2, 1), True, False, None),
            (1, 6, 6, 11, 11, 3, 1, 1, 11, (1, 1), True, True, None),
            (1, 5, 4, 4, 12, 3, 2, 1, 4, (1, 1), True, False, None),
            (1, 3, 3, 5, 6, 1, 1, 2, 1, (1, 1), True, False, None),
            (1, 1, 7, 40, 9, 1, 1, 0, 1, (1, 1), True, False, None),
            (1, 4, 4, 24, 15, 3, 1, 1, 3, (1, 1), True, False, 0.004)]:
        c.append(B.float_conv_case(r, n, h, w, ch, oc, k, s, p, groups=g, d=d, bias=bias, relu=relu,
                                   out_scale=out_scale))
    c.append(B.float_conv_case(r, 1, 3, 3, 9, 17, 3, 1, 1, off=3, oo=5))
    return c


CASES = kernel_cases()


def check(results):
    bad = [f"{r.case.name}: {r.detail}" for r in results if not r.ok]
    assert not bad, "\n".join(bad)


def test_every_kernel_has_cases():
    header = (ROOT / "onnx2gemmini" / "runtime" / "o2g_runtime.h").read_text()
    declared = set(re.findall(r"^void o2g_(\w+)\(", header, re.M))
    assert declared <= {c.kernel for c in CASES}


@pytest.mark.parametrize("flags", ["-O2", "-O2 -ffast-math", "-O0"], ids=["O2", "fast-math", "O0"])
def test_host_build_matches_numpy(tmp_path, flags, monkeypatch):
    """The generated Makefile's host build (-std=gnu99 -Wall -Wextra -Werror), and two other flag sets."""
    if shutil.which((os.environ.get("CC") or "cc")) is None:
        pytest.skip("needs a C compiler")
    vars_ = B.makefile_vars()
    monkeypatch.setattr(B, "makefile_vars", lambda: {**vars_, "CFLAGS": flags})
    exe = B.build(CASES, tmp_path, "host", dump=True, cc=(os.environ.get("CC") or "cc"))
    check(B.run(exe, CASES, []))


def spike_or_skip():
    missing = B.missing_tools()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Spike test; missing: {', '.join(missing)}")
        pytest.skip(f"needs {', '.join(missing)} ({B.INSTALL_HINT})")


def test_riscv_build_on_spike_matches_numpy(tmp_path):
    """rv64gc with the generated Makefile's riscv flags (-O2 -ffast-math, picolibc), on Spike."""
    spike_or_skip()
    exe = B.build(CASES, tmp_path, "riscv", dump=True)
    check(B.run(exe, CASES, ["spike"]))


def test_riscv_quantization_is_fdiv_and_fcvt_without_library_calls(tmp_path):
    """QuantizeLinear is fdiv.s and fcvt.w.s with static rne rounding; the only library calls of the whole
    runtime are expf (softmax, sigmoid), powf (LRN), tanhf (LSTM/GRU) and the compiler's own helpers: no roundf,
    nearbyintf, lrintf."""
    spike_or_skip()
    v = B.makefile_vars()
    shutil.copy(B.RUNTIME / "o2g_runtime.c", tmp_path)
    shutil.copy(B.RUNTIME / "o2g_runtime.h", tmp_path)
    subprocess.run(["riscv64-unknown-elf-gcc", *v["RISCV_CFLAGS"].split(), *v["PICOLIBC_SPECS"].split(), "-c",
                    "o2g_runtime.c", "-o", "rt.o"], cwd=tmp_path, check=True)
    dump = subprocess.run(["riscv64-unknown-elf-objdump", "-dr", "rt.o"], cwd=tmp_path, check=True,
                          capture_output=True, text=True).stdout
    calls = set(re.findall(r"R_RISCV_CALL(?:_PLT)?\s+(\w+)", dump))
    assert {c for c in calls if not c.startswith("o2g_")} <= {"expf", "powf", "tanhf", "memset", "memcpy"}, calls
    quantize = dump[dump.index("<o2g_quantize>:"):]
    quantize = quantize[:re.search(r"\n\n[0-9a-f]+ <o2g_\w+>:", quantize).start()]
    assert "fdiv.s" in quantize and re.search(r"fcvt\.w\.s\s+\w+,\s*\w+,\s*rne", quantize)
    assert set(re.findall(r"R_RISCV_CALL(?:_PLT)?\s+(\w+)", quantize)) <= {"o2g_sat_slow"}  # saturation, out of line


def test_a_kernel_output_is_checked_against_its_budget():
    """Negative control of the Spike/host comparison: a libm kernel's output may be 1 LSB off on a budget
    of values (its stated tolerance), not 2 LSB, and not on every value."""
    r = np.random.default_rng(5)
    case = B.softmax_case(r, 4, 50, 1)
    want = case.expected.astype(np.int8).reshape(-1)
    assert B.compare(case, want) == (True, "")
    one = want.copy()
    one[3] += 1 if one[3] < 127 else -1
    assert B.compare(case, one)[0]
    two = want.copy()
    two[3] += 2 if two[3] < 126 else -2
    assert B.compare(case, two)[1].startswith("2 LSB > 1")
    every = np.where(want < 127, want.astype(np.int16) + 1, want.astype(np.int16) - 1).astype(np.int8)
    assert "more than the" in B.compare(case, every)[1]
    exact = dataclasses.replace(case, tol=B.EXACT)
    assert B.compare(exact, one)[1].startswith("1 LSB > 0")
