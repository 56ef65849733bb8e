"""The recurrence of ONNX LSTM and GRU in float32 on the CPU: each time step depends on the last, and
Gemmini has no sigmoid or tanh. The input projections X·Wᵀ (+ Wb) of every step arrive precomputed by one
Gemmini matmul (passes/recurrent_projection.py), as its int32 accumulators (full_C) or, where the
configuration cannot read those out, as int8; this kernel dequantizes them, adds the
recurrence R·h (+ Rb), runs the gates in float32 and quantizes Y, Y_h and Y_c with their own scales.
The states h and c stay float32 between the steps, as in onnxruntime's LSTM between DQ and Q.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..numerics import dequantize, quantize
from ..tolerance import FLOAT_REORDERING, Tolerance
from . import costs
from .abi import CCall, CFunction, Float, In, Int, Out
from .table import CallSite, CpuKernel, cpu_kernel

# The C kernel keeps one sequence's state (h, the new h, c; GRU: z and r*h) in a static buffer of this
# many hidden units each (runtime: O2G_RNN_MAX_HIDDEN).
MAX_HIDDEN = 1024

# Both the C kernel and onnxruntime sum the R·h dot products in their own order and evaluate sigmoid and
# tanh with their own libm / MLAS approximations, and the states carry those float32 differences from step
# to step. A trained recurrence contracts them (measured: at most 4e-5 of the values 1 LSB off over 60
# steps of 256 to 512 hidden units), so the single-op bound holds. A chaotic one (recurrent weights far
# above 1/sqrt(hidden)) amplifies any rounding difference and fails the check, as it should: its
# outputs then depend on rounding.
RECURRENCE = Tolerance(1, FLOAT_REORDERING.rate,
                       "float32 recurrence: dot-product order and sigmoid/tanh approximations carried across steps")

_STATE = (("p", In("int8_t", "int32_t")), ("p_int32", Int()), ("r", In("float")), ("bias", In("float")))
_SHAPE = (("seq", Int("size_t")), ("batch", Int("size_t")), ("hidden", Int("size_t")), ("directions", Int()),
          ("reverse", Int()))
LSTM = CFunction("o2g_lstm", (*_STATE, ("peephole", In("float")), ("h0", In("float")), ("c0", In("float")),
                              ("y", Out("int8_t")), ("y_h", Out("int8_t")), ("y_c", Out("int8_t")), *_SHAPE,
                              ("p_scale", Float()), ("y_scale", Float()), ("y_h_scale", Float()),
                              ("y_c_scale", Float())))
GRU = CFunction("o2g_gru", (*_STATE, ("h0", In("float")), ("y", Out("int8_t")), ("y_h", Out("int8_t")), *_SHAPE,
                            ("linear_before_reset", Int()), ("p_scale", Float()), ("y_scale", Float()),
                            ("y_h_scale", Float())))

GATES = {"lstm": 4, "gru": 3}


def _sigmoid(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-v) overflows to inf for v < -88: the sigmoid is then 0
        return np.float32(1) / (np.float32(1) + np.exp(-v))


@cpu_kernel("recurrent", LSTM, GRU)
@dataclass(frozen=True)
class Recurrent(CpuKernel):
    """ONNX LSTM (gates i, o, f, c; peepholes i, o, f) or GRU (gates z, r, h) with the default activations.

    Inputs: P, the input projections [seq, batch, directions * gates * hidden], direction-major, int8 or
    int32 accumulators at p_scale;
    R [directions, gates * hidden, hidden], the recurrence bias [directions, gates * hidden] and, for an
    LSTM, peepholes [directions, 3 * hidden], all float32; the initial states [directions, batch, hidden]
    float32 (h0, and c0 for an LSTM). Outputs: Y, Y_h (and Y_c) int8, layout 0. Every gate is
    ((P dequantized + R·h) + bias) then, for an LSTM, + peephole * c, in that order in C and NumPy."""

    cell: str                       # "lstm" or "gru"
    directions: int                 # 1 or 2 (the second runs backward)
    reverse: bool                   # one direction, run backward
    linear_before_reset: bool       # GRU only
    p_scale: float
    y_scale: float
    y_h_scale: float
    y_c_scale: float = 0.0          # LSTM only
    c_exactness = RECURRENCE

    def run(self, inputs, out_shapes):
        p, r, bias = inputs[:3]
        x = dequantize(p, self.p_scale)
        seq, batch = x.shape[:2]
        hidden = r.shape[-1]
        width = GATES[self.cell] * hidden
        ys, hs, cs = [], [], []
        for d in range(self.directions):
            steps = range(seq - 1, -1, -1) if self.reverse or d == 1 else range(seq)
            xd = x[:, :, d * width:(d + 1) * width]
            if self.cell == "lstm":
                peephole, h0, c0 = inputs[3:6]
                y, h, c = _lstm(xd, r[d], bias[d], peephole[d], h0[d], c0[d], steps)
                cs.append(c)
            else:
                y, h = _gru(xd, r[d], bias[d], inputs[3][d], steps, self.linear_before_reset)
            ys.append(y)
            hs.append(h)
        values = [np.stack(ys, axis=1), np.stack(hs)] + ([np.stack(cs)] if cs else [])  # Y [seq, dirs, batch, H]
        scales = (self.y_scale, self.y_h_scale, self.y_c_scale)
        return [quantize(v, s).reshape(shape) for v, s, shape in zip(values, scales, out_shapes)]

    def calls(self, site: CallSite):
        p, r = site.inputs[:2]
        shape = (*p.shape[:2], r.shape[-1], self.directions, int(self.reverse))
        tensors = tuple(t.arg() for t in site.inputs + site.outputs)
        tensors = tensors[:1] + (int(p.dtype == "int32"),) + tensors[1:]  # p_int32 follows p
        if self.cell == "lstm":
            return [CCall(LSTM, (*tensors, *shape, self.p_scale, self.y_scale, self.y_h_scale, self.y_c_scale))]
        return [CCall(GRU, (*tensors, *shape, int(self.linear_before_reset), self.p_scale, self.y_scale,
                            self.y_h_scale))]

    def golden(self, site: CallSite) -> Tolerance:
        return RECURRENCE

    def cost_parts(self, site: CallSite):
        p, r = site.inputs[:2]
        return [costs.recurrent_terms(self.cell, p.shape[0], p.shape[1], r.shape[-1], self.directions)]


def _lstm(x, r, bias, peephole, h, c, steps):
    """One direction over `steps`: x [seq, batch, 4H] float32; returns Y [seq, batch, H], the last h and c."""
    y = np.empty(x.shape[:2] + h.shape[-1:], np.float32)
    p_i, p_o, p_f = np.split(peephole, 3)
    for t in steps:
        gates = (x[t] + h @ r.T) + bias
        g_i, g_o, g_f, g_c = np.split(gates, 4, axis=1)
        i = _sigmoid(g_i + p_i * c)
        f = _sigmoid(g_f + p_f * c)
        c = f * c + i * np.tanh(g_c)
        h = _sigmoid(g_o + p_o * c) * np.tanh(c)
        y[t] = h
    return y, h, c


def _gru(x, r, bias, h, steps, linear_before_reset):
    """One direction over `steps`: x [seq, batch, 3H] float32; returns Y [seq, batch, H] and the last h."""
    y = np.empty(x.shape[:2] + h.shape[-1:], np.float32)
    r_z, r_r, r_h = np.split(r, 3)
    b_z, b_r, b_h = np.split(bias, 3)
    for t in steps:
        x_z, x_r, x_h = np.split(x[t], 3, axis=1)
        z = _sigmoid((x_z + h @ r_z.T) + b_z)
        reset = _sigmoid((x_r + h @ r_r.T) + b_r)
        if linear_before_reset:
            candidate = np.tanh(x_h + reset * ((h @ r_h.T) + b_h))
        else:
            candidate = np.tanh((x_h + (reset * h) @ r_h.T) + b_h)
        h = (np.float32(1) - z) * candidate + z * h
        y[t] = h
    return y, h
