"""C signatures of the runtime's CPU kernels, and the calls a plan step makes to them.

Why data and not text: the C printer, the MLIR call builder, the generated MLIR ABI wrappers and the
test interpreter all need a kernel's ordered argument list. Declared once here (a `CFunction` per C
function of runtime/o2g_runtime.h), each reads it its own way:

* C prints the arguments in order (a tensor as its pointer, a list as a constant table, a struct as a
  compound literal);
* MLIR passes them in the same order, flattened to what a func.call can carry: a tensor or a list as an
  unranked memref, an integer as i64, a float as f32, a struct as its fields one by one;
* the generated `_mlir_ciface_o2g_rt_*` wrapper turns that back into the C call (scripts/gen_mlir_abi.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

# C element types of tensors and lists, with their NumPy dtype name and MLIR element type.
ELEMENTS = {"int8_t": ("int8", "i8"), "int32_t": ("int32", "i32"), "int64_t": ("int64", "i64"),
            "int": ("int32", "i32"), "float": ("float32", "f32")}
DTYPE_CTYPE = {"int8": "int8_t", "int32": "int32_t", "int64": "int64_t", "float32": "float"}


@dataclass(frozen=True)
class In:
    """A pointer to a tensor or constant the kernel reads. Several `ctypes`: a `const void *` whose
    data may be any of them (one MLIR symbol per combination)."""

    ctypes: tuple[str, ...]

    def __init__(self, *ctypes: str):
        object.__setattr__(self, "ctypes", ctypes)


@dataclass(frozen=True)
class Out:
    """A pointer to the tensor the kernel writes."""

    ctype: str


@dataclass(frozen=True)
class Int:
    """An integer; `ctype` is its C type (int, size_t, int8_t, ...); `names`: an enum's constants, which
    C prints instead of the value (names[value])."""

    ctype: str = "int"
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Float:
    """A float32."""


@dataclass(frozen=True)
class List:
    """A constant array of `ctype` (int, int64_t, int8_t or float)."""

    ctype: str


@dataclass(frozen=True)
class Struct:
    """A pointer to a struct (C: a compound literal; MLIR: its fields one by one, none of them a struct)."""

    ctype: str
    fields: tuple[tuple[str, "Kind"], ...]


Kind = Union[In, Out, Int, Float, List, Struct]


@dataclass(frozen=True)
class CFunction:
    """One C function of the runtime: its name and its parameters in order."""

    name: str
    params: tuple[tuple[str, Kind], ...]


@dataclass(frozen=True)
class TensorArg:
    """A tensor or constant passed by pointer: the plan id, or None for NULL (an absent bias; MLIR passes
    zeros of `shape` instead)."""

    id: str | None
    shape: tuple[int, ...] = ()
    dtype: str = "int32"


@dataclass(frozen=True)
class CCall:
    """One call of `function` with one value per parameter: TensorArg for In/Out, int, float, a tuple
    for List, a tuple of field values for Struct."""

    function: CFunction
    args: tuple

    def __post_init__(self):
        if len(self.args) != len(self.function.params):
            raise ValueError(f"{self.function.name}: {len(self.args)} arguments for "
                             f"{len(self.function.params)} parameters")


def window_struct() -> Struct:
    """struct o2g_window (o2g_runtime.h): a sliding window over the H and W axes of an NHWC tensor."""
    names = ("kernel_rows", "kernel_cols", "stride_rows", "stride_cols", "pad_top", "pad_left", "pad_bottom",
             "pad_right", "dilation_rows", "dilation_cols", "out_rows", "out_cols")
    return Struct("o2g_window", tuple((n, Int()) for n in names))
