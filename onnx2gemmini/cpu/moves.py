"""CPU kernels that move int8 values without new arithmetic (or only a requantization): exact."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .. import kernels
from ..tolerance import FLOAT_REORDERING, Tolerance
from . import costs
from .abi import CCall, CFunction, Float, In, Int, List, Out
from .table import CallSite, CpuKernel, cpu_kernel

X, Y = ("x", In("int8_t")), ("y", Out("int8_t"))


def split(shape, axis: int) -> tuple[int, int, int]:
    """(outer, axis length, inner) of a shape around one axis."""
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(shape[axis]),
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


TRANSPOSE = CFunction("o2g_transpose", (X, Y, ("rank", Int()), ("shape", List("int")), ("perm", List("int"))))


@cpu_kernel("transpose", TRANSPOSE)
@dataclass(frozen=True)
class Transpose(CpuKernel):
    """numpy.transpose of an int8 tensor (NHWC <-> NCHW moves, ONNX Transpose)."""

    perm: tuple[int, ...]

    def run(self, inputs, out_shapes):
        return [np.ascontiguousarray(inputs[0].transpose(self.perm))]

    def calls(self, site: CallSite):
        x = site.inputs[0]
        return [CCall(TRANSPOSE, (x.arg(), site.outputs[0].arg(), len(x.shape), x.shape, self.perm))]

    def cost_parts(self, site: CallSite):
        return [costs.transpose_terms(site.inputs[0].shape, self.perm)]


CLIP = CFunction("o2g_clip", (X, Y, ("count", Int("size_t")), ("lo", Int()), ("hi", Int())))


@cpu_kernel("clip", CLIP)
@dataclass(frozen=True)
class Clip(CpuKernel):
    """A standalone Relu or Clip on int8 values: the bounds quantized to the input's scale."""

    lo: int
    hi: int

    def run(self, inputs, out_shapes):
        return [np.clip(inputs[0], self.lo, self.hi).astype(np.int8)]

    def calls(self, site: CallSite):
        x = site.inputs[0]
        return [CCall(CLIP, (x.arg(), site.outputs[0].arg(), x.size, self.lo, self.hi))]

    def cost_parts(self, site: CallSite):
        return [costs.clip_terms(site.inputs[0].size, self.lo, self.hi)]


GATHER = CFunction("o2g_gather", (X, Y, ("outer", Int("size_t")), ("axis_len", Int("size_t")),
                                  ("inner", Int("size_t")), ("indices", List("int64_t")), ("count", Int("size_t"))))


@cpu_kernel("gather", GATHER)
@dataclass(frozen=True)
class Gather(CpuKernel):
    """numpy.take with constant (non-negative) indices."""

    axis: int
    indices: tuple[int, ...]
    indices_shape: tuple[int, ...]

    def run(self, inputs, out_shapes):
        index = np.asarray(self.indices, np.int64).reshape(self.indices_shape)
        return [np.take(inputs[0], index, axis=self.axis)]

    def calls(self, site: CallSite):
        x = site.inputs[0]
        outer, n, inner = split(x.shape, self.axis)
        return [CCall(GATHER, (x.arg(), site.outputs[0].arg(), outer, n, inner, self.indices, len(self.indices)))]

    def cost_parts(self, site: CallSite):
        outer, _, inner = split(site.inputs[0].shape, self.axis)
        return [costs.gather_terms(outer, inner, len(self.indices))]


EMBEDDING = CFunction("o2g_embedding", (("ids", In("int64_t", "int32_t")), ("table", In("int8_t")), Y,
                                        ("index_bytes", Int()), ("outer", Int("size_t")), ("rows", Int("size_t")),
                                        ("inner", Int("size_t")), ("count", Int("size_t"))))


@cpu_kernel("embedding", EMBEDDING)
@dataclass(frozen=True)
class Embedding(CpuKernel):
    """ONNX Gather of a constant int8 table (stored at its output's scale) by integer ids a model input holds:
    an embedding lookup. A negative id counts from the end, as in ONNX; the data check refuses ids outside
    the table, and the C kernel clamps them (it has no way to report an error)."""

    axis: int

    def run(self, inputs, out_shapes):
        ids, table = np.asarray(inputs[0], np.int64), inputs[1]
        rows = table.shape[self.axis]
        index = np.clip(np.where(ids < 0, ids + rows, ids), 0, rows - 1)
        return [np.take(table, index, axis=self.axis)]

    def calls(self, site: CallSite):
        ids, table = site.inputs
        outer, rows, inner = split(table.shape, self.axis)
        return [CCall(EMBEDDING, (ids.arg(), table.arg(), site.outputs[0].arg(), np.dtype(ids.dtype).itemsize,
                                  outer, rows, inner, ids.size))]

    def cost_parts(self, site: CallSite):
        outer, _, inner = split(site.inputs[1].shape, self.axis)
        return [costs.lookup_terms("embedding", inner, outer * site.inputs[0].size)]


POSITION_EMBEDDING = CFunction("o2g_position_embedding", (("ids", In("int64_t", "int32_t")), ("table", In("int8_t")),
                                                          Y, ("index_bytes", Int()), ("rows", Int("size_t")),
                                                          ("inner", Int("size_t")), ("seq", Int("size_t")),
                                                          ("count", Int("size_t")), ("pad", Int("int64_t"))))


@cpu_kernel("position_embedding", POSITION_EMBEDDING)
@dataclass(frozen=True)
class PositionEmbedding(CpuKernel):
    """Rows of a constant int8 position table at the position ids RoBERTa derives from the token ids
    (kernels.padding_positions: pad + the count of non-padding ids so far, pad at a padding id); positions
    beyond the table are clamped (the compile checks the sequence fits)."""

    pad: int

    def run(self, inputs, out_shapes):
        ids, table = inputs
        positions = np.clip(kernels.padding_positions(ids, self.pad), 0, table.shape[0] - 1)
        return [np.take(table, positions, axis=0)]

    def calls(self, site: CallSite):
        ids, table = site.inputs
        return [CCall(POSITION_EMBEDDING, (ids.arg(), table.arg(), site.outputs[0].arg(), np.dtype(ids.dtype).itemsize,
                                           table.shape[0], table.size // table.shape[0], ids.shape[-1], ids.size,
                                           self.pad))]

    def cost_parts(self, site: CallSite):
        table = site.inputs[1]
        return [costs.lookup_terms("position_embedding", table.size // table.shape[0], site.inputs[0].size)]


MASK_ROWS = CFunction("o2g_mask_rows", (X, ("mask", In("int64_t", "int32_t")), Y, ("index_bytes", Int()),
                                        ("rows", Int("size_t")), ("row_len", Int("size_t"))))


@cpu_kernel("mask_rows", MASK_ROWS)
@dataclass(frozen=True)
class MaskRows(CpuKernel):
    """x viewed as [rows][row_len] copied where the integer mask input's value of the row is nonzero, zeros
    elsewhere (ops/mask_rows.py): the same int8 values at the same scale, exact."""

    rows: int

    def run(self, inputs, out_shapes):
        x, mask = inputs
        keep = np.asarray(mask).reshape(self.rows, 1) != 0
        rows = x.reshape(self.rows, x.size // max(self.rows, 1))
        return [np.where(keep, rows, np.int8(0)).reshape(x.shape)]

    def calls(self, site: CallSite):
        x, mask = site.inputs
        return [CCall(MASK_ROWS, (x.arg(), mask.arg(), site.outputs[0].arg(), np.dtype(mask.dtype).itemsize,
                                  self.rows, x.size // max(self.rows, 1)))]

    def cost_parts(self, site: CallSite):
        x = site.inputs[0]
        return [costs.lookup_terms("mask_rows", x.size // max(self.rows, 1), self.rows)]


REMAP = CFunction("o2g_remap", (X, Y, ("rank", Int()), ("in_shape", List("int")), ("out_shape", List("int")),
                                ("index", List("int64_t")), ("value", Int("int8_t"))))


@cpu_kernel("remap", REMAP)
@dataclass(frozen=True)
class Remap(CpuKernel):
    """Each output position reads, per axis, the input position its map gives (-1: `value`): Slice, Pad,
    nearest Resize, ConvTranspose's zero insertion, channel copies. `index` holds the maps of the output's
    axes one after another."""

    index: tuple[int, ...]
    value: int = 0

    def run(self, inputs, out_shapes):
        return [kernels.remap(inputs[0], self.index, out_shapes[0], self.value)]

    def calls(self, site: CallSite):
        x, y = site.inputs[0], site.outputs[0]
        return [CCall(REMAP, (x.arg(), y.arg(), len(x.shape), x.shape or (1,), y.shape or (1,), self.index,
                              self.value))]

    def cost_parts(self, site: CallSite):
        x, y = site.inputs[0], site.outputs[0]
        return [costs.remap_terms(x.shape or (1,), y.shape or (1,), self.index)]


F32_COPY_PART = CFunction("o2g_concat_part_f32", (("x", In("float")), ("y", Out("float")), ("outer", Int("size_t")),
                                                  ("part_len", Int("size_t")), ("inner", Int("size_t")),
                                                  ("total_len", Int("size_t")), ("offset", Int("size_t"))))
DEQUANTIZE_PART = CFunction("o2g_concat_part_dequantize", (X, ("y", Out("float")), ("outer", Int("size_t")),
                                                          ("part_len", Int("size_t")), ("inner", Int("size_t")),
                                                          ("total_len", Int("size_t")), ("offset", Int("size_t")),
                                                          ("scale", Float())))
CONCAT_PART = CFunction("o2g_concat_part", (X, Y, ("outer", Int("size_t")), ("part_len", Int("size_t")),
                                            ("inner", Int("size_t")), ("total_len", Int("size_t")),
                                            ("offset", Int("size_t")), ("in_scale", Float()),
                                            ("out_scale", Float())))


@cpu_kernel("concat", CONCAT_PART, F32_COPY_PART, DEQUANTIZE_PART)
@dataclass(frozen=True)
class Concat(CpuKernel):
    """numpy.concatenate, each input requantized to the output's scale where it has another one, or, with
    `keeps_scales` (a model output with one scale per index, quantize.py), copied as it is; with `float_out`
    (a float32 model output) each int8 input dequantized at its scale, float32 ones copied. Inputs marked
    `in_place` were written into their channels by their producer (slices.py): not copied again."""

    axis: int
    in_scales: tuple[float, ...]
    out_scale: float
    in_place: tuple[bool, ...] = ()
    keeps_scales: bool = False
    float_out: bool = False

    def part_scales(self) -> tuple[float, ...]:
        """The scale each input is written at: the output's, or with `keeps_scales` its own."""
        return self.in_scales if self.keeps_scales else (self.out_scale,) * len(self.in_scales)

    def run(self, inputs, out_shapes):
        if self.float_out:  # x * scale in float32, as onnxruntime's DequantizeLinear
            return [np.concatenate([x if x.dtype == np.float32 else x.astype(np.float32) * np.float32(s)
                                    for x, s in zip(inputs, self.in_scales)], axis=self.axis)]
        return [kernels.concat(inputs, self.axis, self.in_scales, self.part_scales())]

    def float_bound(self, input_bounds: list[float | None]) -> float:
        """The largest magnitude a float32 output can hold: 128 steps of each int8 input's scale, or the
        bound of a float32 input."""
        return max(b if b is not None else 128.0 * s for b, s in zip(input_bounds, self.in_scales))

    def calls(self, site: CallSite):
        y = site.outputs[0]
        outer, total, inner = split(y.shape, self.axis)
        if self.float_out:
            calls, offset = [], 0
            for x, scale in zip(site.inputs, self.in_scales):
                n = x.shape[self.axis]
                calls.append(CCall(F32_COPY_PART, (x.arg(), y.arg(), outer, n, inner, total, offset))
                             if x.dtype == "float32" else
                             CCall(DEQUANTIZE_PART, (x.arg(), y.arg(), outer, n, inner, total, offset, scale)))
                offset += n
            return calls
        if y.shape and self.axis == len(y.shape) - 1:
            total = y.row_stride             # itself a slice of a wider buffer: rows are that wide
        calls, offset = [], 0
        for x, scale, out_scale, in_place in zip(site.inputs, self.in_scales, self.part_scales(),
                                                 self.in_place or (False,) * len(site.inputs)):
            n = x.shape[self.axis]
            if not in_place:
                calls.append(CCall(CONCAT_PART, (x.arg(), y.arg(), outer, n, inner, total, offset, scale,
                                                 out_scale)))
            offset += n
        return calls

    def cost_parts(self, site: CallSite):
        parts = []
        for call in self.calls(site):
            if self.float_out:  # a float copy, or a dequantization: priced as the int8 copy and requantization
                outer, part, inner, total = call.args[2:6]
                parts.append(costs.concat_terms(outer, part, inner, total, call.function is F32_COPY_PART))
                continue
            outer, part, inner, total, _, in_scale, out_scale = call.args[2:9]
            parts.append(costs.concat_terms(outer, part, inner, total,
                                            float(np.float32(in_scale)) == float(np.float32(out_scale))))
        return parts

    def golden(self, site: CallSite) -> Tolerance:
        if self.float_out:
            return super().golden(site)  # DequantizeLinear multiplies in float32 too
        if any(s != t for s, t in zip(self.in_scales, self.part_scales())):
            return FLOAT_REORDERING   # a requantized input: DQ then Q in float32
        return super().golden(site)


LUT = CFunction("o2g_lut", (X, Y, ("count", Int("size_t")), ("table", List("int8_t"))))


@cpu_kernel("lut", LUT)
@dataclass(frozen=True)
class Lut(CpuKernel):
    """y = table[x + 128]: a unary activation tabulated at compile time for the input and output scales."""

    table: tuple[int, ...]
    dtype: ClassVar[type] = np.int8

    def run(self, inputs, out_shapes):
        return [np.asarray(self.table, self.dtype)[inputs[0].astype(np.int16) + 128]]

    def calls(self, site: CallSite):
        x = site.inputs[0]
        return [CCall(self.functions[0], (x.arg(), site.outputs[0].arg(), x.size, self.table))]

    def cost_parts(self, site: CallSite):
        return [costs.lut_terms(site.inputs[0].size)]

    def golden(self, site: CallSite) -> Tolerance:
        return FLOAT_REORDERING    # onnxruntime evaluates the function in float between DQ and Q


LUT_F32 = CFunction("o2g_lut_f32", (X, ("y", Out("float")), ("count", Int("size_t")), ("table", List("float"))))
# onnxruntime evaluates a function with MLAS's approximations (its Sigmoid is within 1.7e-7 of the exact
# value, absolute, down to the smallest outputs); the table holds the function rounded once to float32.
FLOAT_FUNCTION = Tolerance(1, 1.0, "onnxruntime's float32 function approximations: within 2^-20 of the "
                                   "largest value the table holds")


@cpu_kernel("lut_f32", LUT_F32)
@dataclass(frozen=True)
class FloatLut(Lut):
    """y = table[x + 128] in float32: a unary activation's exact values at the 256 int8 inputs, for a model
    output kept float (quantize.float_tensors)."""

    table: tuple[float, ...]
    dtype: ClassVar[type] = np.float32

    def float_bound(self, input_bounds: list[float | None]) -> float:
        """The largest magnitude the output can hold (its comparison unit is 2^-20 of it, compare.py)."""
        finite = np.abs(np.asarray(self.table, np.float64))
        finite = finite[np.isfinite(finite)]
        return float(finite.max()) if finite.size else 0.0

    def golden(self, site: CallSite) -> Tolerance:
        return FLOAT_FUNCTION
