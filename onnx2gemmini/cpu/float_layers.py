"""Layers kept in float by `--keep-float`: a conv or matmul with float32 weights on the CPU.

Why a kernel of its own: a layer whose int8 weights cost too much accuracy (an outlier weight, a
sensitive first or last layer; `diff --sensitivity` ranks them) can run in float, at the CPU's speed.
It reads the int8 activation as usual and writes int8 at its calibrated output scale, so everything around
it stays on Gemmini: DequantizeLinear -> Conv/Gemm with float32 weights and bias -> fused ReLU -> QuantizeLinear.

Arithmetic, identical in NumPy (`run`) and C (o2g_float_conv), so the two agree bit for bit: each input
value is dequantized to float32 (float32(q) * in_scale, one rounding, as DequantizeLinear); each product with
a float32 weight is exact in float64 (24 + 24 significant bits); the products are summed in float64 in the
order (kh, kw, input channel), padding skipped (adding a zero product changes no sum); the bias is added in
float64, the sum rounded to float32 and quantized (QuantizeLinear: a float32 division, round half to even,
saturated; to [0, 127] with a fused ReLU). onnxruntime sums in float32 in its own order: hence a golden
tolerance of one LSB where its sum lands across a rounding boundary (`golden`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..numerics import quantize
from ..tolerance import FLOAT_REORDERING, Tolerance
from .abi import CCall, CFunction, Float, In, Int, Out, TensorArg, window_struct
from .table import CallSite, CpuKernel, Window, cpu_kernel

FLOAT_CONV = CFunction("o2g_float_conv", (("x", In("int8_t")), ("weights", In("float")), ("bias", In("float")),
                                          ("y", Out("int8_t")), ("batches", Int()), ("rows", Int()), ("cols", Int()),
                                          ("channels", Int()), ("w", window_struct()), ("groups", Int()),
                                          ("out_channels", Int()), ("in_scale", Float()), ("out_scale", Float()),
                                          ("relu", Int())))

# Instructions o2g_float_conv retires on an rv64gc core (the generated Makefile's riscv flags: -O2 -ffast-math,
# picolibc; Spike's instret), per multiply-accumulate of a tap inside the input (dense, or one input channel
# per group: depthwise), per output value and per output pixel. Fitted by `python scripts/bench_spike.py
# --float-conv` over 13 geometries (dense, 1x1, strided, depthwise convs; matmuls): within 6% of each, except a
# 512 x 10 classifier (-31%: its last 2 outputs take the one-accumulator loop). Cycles = instructions x the
# config's cpu_cpi (config.py). Re-run the fit when o2g_float_conv changes.
INSTRUCTIONS_PER_MAC = 4.75
INSTRUCTIONS_PER_DEPTHWISE_MAC = 12.12
INSTRUCTIONS_PER_OUTPUT = 29.69
INSTRUCTIONS_PER_PIXEL = 529.63

ROWS_PER_CHUNK = 4096  # output pixels gathered at once by `run` (bounds its float64 patch buffer)


def nhwc_dims(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(batches, rows, cols, channels) of an NHWC tensor; a matrix [..., K] is one row of pixels."""
    if len(shape) == 4:
        return tuple(int(d) for d in shape)
    return 1, 1, int(np.prod(shape[:-1], dtype=np.int64)), int(shape[-1])


@cpu_kernel("float_conv", FLOAT_CONV)
@dataclass(frozen=True)
class FloatConv(CpuKernel):
    """A conv (any kernel, stride, padding, dilation, groups) of an NHWC int8 input with float32 weights
    [KH][KW][C/groups][OC] and a float32 bias, computed in float and quantized (module docstring). A matmul
    [I][K] x [K][J] is its 1x1 case over a row of I pixels."""

    window: Window
    groups: int
    in_scale: float
    out_scale: float
    relu: bool = False

    def run(self, inputs, out_shapes):
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        n, h, wd, c = nhwc_dims(x.shape)
        win, g = self.window, self.groups
        kh, kw = win.kernel
        icg, oc = c // g, w.shape[-1]
        ocg = oc // g
        taps = kh * kw
        x4 = x.reshape(n, h, wd, c)
        weights = w.astype(np.float64).reshape(taps, icg, g, ocg)
        table = np.arange(-128, 128, dtype=np.int64).astype(np.float32) * np.float32(self.in_scale)
        table = table.astype(np.float64)  # each int8 value dequantized as DequantizeLinear does, widened exactly
        pad = (win.pads[0], win.pads[1], win.pads[2], win.pads[3])
        padded = np.pad(x4.astype(np.int16) + 128, ((0, 0), (pad[0], pad[2]), (pad[1], pad[3]), (0, 0)),
                        constant_values=128)  # padding reads as the value 0
        out_rows, out_cols = win.out
        pixels = n * out_rows * out_cols
        acc = np.zeros((pixels, g, ocg))
        # per tap t: vals[p, g, i], the dequantized input under tap t of output pixel p, group g's channel i
        taps_idx = [(a * win.dilations[0], b * win.dilations[1]) for a in range(kh) for b in range(kw)]
        for start in range(0, pixels, ROWS_PER_CHUNK):
            stop = min(pixels, start + ROWS_PER_CHUNK)
            p = np.arange(start, stop)
            b, rest = np.divmod(p, out_rows * out_cols)
            r, q = np.divmod(rest, out_cols)
            part = acc[start:stop]
            for t, (dr, dc) in enumerate(taps_idx):
                rows, cols = r * win.strides[0] + dr, q * win.strides[1] + dc
                vals = table[padded[b, rows, cols]].reshape(stop - start, g, icg)
                for i in range(icg):  # the order of the C loop: tap by tap, channel by channel
                    part += vals[:, :, i, None] * weights[t, i]
        y = acc.reshape(pixels, oc)
        if bias is not None:
            y = y + bias.astype(np.float64)
        q = quantize(y.astype(np.float32), self.out_scale, 0 if self.relu else -128)
        return [q.reshape(out_shapes[0])]

    def calls(self, site: CallSite):
        x, w, y = site.inputs[0], site.inputs[1], site.outputs[0]
        if x.row_stride != x.shape[-1] or y.row_stride != y.shape[-1]:
            raise ValueError("o2g_float_conv reads and writes dense buffers only")
        bias = site.inputs[2].arg() if len(site.inputs) > 2 else TensorArg(None, (w.shape[-1],), "float32")
        return [CCall(FLOAT_CONV, (x.arg(), w.arg(), bias, y.arg(), *nhwc_dims(x.shape), self.window.struct(),
                                   self.groups, w.shape[-1], self.in_scale, self.out_scale, int(self.relu)))]

    def golden(self, site: CallSite) -> Tolerance:
        """onnxruntime sums the same products in float32, in its own order (MLAS): its sum is off the exact
        one by a few float32 roundings, growing about with the square root of the K = kh*kw*C/groups terms,
        and quantizes differently where that straddles a rounding boundary. FLOAT_REORDERING covers 2^-17
        relative (128 float32 ulps); past K = 4096 terms the rate grows with sqrt(K)."""
        k = self._depth(site)
        return Tolerance(1, FLOAT_REORDERING.rate * max(1.0, math.sqrt(k / 4096)),
                         f"onnxruntime sums the {k} float32 products per output in its own order")

    def macs(self, site: CallSite) -> int:
        return int(np.prod(site.outputs[0].shape, dtype=np.int64)) * self._depth(site)

    def instructions(self, site: CallSite) -> float:
        """o2g_float_conv's estimated instructions: the fit above over the taps inside the input."""
        n, h, wd, _ = nhwc_dims(site.inputs[0].shape)
        win = self.window
        out_rows, out_cols = win.out
        oc = site.inputs[1].shape[-1]
        inside = (_taps_inside(h, win.kernel[0], win.strides[0], win.pads[0], win.dilations[0], out_rows)
                  * _taps_inside(wd, win.kernel[1], win.strides[1], win.pads[1], win.dilations[1], out_cols))
        icg = nhwc_dims(site.inputs[0].shape)[3] // self.groups
        pixels = n * out_rows * out_cols
        per_mac = INSTRUCTIONS_PER_DEPTHWISE_MAC if icg == 1 else INSTRUCTIONS_PER_MAC
        return n * inside * icg * oc * per_mac + pixels * oc * INSTRUCTIONS_PER_OUTPUT + pixels * INSTRUCTIONS_PER_PIXEL

    def _depth(self, site: CallSite) -> int:
        """Products summed per output value: kh * kw * input channels per group."""
        return self.window.kernel[0] * self.window.kernel[1] * (nhwc_dims(site.inputs[0].shape)[3] // self.groups)


def _taps_inside(size: int, kernel: int, stride: int, pad: int, dilation: int, out: int) -> int:
    """Window taps of one axis, summed over its `out` positions, that fall inside the input."""
    pos = np.arange(out)[:, None] * stride + np.arange(kernel)[None, :] * dilation - pad
    return int(np.count_nonzero((pos >= 0) & (pos < size)))
