"""The MLIR module's calls into the C runtime, and the C wrappers that receive them (docs/mlir.md).

Two kinds of callee:
* CPU ops: each call of a step's table entry (cpu/) becomes `func.call @o2g_rt_<function>` with the C
  function's arguments in order, flattened to what a call carries: a tensor or a list as an unranked
  memref (`memref<*xi8>`, `memref<*xi32>`, ...), an integer as `i64`, a float as `f32`, a struct as its
  fields. The C side, `_mlir_ciface_o2g_rt_<function>`, is generated from the same table
  (`cpu_wrappers`, written to runtime/o2g_mlir_cpu_abi.inc by scripts/gen_mlir_abi.py).
* Gemmini calls the dialect has no op for (resadd, global average, depthwise conv, convs tile_conv would
  get wrong): hand-written wrappers in runtime/o2g_mlir_abi.c around gemmini.h's `*_auto` functions.

Every declaration carries `llvm.emit_c_interface`. A function whose `const void *` argument takes
several element types gets one symbol per combination (`@o2g_rt_binary_i8_f32`).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

from ..cpu import CCall, CFunction, functions
from ..cpu.abi import DTYPE_CTYPE, ELEMENTS, Float, In, Int, List, Out, Struct
from ..errors import UnsupportedError
from ..plan import Conv, ConvDw, CpuOp, GlobalAverage, Plan, Resadd, Step


@dataclass(frozen=True)
class Arg:
    """A memref operand: a plan tensor or constant passed as a dense view with `shape`; `tensor=None`
    means an all-zero constant of `elem` (a missing bias)."""

    name: str
    tensor: str | None
    shape: tuple[int, ...]
    elem: str = "i32"


@dataclass(frozen=True)
class Scalar:
    name: str
    type: str            # "i64" | "f32"
    value: int | float


@dataclass(frozen=True)
class Array:
    """A parameter list passed as a constant `memref<*x{type}>` (its length is the memref's size)."""

    name: str
    type: str            # "i8" | "i32" | "i64" | "f32"
    values: tuple


@dataclass(frozen=True)
class RuntimeCall:
    symbol: str
    operands: tuple["Arg | Scalar | Array", ...]


def runtime_calls(step: Step, plan: Plan) -> list[RuntimeCall]:
    if isinstance(step, CpuOp):
        try:
            return [cpu_call(call) for call in step.params.calls(plan.call_site(step))]
        except ValueError as exc:
            raise UnsupportedError(f"--emit mlir: {step.node}: {exc}") from None
    builder = _GEMMINI.get(type(step))
    if builder is None:
        raise UnsupportedError(f"--emit mlir: no runtime call for {step.kind} step '{step.node}'")
    return [builder(step)]


# --- CPU kernels: calls and wrappers from the table -----------------------------------------------------

def _element(ctype: str) -> str:
    return ELEMENTS[ctype][1]


def _dtype_element(dtype: str) -> str:
    return _element(DTYPE_CTYPE[dtype])


def _kinds(function: CFunction):
    """(operand name, kind) of each parameter, structs replaced by their fields."""
    for name, kind in function.params:
        if isinstance(kind, Struct):
            yield from ((f"{name}_{field}", k) for field, k in kind.fields)
        else:
            yield name, kind


def _values(call: CCall):
    """The call's values in the order of _kinds."""
    for (name, kind), value in zip(call.function.params, call.args):
        yield from value if isinstance(kind, Struct) else (value,)


def _polymorphic(kind) -> bool:
    return isinstance(kind, In) and len(kind.ctypes) > 1


def symbol(function: CFunction, variant: tuple[str, ...] = ()) -> str:
    """o2g_rt_<function>, suffixed by the element types of its `const void *` arguments."""
    return "_".join(("o2g_rt_" + function.name.removeprefix("o2g_"),) + variant)


def variants(function: CFunction) -> list[tuple[str, ...]]:
    """Every combination of element types of the function's `const void *` arguments."""
    choices = [[_element(c) for c in kind.ctypes] for _, kind in _kinds(function) if _polymorphic(kind)]
    return [tuple(v) for v in itertools.product(*choices)]


def cpu_call(call: CCall) -> RuntimeCall:
    operands, variant = [], []
    for (name, kind), value in zip(_kinds(call.function), _values(call)):
        if isinstance(kind, (In, Out)):
            operands.append(Arg(name, value.id, tuple(value.shape), _dtype_element(value.dtype)))
            if _polymorphic(kind):
                variant.append(_dtype_element(value.dtype))
        elif isinstance(kind, Int):
            operands.append(Scalar(name, "i64", int(value)))
        elif isinstance(kind, Float):
            operands.append(Scalar(name, "f32", float(value)))
        elif isinstance(kind, List):
            operands.append(Array(name, _element(kind.ctype), tuple(value)))
        else:
            raise TypeError(f"no MLIR operand for {kind!r}")
    return RuntimeCall(symbol(call.function, tuple(variant)), tuple(operands))


def _c_value(name: str, kind, ctype: str | None = None) -> str:
    """The C expression a wrapper passes for one (flattened) parameter; `ctype`: the element type this
    variant gives a `const void *` argument."""
    if isinstance(kind, In):
        element = ctype or kind.ctypes[0]
        pointer = "void" if _polymorphic(kind) else element
        return f"(const {pointer} *)o2g_rt_data(__func__, {name}, sizeof({element}))"
    if isinstance(kind, Out):
        return f"({kind.ctype} *)o2g_rt_data(__func__, {name}, sizeof({kind.ctype}))"
    if isinstance(kind, List):
        return f"(const {kind.ctype} *)o2g_rt_data(__func__, {name}, sizeof({kind.ctype}))"
    if isinstance(kind, Int):
        return f"({kind.ctype}){name}"
    return name


def _c_param(name: str, kind) -> str:
    if isinstance(kind, (In, Out, List)):
        return f"o2g_unranked_memref *{name}"
    return f"int64_t {name}" if isinstance(kind, Int) else f"float {name}"


def _wrapper(function: CFunction, variant: tuple[str, ...]) -> list[str]:
    sym = symbol(function, variant)
    ctypes = iter(next(c for c, (_, e) in ELEMENTS.items() if e == v and c != "int") for v in variant)

    def value(name, kind):
        return _c_value(name, kind, next(ctypes) if _polymorphic(kind) else None)
    params, args = [], []
    for name, kind in function.params:
        if isinstance(kind, Struct):
            params += [_c_param(f"{name}_{f}", k) for f, k in kind.fields]
            fields = ", ".join(value(f"{name}_{f}", k) for f, k in kind.fields)
            args.append(f"&(const struct {kind.ctype}){{{fields}}}")
        else:
            params.append(_c_param(name, kind))
            args.append(value(name, kind))
    return (_wrap(f"void _mlir_ciface_{sym}(", params, ")", "    ") + ["{"]
            + _wrap(f"    {function.name}(", args, ");", "        ") + ["}", ""])


def _wrap(head: str, items: list[str], tail: str, indent: str, width: int = 110) -> list[str]:
    """head + items joined by ", " + tail, broken into lines of at most `width` columns where it can."""
    lines, line = [], head
    for i, item in enumerate(items):
        piece = item + (", " if i < len(items) - 1 else tail)
        if len(line) + len(piece) > width and line != head:
            lines.append(line.rstrip())
            line = indent
        line += piece
    return lines + [line if items else head + tail]


def cpu_wrappers() -> str:
    """runtime/o2g_mlir_cpu_abi.inc: one `_mlir_ciface_` wrapper per CPU-kernel symbol."""
    lines = ["/*", " * o2g_mlir_cpu_abi.inc: the MLIR ABI of the CPU kernels, generated from onnx2gemmini/cpu/ by",
             " * scripts/gen_mlir_abi.py -- do not edit. Included by o2g_mlir_abi.c, which defines o2g_rt_data().",
             " * Each wrapper passes its arguments on to the o2g_runtime.h function of the same name, in order:",
             " * memrefs as their (dense) data, i64 as the C integer type, structs rebuilt from their fields.", " */",
             ""]
    for name in sorted(functions()):
        function = functions()[name]
        for variant in variants(function):
            lines += _wrapper(function, variant)
    return "\n".join(lines)


# --- Gemmini calls without a dialect op: hand-written wrappers in o2g_mlir_abi.c ------------------------

def _resadd(step: Resadd) -> RuntimeCall:
    ij = (step.I, step.J)
    return RuntimeCall("o2g_rt_resadd", (Arg("A", step.A, ij, "i8"), Arg("B", step.B, ij, "i8"),
                                         Arg("C", step.C, ij, "i8"), Scalar("A_scale", "f32", step.A_scale),
                                         Scalar("B_scale", "f32", step.B_scale),
                                         Scalar("C_scale", "f32", step.C_scale),
                                         Scalar("relu", "i64", int(step.relu))))


def _global_average(step: GlobalAverage) -> RuntimeCall:
    return RuntimeCall("o2g_rt_global_average",
                       (Arg("input", step.input, (step.batches, step.dim, step.dim, step.channels), "i8"),
                        Arg("output", step.output, (step.batches, step.channels), "i8")))


def _conv(step: Conv) -> RuntimeCall:
    """A conv the dialect cannot lower correctly, through the C library's tiled_conv (the step's tiles;
    zeros: tiled_conv_auto's)."""
    poh, pow_ = step.pool_out_dims
    k2ic = step.kernel_dim * step.kernel_dim * step.in_channels
    operands = [Arg("input", step.input, (step.batch_size, step.in_row_dim, step.in_col_dim, step.in_channels), "i8"),
                Arg("weights", step.weights, (k2ic, step.out_channels), "i8"),
                Arg("bias", step.bias, (step.out_channels,)),
                Arg("output", step.output, (step.batch_size * poh * pow_, step.out_channels), "i8")]
    operands += [Scalar(n, "i64", getattr(step, n)) for n in
                 ("out_row_dim", "out_col_dim", "stride", "input_dilation", "kernel_dilation", "padding",
                  "kernel_dim", "act")]
    operands.append(Scalar("scale", "f32", step.scale))
    operands += [Scalar(n, "i64", getattr(step, n)) for n in ("pool_size", "pool_stride", "pool_padding")]
    operands += [Scalar(n, "i64", int((step.tiles or {}).get(n, 0))) for n in CONV_TILES]
    return RuntimeCall("o2g_rt_conv", tuple(operands))


CONV_TILES = ("batches", "porows", "pocols", "pochs", "krows", "kcols", "kchs")


def _conv_dw(step: ConvDw) -> RuntimeCall:
    """A depthwise conv: the dialect has no op for it, so the C library's tiled_conv_dw_auto runs it."""
    poh, pow_ = step.pool_out_dims
    n, c, k = step.batch_size, step.channels, step.kernel_dim
    operands = [Arg("input", step.input, (n, step.in_row_dim, step.in_col_dim, c), "i8"),
                Arg("weights", step.weights, (c, k, k), "i8"),
                Arg("bias", step.bias, (c,)),
                Arg("output", step.output, (n, poh, pow_, c), "i8")]
    operands += [Scalar(name, "i64", getattr(step, name)) for name in
                 ("out_row_dim", "out_col_dim", "stride", "padding", "kernel_dim", "act")]
    operands.append(Scalar("scale", "f32", step.scale))
    operands += [Scalar(name, "i64", getattr(step, name)) for name in ("pool_size", "pool_stride", "pool_padding")]
    return RuntimeCall("o2g_rt_conv_dw", tuple(operands))


_GEMMINI: dict[type, Callable[[Step], RuntimeCall]] = {Resadd: _resadd, GlobalAverage: _global_average,
                                                        Conv: _conv, ConvDw: _conv_dw}
