"""CPU kernels that compute in float32 between a dequantization and a QuantizeLinear (and the input
QuantizeLinear itself): the ops Gemmini's int8 array has no unit for."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..numerics import quantize
from .. import kernels
from ..tolerance import EXACT, FLOAT_REORDERING, Tolerance
from . import costs
from .abi import CCall, CFunction, Float, In, Int, List, Out, Struct
from .moves import split
from .table import CallSite, CpuKernel, cpu_kernel

X, Y = ("x", In("int8_t")), ("y", Out("int8_t"))
SCALES = (("in_scale", Float()), ("out_scale", Float()))
# A float kernel whose C code calls expf/powf/sqrtf may differ from NumPy's float32 by one LSB.
LIBM = Tolerance(1, FLOAT_REORDERING.rate, "libm's expf/powf/sqrtf and summation order")

QUANTIZE = CFunction("o2g_quantize", (("x", In("float")), Y, ("count", Int("size_t")), ("scale", Float())))
QUANTIZE_NHWC = CFunction("o2g_quantize_nchw_to_nhwc", (("x", In("float")), Y, ("batches", Int()),
                                                         ("channels", Int()), ("rows", Int()), ("cols", Int()),
                                                         ("scale", Float())))


@cpu_kernel("quantize", QUANTIZE, QUANTIZE_NHWC)
@dataclass(frozen=True)
class Quantize(CpuKernel):
    """ONNX QuantizeLinear of a float model input (zero point 0), and NCHW -> NHWC for 4-D inputs."""

    scale: float
    to_nhwc: bool = False

    def run(self, inputs, out_shapes):
        q = quantize(inputs[0], self.scale)
        return [np.ascontiguousarray(q.transpose(0, 2, 3, 1)) if self.to_nhwc else q]

    def calls(self, site: CallSite):
        x, y = site.inputs[0], site.outputs[0]
        if self.to_nhwc:
            return [CCall(QUANTIZE_NHWC, (x.arg(), y.arg(), *x.shape, self.scale))]
        return [CCall(QUANTIZE, (x.arg(), y.arg(), x.size, self.scale))]

    def cost_parts(self, site: CallSite):
        x = site.inputs[0]
        return [costs.quantize_nhwc_terms(*x.shape) if self.to_nhwc else costs.quantize_terms(x.size)]


SOFTMAX = CFunction("o2g_softmax", (X, Y, ("outer", Int("size_t")), ("axis_len", Int("size_t")),
                                    ("inner", Int("size_t")), *SCALES))


@cpu_kernel("softmax", SOFTMAX)
@dataclass(frozen=True)
class Softmax(CpuKernel):
    """Dequantize, float32 softmax along `axis`, QuantizeLinear."""

    axis: int
    in_scale: float
    out_scale: float
    c_exactness = LIBM

    def run(self, inputs, out_shapes):
        return [kernels.softmax(inputs[0], self.axis, self.in_scale, self.out_scale)]

    def calls(self, site: CallSite):
        x = site.inputs[0]
        return [CCall(SOFTMAX, (x.arg(), site.outputs[0].arg(), *split(x.shape, self.axis), self.in_scale,
                                self.out_scale))]

    def cost_parts(self, site: CallSite):
        return [costs.softmax_terms(*split(site.inputs[0].shape, self.axis))]

    # onnxruntime fuses DQ -> Softmax -> Q into QLinearSoftmax at its default level, which scales by
    # floor(1/y_scale) instead of dividing by y_scale: up to half of the values of a short axis end 1 LSB
    # off the QDQ semantics, more where the probabilities cluster. The semantics are its float Softmax.
    golden_unfused = True

    def golden(self, site: CallSite) -> Tolerance:
        return LIBM


SOFTMAX_MASKED = CFunction("o2g_softmax_masked", (X, ("keep", In("int8_t")), Y, ("outer", Int("size_t")),
                                                  ("axis_len", Int("size_t")), ("inner", Int("size_t")),
                                                  ("keep_size", Int("size_t")), *SCALES))
MASKED_SOFTMAX_MAX_ROW = 4096  # the C kernel's exp buffer (o2g_runtime.c O2G_MASKED_SOFTMAX_MAX)


@cpu_kernel("softmax_masked", SOFTMAX_MASKED)
@dataclass(frozen=True)
class MaskedSoftmax(Softmax):
    """Softmax with a constant attention mask (passes/fuse_mask.py): the int8 0/1 `keep` constant covers x's
    trailing axes and repeats for the leading ones (flat index modulo its size); masked positions are left
    out of the row's largest value and sum, and come out 0, as exp(-inf) makes them in onnxruntime."""

    def run(self, inputs, out_shapes):
        return [kernels.softmax(inputs[0], self.axis, self.in_scale, self.out_scale, inputs[1])]

    def cost_parts(self, site: CallSite):
        return [costs.softmax_terms(*split(site.inputs[0].shape, self.axis), kind="softmax_masked")]

    def calls(self, site: CallSite):
        x, keep = site.inputs
        return [CCall(SOFTMAX_MASKED, (x.arg(), keep.arg(), site.outputs[0].arg(), *split(x.shape, self.axis),
                                       keep.size, self.in_scale, self.out_scale))]


SOFTMAX_INPUT_MASK = CFunction("o2g_softmax_input_mask", (X, ("mask", In("int64_t", "int32_t")), Y,
                                                          ("rows", Int("size_t")), ("keys", Int("size_t")),
                                                          ("queries", Int("size_t")), ("batch_rows", Int("size_t")),
                                                          ("index_bytes", Int()),
                                                          ("form", Int(names=("O2G_MASK_PADDING", "O2G_MASK_CAUSAL",
                                                                              "O2G_MASK_QUERY_KEY"))), *SCALES))


@cpu_kernel("softmax_input_mask", SOFTMAX_INPUT_MASK)
@dataclass(frozen=True)
class InputMaskedSoftmax(Softmax):
    """Softmax over the last axis (keys) of attention scores [batch, ..., queries, keys], masked by an integer
    model input [batch, keys] (passes/input_mask.py: 0 = masked; `form` one of kernels.MASK_FORMS)."""

    form: str = "padding"

    def run(self, inputs, out_shapes):
        x, mask = inputs
        keep = kernels.attention_keep(mask, x.shape, self.form)
        return [kernels.softmax(x, self.axis, self.in_scale, self.out_scale, keep)]

    def cost_parts(self, site: CallSite):
        return [costs.softmax_terms(*split(site.inputs[0].shape, self.axis), kind="softmax_input_mask")]

    def calls(self, site: CallSite):
        x, mask = site.inputs
        keys, queries = x.shape[-1], x.shape[-2]
        rows = x.size // keys
        return [CCall(SOFTMAX_INPUT_MASK, (x.arg(), mask.arg(), site.outputs[0].arg(), rows, keys, queries,
                                           rows // x.shape[0], np.dtype(mask.dtype).itemsize,
                                           kernels.MASK_FORMS.index(self.form),
                                           self.in_scale, self.out_scale))]


LAYERNORM = CFunction("o2g_layernorm", (X, ("gamma", In("float")), ("beta", In("float")), Y,
                                        ("outer", Int("size_t")), ("norm_size", Int("size_t")),
                                        ("epsilon", Float()), *SCALES))


@cpu_kernel("layernorm", LAYERNORM)
@dataclass(frozen=True)
class LayerNorm(CpuKernel):
    """ONNX LayerNormalization over the axes [axis, rank) in float32; gamma and beta as constants."""

    axis: int
    epsilon: float
    in_scale: float
    out_scale: float
    c_exactness = LIBM

    def run(self, inputs, out_shapes):
        x, gamma, beta = inputs
        return [kernels.layernorm(x, gamma, beta, self.axis, self.epsilon, self.in_scale, self.out_scale)]

    def calls(self, site: CallSite):
        x, gamma, beta = site.inputs
        outer = int(np.prod(x.shape[:self.axis], dtype=np.int64))
        return [CCall(LAYERNORM, (x.arg(), gamma.arg(), beta.arg(), site.outputs[0].arg(), outer,
                                  x.size // max(outer, 1), self.epsilon, self.in_scale, self.out_scale))]

    def cost_parts(self, site: CallSite):
        x = site.inputs[0]
        outer = int(np.prod(x.shape[:self.axis], dtype=np.int64))
        return [costs.layernorm_terms(outer, x.size // max(outer, 1))]

    def golden(self, site: CallSite) -> Tolerance:
        return FLOAT_REORDERING


LRN = CFunction("o2g_lrn", (X, Y, ("outer", Int("size_t")), ("channels", Int("size_t")), ("inner", Int("size_t")),
                            ("size", Int()), ("alpha_over_size", Float()), ("beta", Float()), ("bias", Float()),
                            *SCALES))


@cpu_kernel("lrn", LRN)
@dataclass(frozen=True)
class Lrn(CpuKernel):
    """ONNX LRN across the channels of `axis`, in float32."""

    axis: int
    size: int
    alpha: float
    beta: float
    bias: float
    in_scale: float
    out_scale: float
    c_exactness = LIBM

    def run(self, inputs, out_shapes):
        return [kernels.lrn(inputs[0], self.axis, self.size, self.alpha, self.beta, self.bias, self.in_scale,
                            self.out_scale)]

    def calls(self, site: CallSite):
        x = site.inputs[0]
        return [CCall(LRN, (x.arg(), site.outputs[0].arg(), *split(x.shape, self.axis), self.size,
                            self.alpha / self.size, self.beta, self.bias, self.in_scale, self.out_scale))]

    def cost_parts(self, site: CallSite):
        return [costs.lrn_terms(*split(site.inputs[0].shape, self.axis), self.size)]

    def golden(self, site: CallSite) -> Tolerance:
        return FLOAT_REORDERING


AFFINE = CFunction("o2g_affine", (X, ("x_row", Int("size_t")), ("mul", In("float")), ("add", In("float")), Y,
                                  ("outer", Int("size_t")), ("channels", Int("size_t")), ("inner", Int("size_t")),
                                  *SCALES, ("relu", Int())))


@cpu_kernel("affine", AFFINE)
@dataclass(frozen=True)
class Affine(CpuKernel):
    """y = x * mul + add per channel of `axis` in float32 (a standalone BatchNormalization), then ReLU.
    Reads strided rows, so x may be a channel slice of a concat buffer."""

    axis: int
    in_scale: float
    out_scale: float
    relu: bool = False

    def run(self, inputs, out_shapes):
        x, mul, add = inputs
        return [kernels.affine(x, mul, add, self.axis, self.in_scale, self.out_scale, self.relu)]

    def calls(self, site: CallSite):
        x, mul, add = site.inputs
        outer, c, inner = split(x.shape, self.axis)
        x_row = x.row_stride if x.row_stride != x.shape[-1] else c * inner
        return [CCall(AFFINE, (x.arg(), x_row, mul.arg(), add.arg(), site.outputs[0].arg(), outer, c, inner,
                               self.in_scale, self.out_scale, int(self.relu)))]

    def cost_parts(self, site: CallSite):
        return [costs.affine_terms(*split(site.inputs[0].shape, self.axis))]

    def golden(self, site: CallSite) -> Tolerance:
        return FLOAT_REORDERING


BINARY_FNS = ("add", "sub", "mul", "div", "max", "min", "prelu", "hypot")
OPERAND = Struct("o2g_operand", (("data", In("int8_t", "float")), ("is_float", Int()), ("scale", Float()),
                                 ("strides", List("int"))))
BINARY = CFunction("o2g_binary", (("fn", Int("int", tuple(f"O2G_{f.upper()}" for f in BINARY_FNS))),
                                  ("a", OPERAND), ("b", OPERAND), ("y", Out("int8_t")), ("rank", Int()),
                                  ("shape", List("int")), ("out_scale", Float()), ("relu", Int())))


def broadcast_strides(shape, out_shape) -> tuple[int, ...]:
    """Element strides of a row-major `shape` read at every index of `out_shape` (NumPy broadcasting)."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    strides, step = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = 0 if shape[d] == 1 and out_shape[d] != 1 else step
        step *= shape[d]
    return tuple(strides)


@cpu_kernel("binary", BINARY)
@dataclass(frozen=True)
class Binary(CpuKernel):
    """A broadcasting elementwise op in float32: int8 operands dequantized (a float constant's scale is
    None), the result quantized, with a fused ReLU."""

    fn: str
    in_scales: tuple[float | None, ...]
    out_scale: float
    relu: bool = False
    # onnxruntime fuses DQ -> Add/Mul -> Q into QLinearAdd/QLinearMul, which multiply the integer values by
    # one combined float scale: about 1% of the values of a SiLU's Mul land 1 LSB off the QDQ semantics.
    # Its float Add/Mul/Div/Max/Min of the model as written are IEEE operations, like this kernel's: exact.
    golden_unfused = True

    def run(self, inputs, out_shapes):
        return [kernels.binary(self.fn, inputs, self.in_scales, self.out_scale, self.relu)]

    def calls(self, site: CallSite):
        y = site.outputs[0]
        operands = tuple((x.arg(), int(s is None), 1.0 if s is None else s, broadcast_strides(x.shape, y.shape))
                         for x, s in zip(site.inputs, self.in_scales))
        return [CCall(BINARY, (BINARY_FNS.index(self.fn), *operands, y.arg(), len(y.shape), y.shape or (1,),
                               self.out_scale, int(self.relu)))]

    def cost_parts(self, site: CallSite):
        y = site.outputs[0]
        shape = y.shape or (1,)
        a, b = site.inputs
        sa, sb = (broadcast_strides(x.shape, y.shape) or (0,) for x in (a, b))
        return costs.binary_terms(self.fn, shape, sa, sb, self.in_scales[0] is None, self.in_scales[1] is None,
                                  self.relu)


RESIZE_LINEAR = CFunction("o2g_resize_linear", (X, Y, ("rank", Int()), ("in_shape", List("int")),
                                                ("out_shape", List("int")), ("naxes", Int()), ("axes", List("int")),
                                                ("lo", List("int64_t")), ("hi", List("int64_t")),
                                                ("w_lo", List("float")), ("w_hi", List("float")), *SCALES))


@cpu_kernel("resize_linear", RESIZE_LINEAR)
@dataclass(frozen=True)
class ResizeLinear(CpuKernel):
    """Linear Resize: per interpolated axis (storage order) and output position, two source positions and
    their float32 weights (ops/resize.py computes them as onnxruntime does), combined in onnxruntime's
    float32 order, then quantized."""

    axes: tuple[int, ...]
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    w_lo: tuple[float, ...]
    w_hi: tuple[float, ...]
    in_scale: float
    out_scale: float

    def run(self, inputs, out_shapes):
        f = inputs[0].astype(np.float32) * np.float32(self.in_scale)
        y = kernels.linear_interpolate(f, self.axes, self.lo, self.hi, self.w_lo, self.w_hi, out_shapes[0])
        return [quantize(y, self.out_scale)]

    def calls(self, site: CallSite):
        x, y = site.inputs[0], site.outputs[0]
        return [CCall(RESIZE_LINEAR, (x.arg(), y.arg(), len(x.shape), x.shape or (1,), y.shape or (1,),
                                      len(self.axes), self.axes or (0,), self.lo or (0,), self.hi or (0,),
                                      self.w_lo or (0.0,), self.w_hi or (0.0,), self.in_scale, self.out_scale))]

    def cost_parts(self, site: CallSite):
        return [costs.resize_terms("linear", site.inputs[0].shape, site.outputs[0].shape)]

    def golden(self, site: CallSite) -> Tolerance:
        return FLOAT_REORDERING


RESIZE_CUBIC = CFunction("o2g_resize_cubic", (X, Y, ("rank", Int()), ("in_shape", List("int")),
                                              ("out_shape", List("int")), ("axes", List("int")),
                                              ("pos", List("int64_t")), ("weight", List("float")),
                                              ("divisor", List("float")), *SCALES))


@cpu_kernel("resize_cubic", RESIZE_CUBIC)
@dataclass(frozen=True)
class ResizeCubic(CpuKernel):
    """Cubic Resize: the height and width axes (storage order), four source positions and float32 weights
    per output position of each, and the height weights' divisors (ops/resize.py computes them as
    onnxruntime does), combined in onnxruntime's float32 order, then quantized. Not the linear kernel with
    four taps: onnxruntime sums each row first, then the rows, where linear mode sums weighted corners."""

    axes: tuple[int, int]
    pos: tuple[int, ...]
    weight: tuple[float, ...]
    divisor: tuple[float, ...]
    in_scale: float
    out_scale: float

    def run(self, inputs, out_shapes):
        f = inputs[0].astype(np.float32) * np.float32(self.in_scale)
        y = kernels.cubic_interpolate(f, self.axes, self.pos, self.weight, self.divisor, out_shapes[0])
        return [quantize(y, self.out_scale)]

    def calls(self, site: CallSite):
        x, y = site.inputs[0], site.outputs[0]
        return [CCall(RESIZE_CUBIC, (x.arg(), y.arg(), len(x.shape), x.shape, y.shape, self.axes, self.pos,
                                     self.weight, self.divisor, self.in_scale, self.out_scale))]

    def cost_parts(self, site: CallSite):
        return [costs.resize_terms("cubic", site.inputs[0].shape, site.outputs[0].shape)]

    def golden(self, site: CallSite) -> Tolerance:
        return FLOAT_REORDERING


REDUCE_KINDS = ("sum", "mean", "max", "min", "l2")  # the order of enum o2g_reduce_kind
REDUCE = CFunction("o2g_reduce", (X, Y, ("outer", Int("size_t")), ("axis_len", Int("size_t")),
                                  ("inner", Int("size_t")),
                                  ("kind", Int("int", tuple(f"O2G_REDUCE_{k.upper()}" for k in REDUCE_KINDS))),
                                  *SCALES))


@cpu_kernel("reduce", REDUCE)
@dataclass(frozen=True)
class Reduce(CpuKernel):
    """ONNX ReduceSum/Mean/Max/Min/L2 over the axes [start, stop) of the input (adjacent: the lowering
    moves other reduced axes next to them first). The int8 values (squares for L2) are summed exactly as
    integers (or the extreme picked), then dequantized (after a correctly rounded square root for L2),
    divided by the count for the mean, and quantized: C and NumPy agree bit for bit."""

    kind: str
    start: int
    stop: int
    in_scale: float
    out_scale: float

    def run(self, inputs, out_shapes):
        x = inputs[0]
        outer, axis_len, inner = self._split(x.shape)
        v = x.reshape(outer, axis_len, inner)
        if self.kind in ("sum", "mean"):
            r = v.sum(axis=1, dtype=np.int64)
        elif self.kind == "l2":
            r = (v.astype(np.int64) ** 2).sum(axis=1)
        else:
            r = v.max(axis=1) if self.kind == "max" else v.min(axis=1)
        f = r.astype(np.float32)
        if self.kind == "l2":
            f = np.sqrt(f)
        f = f * np.float32(self.in_scale)
        if self.kind == "mean":
            f = f / np.float32(axis_len)
        return [quantize(f, self.out_scale).reshape(out_shapes[0])]

    def calls(self, site: CallSite):
        x = site.inputs[0]
        return [CCall(REDUCE, (x.arg(), site.outputs[0].arg(), *self._split(x.shape),
                               REDUCE_KINDS.index(self.kind), self.in_scale, self.out_scale))]

    def cost_parts(self, site: CallSite):
        return [costs.reduce_terms(self.kind, *self._split(site.inputs[0].shape))]

    def golden(self, site: CallSite) -> Tolerance:
        """onnxruntime sums the dequantized float32 values (in its own order) where we sum the integers:
        a rounding boundary is crossed rarely, except that a mean at the input's scale is a tie (sum/n =
        k + 1/2) once in n values, and onnxruntime's float sum rounds a tie either way. The largest and
        smallest values are exact."""
        if self.kind not in ("sum", "mean", "l2"):
            return EXACT
        n = self._split(site.inputs[0].shape)[1]
        if self.kind == "mean" and self.in_scale == self.out_scale and n % 2 == 0:
            return Tolerance(1, min(1.0, 1 / n + FLOAT_REORDERING.rate),
                             "sum/count ties, which onnxruntime's float32 sum rounds either way")
        return FLOAT_REORDERING

    def _split(self, shape) -> tuple[int, int, int]:
        prod = lambda dims: int(np.prod(dims, dtype=np.int64))  # noqa: E731
        return prod(shape[:self.start]), prod(shape[self.start:self.stop]), prod(shape[self.stop:])
