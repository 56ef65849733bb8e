"""Unary activations as 256-entry int8 lookup tables, computed at compile time on the CPU's behalf.

table[q + 128] = quantize(f(q * s_in), s_out): every int8 input has exactly one output, so the table is
the whole function. onnxruntime evaluates f in float between DQ and Q; the two agree within 1 LSB.
Where quantize.float_tensors keeps the output float32 (a model output: a detector's sigmoid scores), the
table holds f(q * s_in) itself, computed in float64 and rounded once to float32.
"""
from __future__ import annotations

import math

import numpy as np

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp
from ..numerics import quantize
from .context import LowerContext
from .registry import Handler, Lowered, handler

_erf = np.vectorize(math.erf, otypes=[np.float32])


def _hard_sigmoid(x, alpha, beta):
    return np.clip(alpha * x + beta, 0, 1)


SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875  # ONNX's defaults (float32)

FUNCTIONS = {
    "Sigmoid": lambda x, a: 1 / (1 + np.exp(-x)),
    "Tanh": lambda x, a: np.tanh(x),
    "HardSigmoid": lambda x, a: _hard_sigmoid(x, a.get("alpha", 0.2), a.get("beta", 0.5)),
    "HardSwish": lambda x, a: x * _hard_sigmoid(x, 1 / 6, 0.5),
    "LeakyRelu": lambda x, a: np.where(x >= 0, x, a.get("alpha", 0.01) * x),
    "Elu": lambda x, a: np.where(x > 0, x, a.get("alpha", 1.0) * (np.exp(x) - 1)),
    "Selu": lambda x, a: a.get("gamma", SELU_GAMMA) * np.where(x > 0, x, a.get("alpha", SELU_ALPHA) * (np.exp(x) - 1)),
    "Softplus": lambda x, a: np.log1p(np.exp(x)),
    "Softsign": lambda x, a: x / (1 + np.abs(x)),
    "Erf": lambda x, a: _erf(x),
    "Gelu": lambda x, a: (0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))))
    if a.get("approximate", "none") == "tanh" else 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "Neg": lambda x, a: -x,
    "Abs": lambda x, a: np.abs(x),
    "Exp": lambda x, a: np.exp(x),
    "Sqrt": lambda x, a: np.sqrt(x),          # NaN below 0, quantized to -128 as onnxruntime does
    "Reciprocal": lambda x, a: np.float32(1) / x,
    "Log": lambda x, a: np.log(x),
}
SINCE = {"Gelu": 20, "HardSwish": 14}
# Finite at every finite input, so a float32 table of them is too (Exp, Log, Sqrt, Reciprocal and Pow may not be).
FINITE = frozenset({"Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu", "Softplus",
                    "Softsign", "Erf", "Gelu", "Neg", "Abs"})


def _at_every_input(fn, attrs, s_in: float, dtype) -> np.ndarray:
    """f at the 256 dequantized int8 inputs, computed in `dtype`, as float32."""
    x = np.arange(-128, 128, dtype=dtype) * dtype(np.float32(s_in))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return np.asarray(fn(x, attrs), dtype).astype(np.float32)


def lookup_table(fn, attrs, s_in: float, s_out: float) -> tuple[int, ...]:
    """In float32, as onnxruntime evaluates f between DQ and Q."""
    return tuple(int(v) for v in quantize(_at_every_input(fn, attrs, s_in, np.float32), s_out))


def float_table(fn, attrs, s_in: float) -> tuple[float, ...]:
    """f at every int8 input, in float64 rounded once to float32: the same table on every machine (NumPy's
    float32 kernels may differ in their last bit between CPUs; a float64 result rarely lies that close to a
    float32 rounding boundary)."""
    return tuple(float(v) for v in _at_every_input(fn, attrs, s_in, np.float64))


def lut_step(node: NodeView, ctx: LowerContext, fn, attrs, what: str) -> Lowered:
    """y = f(x) as one lookup table of the int8 input: int8 values, or float32 ones where the output is kept
    float (cpu.FloatLut)."""
    x = ctx.tensor(node.inputs[0])
    y = ctx.output(node.output, x.shape, x.layout)
    if y.dtype == "float32":
        params, kind = cpu.FloatLut(float_table(fn, attrs, x.scale)), "float32 lookup table (a model output)"
    else:
        params, kind = cpu.Lut(lookup_table(fn, attrs, x.scale, y.scale)), "int8 lookup table"
    step = CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=params,
                 reason=f"{what}: Gemmini has no such activation; {kind}")
    return Lowered([step], [y])


def gated(gate: tuple[str, tuple]):
    """x * f(x) for a fused gate (Fused.gate: f's op type and attributes)."""
    op, attrs = gate
    f = FUNCTIONS[op]
    return lambda x, a: x * np.asarray(f(x, dict(attrs)), x.dtype)


def lower_gated(node: NodeView, ctx: LowerContext) -> Lowered:
    """Mul(x, f(x)) as one lookup table of x (passes/fuse_gate.py)."""
    return lut_step(node, ctx, gated(node.fused.gate), {}, f"x * {node.fused.gate[0]}(x)")


BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power}


def chain_function(chain: tuple):
    """f(x) for a fused elementwise chain (Fused.chain, passes/fuse_elementwise.py), each op evaluated in x's
    dtype as onnxruntime evaluates it in float32."""
    def f(x, _attrs):
        values = []
        for op, operands, attrs in chain:
            args = [x if ref[0] == "x" else values[ref[1]] if ref[0] == "step" else x.dtype.type(ref[1])
                    for ref in operands]
            value = BINARY[op](*args) if op in BINARY else FUNCTIONS[op](args[0], dict(attrs))
            values.append(np.asarray(value, x.dtype))
        return values[-1]
    return f


def chain_is_finite(chain: tuple) -> bool:
    """Whether the chain is finite at every finite input (so a float32 table of it is): finite unary ops, and
    Add, Sub, Mul or a division by a non-zero constant."""
    return all(op in FINITE or op in ("Add", "Sub", "Mul") or op == "Div" and operands[1][0] == "const"
               and operands[1][1] != 0 for op, operands, _ in chain)


class _LutHandler(Handler):
    gemmini = "none: a 256-entry int8 lookup table on the CPU"
    limits = "1 LSB tolerance vs onnxruntime's float evaluation"

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        if node.fused.magnitude:  # sqrt(x*x + y*y) of two activations (passes/fuse_magnitude.py)
            from .binary import lower_binary
            return lower_binary(node, ctx, "sqrt(x*x + y*y): the magnitude of two int8 tensors in float32, the "
                                "squares never rounded to int8", fn="hypot")
        return lut_step(node, ctx, FUNCTIONS[node.op_type], dict(node.attrs), node.op_type)

    def writes_float(self, node: NodeView) -> bool:
        return node.op_type in FINITE


for _op in FUNCTIONS:
    handler(_op, since=SINCE.get(_op, 6))(type(f"{_op}Handler", (_LutHandler,), {}))


@handler("Pow", since=7)
class PowHandler(_LutHandler):
    """x ** p with a constant scalar exponent p (x.pow(2) of an RMSNorm, StarReLU's square): a function of
    one int8 value, so a lookup table like the activations."""

    limits = "a constant scalar exponent (else refused); 1 LSB tolerance vs onnxruntime's float evaluation"

    def check(self, node: NodeView, ctx) -> list[str]:
        exponent = node.const(node.inputs[1])
        if exponent is None or exponent.size != 1:
            return ["Pow: only a constant scalar exponent"]
        return []

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        p = np.float32(node.const(node.inputs[1]).reshape(()))
        return lut_step(node, ctx, lambda v, a: np.power(v, p), {}, f"Pow(x, {float(p):g})")


@handler("ElementwiseChain", since=1, domain="onnx2gemmini")
class ElementwiseChainHandler(Handler):
    gemmini = "none: a 256-entry int8 lookup table on the CPU"
    limits = ("not an ONNX op: what passes/fuse_elementwise.py makes of a chain of elementwise ops on one tensor "
              "(GELU written out, Mish, ...); 1 LSB tolerance vs onnxruntime's float evaluation of the chain")

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        ops = " -> ".join(op for op, _, _ in node.fused.chain)
        return lut_step(node, ctx, chain_function(node.fused.chain), {}, f"x -> {ops}")

    def writes_float(self, node: NodeView) -> bool:
        return chain_is_finite(node.fused.chain)
