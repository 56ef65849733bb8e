"""C for the plan's CPU steps: each step's calls (cpu/ table) printed against runtime/o2g_runtime.h.

Why a printer of data: a CPU op's C call is its table entry's `calls`, an ordered argument list with
kinds (cpu/abi.py); this module only spells each kind in C, so adding a CPU op never touches it.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..cpu.abi import CCall, Float, In, Int, List, Out, Struct, TensorArg
from ..errors import UnsupportedError
from ..plan import CpuOp, Plan
from .names import c_comment

INLINE_LIST = 16      # lists up to this length are compound literals; longer ones static tables
LINE = 110


def c_float(x: float) -> str:
    """An exact float32 literal in hex (0x1.8p-3f): the value Gemmini and the emulator use."""
    v = float(np.float32(x))
    if not np.isfinite(v):
        raise UnsupportedError(f"C back end: non-finite constant {x}")
    mant, exp = v.hex().split("p")
    mant = mant.rstrip("0").rstrip(".") if "." in mant else mant
    return f"{mant}p{exp}f"


class CpuPrinter:
    """Prints a CpuOp's calls; `tables` collects the static arrays (long lists) they refer to."""

    def __init__(self, plan: Plan, ptr: Callable[[str], str], prefix: str):
        self.plan, self.ptr, self.prefix = plan, ptr, prefix
        self.tables: list[str] = []

    def print(self, step: CpuOp) -> list[str]:
        try:
            calls = step.params.calls(self.plan.call_site(step))
        except ValueError as exc:
            raise UnsupportedError(f"C back end: {step.node}: {exc}") from None
        lines = []
        for call in calls:
            lines += self.call(call, step.node)
        return lines

    def call(self, call: CCall, node: str) -> list[str]:
        """`name(args);`, wrapped at LINE columns."""
        args = [self.arg(kind, value, f"{node}: {name}") for (name, kind), value in
                zip(call.function.params, call.args)]
        lines, line = [], f"{call.function.name}("
        for i, a in enumerate(args):
            piece = a + (", " if i < len(args) - 1 else ");")
            if len(line) + len(piece) > LINE and line.strip() not in ("", f"{call.function.name}("):
                lines.append(line.rstrip())
                line = "    "
            line += piece
        return lines + [line]

    def arg(self, kind, value, what: str) -> str:
        if isinstance(kind, (In, Out)):
            return self.pointer(value)
        if isinstance(kind, Int):
            return kind.names[value] if kind.names else str(int(value))
        if isinstance(kind, Float):
            return c_float(value)
        if isinstance(kind, List):
            return self.list(kind.ctype, value, what)
        if isinstance(kind, Struct):
            fields = ", ".join(self.arg(k, v, f"{what}.{n}") for (n, k), v in zip(kind.fields, value))
            return f"&(const struct {kind.ctype}){{{fields}}}"
        raise TypeError(f"no C spelling for {kind!r}")

    def pointer(self, value: TensorArg) -> str:
        return "NULL" if value.id is None else self.ptr(value.id)

    def list(self, ctype: str, values, what: str) -> str:
        literals = [c_float(v) for v in values] if ctype == "float" else [str(int(v)) for v in values]
        if ctype == "int" and len(literals) <= INLINE_LIST:
            return f"(const int[]){{{', '.join(literals)}}}"
        name = f"{self.prefix}_table_{len(self.tables)}"
        per_row = 8 if ctype == "float" else 16
        self.tables += [f"/* {c_comment(what)} */", f"static const {ctype} {name}[{len(literals)}] = {{"]
        self.tables += [f"    {', '.join(literals[i:i + per_row])}," for i in range(0, len(literals), per_row)]
        self.tables.append("};")
        return name
