"""The MLIR module's calls into the C runtime: one `func.func private @o2g_rt_<op>` per step kind or CPU op.

The ABI (docs/mlir.md): every tensor is passed as an unranked memref (`memref<*xi8>`, `memref<*xf32>`,
`memref<*xi32>`) in the dense shape listed below, so the callee reads ranks and sizes from the descriptors;
tensors come first (inputs, then outputs), then the parameters: `i64` or `f32` scalars, and lists whose
length varies (a permutation) as `memref<*xi64>` / `memref<*xf32>` constants. So one symbol has one type
whatever the ranks and arities. Every declaration carries `llvm.emit_c_interface`: the C side implements
`_mlir_ciface_o2g_rt_<op>` (onnx2gemmini/runtime/o2g_mlir_abi.c).

A step kind or CPU op without an entry here still gets a call (see `generic_call`): its tensors
(constants too) in their plan shapes, then its parameters in sorted key order, floats as lossless `f64`;
a string parameter selects the function (`o2g_rt_<op>_<value>`). So a new CpuOp op needs only its runtime
function (and a Python model in tests/emit/mlir_interp.py).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import UnsupportedError
from ..plan import Conv, ConvDw, CpuOp, GlobalAverage, Plan, Quantize, Resadd, Step


@dataclass(frozen=True)
class Arg:
    """A memref argument: a plan tensor or constant passed as a dense view with `shape`; `tensor=None`
    means an all-zero int32 constant (a missing bias)."""

    name: str
    tensor: str | None
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Scalar:
    name: str
    type: str            # "i64" | "f32" | "f64"
    value: int | float


@dataclass(frozen=True)
class Array:
    """A parameter list passed as a constant `memref<*x{type}>` (its length is the memref's size)."""

    name: str
    type: str            # "i8" | "i64" | "f32" | "f64"
    values: tuple


@dataclass(frozen=True)
class RuntimeCall:
    symbol: str
    args: tuple[Arg, ...]
    params: tuple["Scalar | Array", ...]


_BUILDERS: dict[str, Callable[[Step, Plan], "RuntimeCall | list[RuntimeCall]"]] = {}


def abi(key: str):
    """Register the call builder of a step kind ("resadd") or a CPU op ("cpu.maxpool")."""
    def register(fn):
        if key in _BUILDERS:
            raise ValueError(f"runtime ABI for {key} registered twice")
        _BUILDERS[key] = fn
        return fn
    return register


def runtime_calls(step: Step, plan: Plan) -> list[RuntimeCall]:
    key = f"cpu.{step.op}" if isinstance(step, CpuOp) else step.kind
    calls = _BUILDERS.get(key, generic_call)(step, plan)
    return calls if isinstance(calls, list) else [calls]


def symbol(name: str) -> str:
    return "o2g_rt_" + (re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower() or "op")


def _ints(name: str, values) -> list[Scalar]:
    return [Scalar(f"{name}{i}", "i64", int(v)) for i, v in enumerate(values)]


def _number(x) -> bool:
    return isinstance(x, (bool, int, float, np.integer, np.floating))


def _params(items) -> list["Scalar | Array"]:
    """(name, value) pairs -> parameters: bool/int as i64, float as f64 (lossless), lists as constant
    arrays (i64, or f64 when any element is a float)."""
    out = []
    for name, value in items:
        if isinstance(value, (list, tuple)) and all(_number(v) for v in value):
            if all(isinstance(v, (bool, int, np.integer)) for v in value):
                out.append(Array(name, "i64", tuple(int(v) for v in value)))
            else:
                out.append(Array(name, "f64", tuple(float(v) for v in value)))
        elif isinstance(value, (bool, int, np.integer)):
            out.append(Scalar(name, "i64", int(value)))
        elif isinstance(value, (float, np.floating)):
            out.append(Scalar(name, "f64", float(value)))
        else:
            raise UnsupportedError(f"--emit mlir: parameter {name}={value!r} has no runtime ABI type; give the "
                                   "op an explicit ABI in emit/mlir_runtime.py")
    return out


def _plain(plan: Plan, tid: str, name: str) -> Arg:
    """A tensor or constant in its own (plan) shape."""
    shape = plan.constants[tid].shape if tid in plan.constants else plan.tensors[tid].shape
    return Arg(name, tid, tuple(shape))


def generic_call(step: Step, plan: Plan) -> RuntimeCall:
    """Tensors in plan shapes (reads, then writes); CpuOp params in sorted key order (string values name
    the function), other steps' numeric fields in declaration order."""
    args = [_plain(plan, t, f"in{i}") for i, t in enumerate(step.reads())]
    args += [_plain(plan, t, f"out{i}") for i, t in enumerate(step.writes())]
    if isinstance(step, CpuOp):
        items = sorted(step.params.items())
        name = "_".join([step.op] + [str(v) for _, v in items if isinstance(v, str)])
        params = _params((k, v) for k, v in items if not isinstance(v, str))
    else:
        params = _params((f.name, getattr(step, f.name)) for f in dataclasses.fields(step)
                         if f.name != "node" and _number(getattr(step, f.name)))
        name = step.kind
    return RuntimeCall(symbol(name), tuple(args), tuple(params))


@abi("quantize")
def _quantize(step: Quantize, plan: Plan) -> RuntimeCall:
    return RuntimeCall(symbol("quantize"), (_plain(plan, step.input, "x"), _plain(plan, step.output, "y")),
                       (Scalar("scale", "f32", step.scale), Scalar("to_nhwc", "i64", int(step.to_nhwc))))


@abi("resadd")
def _resadd(step: Resadd, plan: Plan) -> RuntimeCall:
    ij = (step.I, step.J)
    return RuntimeCall(symbol("resadd"), (Arg("A", step.A, ij), Arg("B", step.B, ij), Arg("C", step.C, ij)),
                       (Scalar("A_scale", "f32", step.A_scale), Scalar("B_scale", "f32", step.B_scale),
                        Scalar("C_scale", "f32", step.C_scale), Scalar("relu", "i64", int(step.relu))))


@abi("global_average")
def _global_average(step: GlobalAverage, plan: Plan) -> RuntimeCall:
    return RuntimeCall(symbol("global_average"),
                       (Arg("input", step.input, (step.batches, step.dim, step.dim, step.channels)),
                        Arg("output", step.output, (step.batches, step.channels))), ())


@abi("conv")
def _conv(step: Conv, plan: Plan) -> RuntimeCall:
    """A conv the dialect cannot lower correctly, through the C library's tiled_conv_auto."""
    poh, pow_ = step.pool_out_dims
    k2ic = step.kernel_dim * step.kernel_dim * step.in_channels
    args = (Arg("input", step.input, (step.batch_size, step.in_row_dim, step.in_col_dim, step.in_channels)),
            Arg("weights", step.weights, (k2ic, step.out_channels)),
            Arg("bias", step.bias, (step.out_channels,)),
            Arg("output", step.output, (step.batch_size * poh * pow_, step.out_channels)))
    scalars = [Scalar(n, "i64", getattr(step, n)) for n in
               ("out_row_dim", "out_col_dim", "stride", "input_dilation", "kernel_dilation", "padding",
                "kernel_dim", "act")]
    scalars.append(Scalar("scale", "f32", step.scale))
    scalars += [Scalar(n, "i64", getattr(step, n)) for n in ("pool_size", "pool_stride", "pool_padding")]
    return RuntimeCall(symbol("conv"), args, tuple(scalars))


@abi("conv_dw")
def _conv_dw(step: ConvDw, plan: Plan) -> RuntimeCall:
    """A depthwise conv: the dialect has no op for it, so the C library's tiled_conv_dw_auto runs it."""
    poh, pow_ = step.pool_out_dims
    n, c, k = step.batch_size, step.channels, step.kernel_dim
    args = (Arg("input", step.input, (n, step.in_row_dim, step.in_col_dim, c)),
            Arg("weights", step.weights, (c, k, k)),
            Arg("bias", step.bias, (c,)),
            Arg("output", step.output, (n, poh, pow_, c)))
    scalars = [Scalar(name, "i64", getattr(step, name)) for name in
               ("out_row_dim", "out_col_dim", "stride", "padding", "kernel_dim", "act")]
    scalars.append(Scalar("scale", "f32", step.scale))
    scalars += [Scalar(name, "i64", getattr(step, name)) for name in ("pool_size", "pool_stride", "pool_padding")]
    return RuntimeCall(symbol("conv_dw"), args, tuple(scalars))


def _unary(plan: Plan, step: CpuOp) -> tuple[Arg, Arg]:
    return _plain(plan, step.inputs[0], "x"), _plain(plan, step.outputs[0], "y")


def _window(p: dict) -> list[Scalar]:
    return (_ints("kernel", p["kernel"]) + _ints("stride", p["strides"]) + _ints("pad", p["pads"])
            + _ints("dilation", p["dilations"]))


@abi("cpu.transpose")
def _transpose(step: CpuOp, plan: Plan) -> RuntimeCall:
    perm = Array("perm", "i64", tuple(int(v) for v in step.params["perm"]))
    return RuntimeCall(symbol("transpose"), _unary(plan, step), (perm,))


@abi("cpu.concat")
def _concat(step: CpuOp, plan: Plan) -> list[RuntimeCall]:
    """One call per input, each copying (and requantizing) it into its slice of the output, so the
    signature does not depend on the number of inputs."""
    p, out = step.params, step.outputs[0]
    axis, calls, offset = int(p["axis"]), [], 0
    for tid, in_scale in zip(step.inputs, p["in_scales"]):
        calls.append(RuntimeCall(symbol("concat_into"), (_plain(plan, tid, "x"), _plain(plan, out, "y")),
                                 (Scalar("axis", "i64", axis), Scalar("offset", "i64", offset),
                                  Scalar("in_scale", "f32", float(in_scale)),
                                  Scalar("out_scale", "f32", float(p["out_scale"])))))
        offset += plan.tensors[tid].shape[axis]
    return calls


@abi("cpu.im2col")
def _im2col(step: CpuOp, plan: Plan) -> RuntimeCall:
    p = step.params
    return RuntimeCall(symbol("im2col"), _unary(plan, step), tuple(_window(p) + _ints("out", p["out"])))


@abi("cpu.maxpool")
def _maxpool(step: CpuOp, plan: Plan) -> RuntimeCall:
    return RuntimeCall(symbol("maxpool"), _unary(plan, step), tuple(_window(step.params)))


@abi("cpu.avgpool")
def _avgpool(step: CpuOp, plan: Plan) -> RuntimeCall:
    p = step.params
    return RuntimeCall(symbol("avgpool"), _unary(plan, step),
                       tuple(_window(p) + [Scalar("count_include_pad", "i64", int(p.get("count_include_pad", 0)))]))


@abi("cpu.clip")
def _clip(step: CpuOp, plan: Plan) -> RuntimeCall:
    p = step.params
    return RuntimeCall(symbol("clip"), _unary(plan, step),
                       (Scalar("lo", "i64", int(p["lo"])), Scalar("hi", "i64", int(p["hi"]))))


@abi("cpu.softmax")
def _softmax(step: CpuOp, plan: Plan) -> RuntimeCall:
    p = step.params
    return RuntimeCall(symbol("softmax"), _unary(plan, step),
                       (Scalar("axis", "i64", int(p["axis"])), Scalar("in_scale", "f32", float(p["in_scale"])),
                        Scalar("out_scale", "f32", float(p["out_scale"]))))


@abi("cpu.resize_linear")
def _resize_linear(step: CpuOp, plan: Plan) -> RuntimeCall:
    """Linear Resize: x, y; the interpolated axes and their per-output-position taps (i64 positions,
    f32 weights), so the signature is the same whatever the axes and sizes."""
    p = step.params
    lists = [Array(k, "i64", tuple(int(v) for v in p[k])) for k in ("axes", "lo", "hi")]
    lists += [Array(k, "f32", tuple(float(v) for v in p[k])) for k in ("w_lo", "w_hi")]
    return RuntimeCall(symbol("resize_linear"), _unary(plan, step),
                       tuple(lists) + (Scalar("in_scale", "f32", float(p["in_scale"])),
                                       Scalar("out_scale", "f32", float(p["out_scale"]))))


@abi("cpu.lut")
def _lut(step: CpuOp, plan: Plan) -> RuntimeCall:
    """y = table[x + 128]: the 256-entry int8 table as a constant."""
    table = Array("table", "i8", tuple(int(v) for v in step.params["table"]))
    return RuntimeCall(symbol("lut"), _unary(plan, step), (table,))


@abi("cpu.binary")
def _binary(step: CpuOp, plan: Plan) -> RuntimeCall:
    """An elementwise op with broadcasting, `o2g_rt_binary_<fn>_<kinds>`: kinds say, per operand, q (int8
    at its scale) or f (a float32 constant, scale 1)."""
    p = step.params
    kinds = "".join("f" if t in plan.constants else "q" for t in step.inputs)
    args = tuple(_plain(plan, t, n) for t, n in zip(step.inputs, "ab")) + (_plain(plan, step.outputs[0], "y"),)
    scales = [Scalar(f"{n}_scale", "f32", 1.0 if s is None else float(s)) for n, s in zip("ab", p["in_scales"])]
    return RuntimeCall(symbol(f"binary_{p['fn']}_{kinds}"), args,
                       tuple(scales) + (Scalar("out_scale", "f32", float(p["out_scale"])),
                                        Scalar("relu", "i64", int(bool(p.get("relu", False))))))


@abi("cpu.dwconv")
def _dwconv(step: CpuOp, plan: Plan) -> RuntimeCall:
    """Exact int8 depthwise conv: x NHWC, weights [KH][KW][C*multiplier], bias [C*multiplier] i32 (zeros
    when absent), y NHWC; the output size is y's."""
    p = step.params
    x, w = step.inputs[:2]
    bias = step.inputs[2] if len(step.inputs) > 2 else None
    channels = plan.constants[w].shape[-1]
    args = (_plain(plan, x, "x"), _plain(plan, w, "weights"), Arg("bias", bias, (channels,)),
            _plain(plan, step.outputs[0], "y"))
    return RuntimeCall(symbol("dwconv"), args,
                       tuple(_window(p) + [Scalar("multiplier", "i64", int(p["multiplier"])),
                                           Scalar("scale", "f32", float(p["scale"])),
                                           Scalar("relu", "i64", int(bool(p["relu"])))]))
