"""C for the plan's CPU steps: one printer per CpuOp op, each a call into runtime/o2g_runtime.h.

Kept apart from emit/c.py (the program's structure) so that adding a CPU op touches one small table
here, next to `tolerances`, which states how far each kernel's C result may be from the emulator's.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import UnsupportedError
from ..plan import CpuOp, Plan
from .banner import safe_comment_text

AVGPOOL_MAX_WINDOW = 1 << 17  # o2g_avgpool's integer rounding equals float32 division below this
INEXACT = {"softmax": 1, "lrn": 1, "layernorm": 1}  # expf/powf/sqrtf and summation order vs NumPy
MOVES = ("transpose", "clip", "maxpool", "im2col", "gather", "remap")  # select values: no new error
BINARY_FNS = {"add": "O2G_ADD", "sub": "O2G_SUB", "mul": "O2G_MUL", "div": "O2G_DIV", "max": "O2G_MAX",
              "min": "O2G_MIN", "prelu": "O2G_PRELU"}


def c_float(x: float) -> str:
    """An exact float32 literal in hex (0x1.8p-3f): the value Gemmini and the emulator use."""
    v = float(np.float32(x))
    if not np.isfinite(v):
        raise UnsupportedError(f"C back end: non-finite constant {x}")
    mant, exp = v.hex().split("p")
    mant = mant.rstrip("0").rstrip(".") if "." in mant else mant
    return f"{mant}p{exp}f"


def prod(values) -> int:
    return int(np.prod(list(values), dtype=np.int64))


def ints(values) -> str:
    return ", ".join(str(int(v)) for v in values)


def split(shape, axis: int) -> tuple[int, int, int]:
    """(outer, axis length, inner) of a shape around one axis."""
    return prod(shape[:axis]), int(shape[axis]), prod(shape[axis + 1:])


def window(p: dict, out) -> str:
    (kh, kw), (sh, sw), (dh, dw) = p["kernel"], p["strides"], p["dilations"]
    t, left, b, r = p["pads"]
    return ("&(const struct o2g_window){"
            f".kernel_rows = {kh}, .kernel_cols = {kw}, .stride_rows = {sh}, .stride_cols = {sw}, "
            f".pad_top = {t}, .pad_left = {left}, .pad_bottom = {b}, .pad_right = {r}, "
            f".dilation_rows = {dh}, .dilation_cols = {dw}, .out_rows = {out[0]}, .out_cols = {out[1]}}}")


def broadcast_strides(shape, out_shape) -> list[int]:
    """Element strides of a row-major `shape` read at every index of `out_shape` (NumPy broadcasting)."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    strides, step = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = 0 if shape[d] == 1 and out_shape[d] != 1 else step
        step *= shape[d]
    return strides


class CpuPrinter:
    """Prints one CpuOp as C lines; `tables` collects the static data (indices, lookup tables) it needs."""

    def __init__(self, plan: Plan, ptr: Callable[[str], str], prefix: str):
        self.plan, self.ptr, self.prefix = plan, ptr, prefix
        self.tables: list[str] = []

    def shape(self, tid: str) -> tuple[int, ...]:
        if tid in self.plan.constants:
            return tuple(self.plan.constants[tid].shape)
        return tuple(self.plan.tensors[tid].shape)

    def table(self, ctype: str, values, what: str) -> str:
        return self._table(ctype, [str(int(v)) for v in values] or ["0"], 16, what)

    def float_table(self, values, what: str) -> str:
        """float32 data as exact hex literals."""
        return self._table("float", [c_float(v) for v in values] or ["0.0f"], 8, what)

    def _table(self, ctype: str, literals: list[str], per_row: int, what: str) -> str:
        name = f"{self.prefix}_table_{len(self.tables)}"
        rows = [f"    {', '.join(literals[i:i + per_row])}," for i in range(0, len(literals), per_row)]
        self.tables += [f"/* {safe_comment_text(what)} */", f"static const {ctype} {name}[{len(literals)}] = {{"]
        self.tables += rows + ["};"]
        return name

    def print(self, s: CpuOp) -> list[str]:
        printer = getattr(self, "op_" + s.op, None)
        if printer is None:
            raise UnsupportedError(f"C back end: no C kernel for CPU op '{s.op}' (node {s.node})")
        return printer(s, s.params)

    def op_transpose(self, s, p):
        shape = self.shape(s.inputs[0])
        return [f"o2g_transpose({self.ptr(s.inputs[0])}, {self.ptr(s.outputs[0])}, {len(shape)}, "
                f"(const int[]){{{ints(shape)}}}, (const int[]){{{ints(p['perm'])}}});"]

    def op_clip(self, s, p):
        return [f"o2g_clip({self.ptr(s.inputs[0])}, {self.ptr(s.outputs[0])}, {prod(self.shape(s.inputs[0]))}, "
                f"{int(p['lo'])}, {int(p['hi'])});"]

    def op_softmax(self, s, p):
        outer, n, inner = split(self.shape(s.inputs[0]), int(p["axis"]))
        return [f"o2g_softmax({self.ptr(s.inputs[0])}, {self.ptr(s.outputs[0])}, {outer}, {n}, {inner}, "
                f"{c_float(p['in_scale'])}, {c_float(p['out_scale'])});"]

    def _windowed(self, s, p, extra: str = "") -> list[str]:
        n, h, w, c = self.shape(s.inputs[0])
        out = p.get("out") or self.shape(s.outputs[0])[1:3]
        return [f"o2g_{s.op}({self.ptr(s.inputs[0])}, {self.ptr(s.outputs[0])}, {n}, {h}, {w}, {c},",
                f"    {window(p, out)}{extra});"]

    def op_im2col(self, s, p):
        return self._windowed(s, p)

    def op_maxpool(self, s, p):
        return self._windowed(s, p)

    def op_avgpool(self, s, p):
        if prod(p["kernel"]) >= AVGPOOL_MAX_WINDOW:
            raise UnsupportedError(f"C back end: {s.node}: average-pool window {p['kernel']} too large for the "
                                   f"exact int8 kernel (at most {AVGPOOL_MAX_WINDOW - 1} positions)")
        return self._windowed(s, p, f", {int(p.get('count_include_pad', 0))}")

    def op_gather(self, s, p):
        outer, n, inner = split(self.shape(s.inputs[0]), int(p["axis"]))
        idx = self.table("int64_t", p["indices"], f"{s.node}: indices")
        return [f"o2g_gather({self.ptr(s.inputs[0])}, {self.ptr(s.outputs[0])}, {outer}, {n}, {inner}, {idx}, "
                f"{len(p['indices'])});"]

    def op_remap(self, s, p):
        in_shape, out_shape = self.shape(s.inputs[0]), self.shape(s.outputs[0])
        index = self.table("int64_t", p["index"], f"{s.node}: source index per output position and axis")
        return [f"o2g_remap({self.ptr(s.inputs[0])}, {self.ptr(s.outputs[0])}, {len(in_shape)}, "
                f"(const int[]){{{ints(in_shape) or '1'}}}, (const int[]){{{ints(out_shape) or '1'}}}, {index}, "
                f"{int(p['value'])});"]

    def op_resize_linear(self, s, p):
        in_shape, out_shape = self.shape(s.inputs[0]), self.shape(s.outputs[0])
        what = f"{s.node}: linear resize"
        lo, hi = (self.table("int64_t", p[k], f"{what}, {k} source positions") for k in ("lo", "hi"))
        w_lo, w_hi = (self.float_table(p[k], f"{what}, {k[2:]} weights") for k in ("w_lo", "w_hi"))
        return [f"o2g_resize_linear({self.ptr(s.inputs[0])}, {self.ptr(s.outputs[0])}, {len(in_shape)}, "
                f"(const int[]){{{ints(in_shape) or '1'}}}, (const int[]){{{ints(out_shape) or '1'}}},",
                f"    {len(p['axes'])}, (const int[]){{{ints(p['axes']) or '0'}}}, {lo}, {hi}, {w_lo}, {w_hi}, "
                f"{c_float(p['in_scale'])}, {c_float(p['out_scale'])});"]

    def op_concat(self, s, p):
        axis = int(p["axis"])
        out = s.outputs[0]
        outer, total, inner = split(self.shape(out), axis)
        if self.plan.tensors[out].slice_of:  # itself written in place: rows as wide as the tensor it is part of
            total = self.plan.row_stride(out)
        lines, offset = [], 0
        for tid, scale, in_place in zip(s.inputs, p["in_scales"], p.get("in_place", [False] * len(s.inputs))):
            n = self.shape(tid)[axis]
            if in_place:
                lines.append(f"/* channels {offset}..{offset + n - 1}: written in place by their producer */")
                offset += n
                continue
            lines.append(f"o2g_concat_part({self.ptr(tid)}, {self.ptr(s.outputs[0])}, {outer}, {n}, {inner}, "
                         f"{total}, {offset}, {c_float(scale)}, {c_float(p['out_scale'])});")
            offset += n
        return lines

    def op_lut(self, s, p):
        table = self.table("int8_t", p["table"], f"{s.node}: int8 lookup table")
        return [f"o2g_lut({self.ptr(s.inputs[0])}, {self.ptr(s.outputs[0])}, {prod(self.shape(s.inputs[0]))}, "
                f"{table});"]

    def op_binary(self, s, p):
        out_shape = self.shape(s.outputs[0])
        operands = []
        for tid, scale in zip(s.inputs, p["in_scales"]):
            strides = ints(broadcast_strides(self.shape(tid), out_shape)) or "0"
            is_float = int(scale is None)
            operands.append(f"&(const struct o2g_operand){{{self.ptr(tid)}, {is_float}, "
                            f"{c_float(1.0 if scale is None else scale)}, (const int[]){{{strides}}}}}")
        return [f"o2g_binary({BINARY_FNS[p['fn']]},", f"    {operands[0]},", f"    {operands[1]},",
                f"    {self.ptr(s.outputs[0])}, {len(out_shape)}, (const int[]){{{ints(out_shape) or '1'}}}, "
                f"{c_float(p['out_scale'])}, {int(bool(p.get('relu', False)))});"]

    def op_dwconv(self, s, p):
        n, h, w, c = self.shape(s.inputs[0])
        bias = self.ptr(s.inputs[2]) if len(s.inputs) > 2 else "NULL"
        return [f"o2g_dwconv({self.ptr(s.inputs[0])}, {self.ptr(s.inputs[1])}, {bias}, {self.ptr(s.outputs[0])}, "
                f"{n}, {h}, {w}, {c},",
                f"    {window(p, p['out'])}, {int(p['multiplier'])}, {c_float(p['scale'])}, {int(bool(p['relu']))});"]

    def op_affine(self, s, p):
        outer, c, inner = split(self.shape(s.inputs[0]), int(p["axis"]))
        x, mul, add = (self.ptr(t) for t in s.inputs)
        row = self.plan.row_stride(s.inputs[0]) if self.plan.tensors[s.inputs[0]].slice_of else c * inner
        return [f"o2g_affine({x}, {row}, {mul}, {add}, {self.ptr(s.outputs[0])}, {outer}, {c}, {inner}, "
                f"{c_float(p['in_scale'])}, {c_float(p['out_scale'])}, {int(bool(p.get('relu')))});"]

    def op_lrn(self, s, p):
        outer, c, inner = split(self.shape(s.inputs[0]), int(p["axis"]))
        return [f"o2g_lrn({self.ptr(s.inputs[0])}, {self.ptr(s.outputs[0])}, {outer}, {c}, {inner}, {int(p['size'])}, "
                f"{c_float(p['alpha'] / p['size'])}, {c_float(p['beta'])}, {c_float(p['bias'])}, "
                f"{c_float(p['in_scale'])}, {c_float(p['out_scale'])});"]

    def op_layernorm(self, s, p):
        shape = self.shape(s.inputs[0])
        axis = int(p["axis"])
        x, gamma, beta = (self.ptr(t) for t in s.inputs)
        return [f"o2g_layernorm({x}, {gamma}, {beta}, {self.ptr(s.outputs[0])}, {prod(shape[:axis])}, "
                f"{prod(shape[axis:])}, {c_float(p['epsilon'])}, {c_float(p['in_scale'])}, "
                f"{c_float(p['out_scale'])});"]


def tolerances(plan: Plan) -> dict[str, int]:
    """LSB each tensor of the C program may differ from the emulator's (0 = bit-exact), by tensor id.

    Only the float kernels with libm calls are inexact (INEXACT); moves and views pass a difference on
    unchanged; arithmetic on an inexact value has no useful bound, so its result is not compared (127)."""
    tol: dict[str, int] = {}

    def base(tid: str) -> str:
        return plan.base(tid).id if tid in plan.tensors else tid
    for step in plan.steps:
        worst = max((tol.get(base(t), 0) for t in step.reads()), default=0)
        op = step.op if isinstance(step, CpuOp) else ""
        same_scales = op == "concat" and len(set(step.params["in_scales"] + [step.params["out_scale"]])) == 1
        if op in INEXACT:
            out = max(worst, INEXACT[op])
        elif op in MOVES or same_scales:
            out = worst
        else:
            out = 127 if worst else 0
        for t in step.writes():
            tol[base(t)] = out
    return {tid: tol.get(base(tid), 0) for tid in plan.tensors}
