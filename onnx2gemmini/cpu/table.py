"""The table of CPU kernels: each CPU op of the Plan is one frozen params dataclass registered here.

An entry is the whole truth about one op, and everything else derives from it:
* its fields are the op's parameters (tuples, floats and ints only, so a Plan hashes and serializes);
* `run` is its NumPy semantics (the emulator calls it);
* `calls` is the ordered list of C runtime calls that implement it (the C printer, the MLIR call
  builder and the generated MLIR ABI wrappers read it);
* `golden` is how far it may be from onnxruntime's QDQ run, `c_exactness` how far its C kernel may be
  from `run` (libm); the checks of `diff`, the C self-test and the MLIR tests read them.

Adding a CPU op: one entry (in the module of its family) plus its C function in runtime/o2g_runtime.c,
then `python scripts/gen_mlir_abi.py` for the MLIR wrapper.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..tolerance import EXACT, Tolerance
from .abi import CCall, CFunction, TensorArg


@dataclass(frozen=True)
class Operand:
    """What a kernel's calls need to know about one of its tensors."""

    id: str
    shape: tuple[int, ...]      # the tensor's own (storage) shape
    dtype: str
    row_stride: int             # elements between consecutive rows (last-axis vectors) in its buffer
    constant: bool = False

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def arg(self) -> TensorArg:
        return TensorArg(self.id, self.shape, self.dtype)


@dataclass(frozen=True)
class CallSite:
    """A step's operands, as the emitters see them (slices keep their parent's row stride)."""

    inputs: tuple[Operand, ...]
    outputs: tuple[Operand, ...]


class CpuKernel:
    """Base of every CPU op's params dataclass (see the module docstring)."""

    op: ClassVar[str] = ""
    functions: ClassVar[tuple[CFunction, ...]] = ()   # every C function `calls` may use
    c_exactness: ClassVar[Tolerance] = EXACT
    # True: `diff` checks the op against onnxruntime's own float kernel of the QDQ model as written (its basic
    # optimization level), because the integer kernel onnxruntime fuses it into at its default level is an
    # approximation of those semantics, not the semantics (QLinearSoftmax)
    golden_unfused: ClassVar[bool] = False

    def run(self, inputs: list[np.ndarray], out_shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
        """The op's outputs from its inputs (int8 activations at their scales, constants as stored)."""
        raise NotImplementedError

    def calls(self, site: CallSite) -> list[CCall]:
        """The C runtime calls that compute the op on `site`'s buffers, in order."""
        raise NotImplementedError

    def golden(self, site: CallSite) -> Tolerance:
        """How far the op may be on `site` from onnxruntime running the QDQ model (EXACT: bit for bit)."""
        return EXACT

    def float_bound(self, input_bounds: list[float | None]) -> float | None:
        """The largest magnitude a float32 output of this op can hold, from its float32 inputs' bounds (None
        for an int8 one): compare.float_units compares float32 tensors in units of it. None: the op writes
        no float32 model output."""
        return None

    def macs(self, site: CallSite) -> int:
        """Multiply-accumulates the op performs on the CPU (the report's MACs; 0: not a conv or matmul)."""
        return 0

    def cost_parts(self, site: CallSite) -> list[tuple[str, dict]]:
        """(cost key, terms) of each C call `calls(site)` makes (cpu/costs.py; [] : no estimate)."""
        return []

    def instructions(self, site: CallSite) -> float | None:
        """Estimated instructions its C calls retire on the core (the report's CPU cycles; None: no estimate):
        the measured cost table (cpu/cost_table.py) over cost_parts."""
        parts = self.cost_parts(site)
        if not parts:
            return None
        from .costs import total_instructions
        return total_instructions(parts)

    def to_dict(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _plain(value):
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


KERNELS: dict[str, type[CpuKernel]] = {}


def cpu_kernel(op: str, *functions: CFunction):
    """Register a params dataclass as the CPU op `op`, implemented by the C `functions`."""
    def register(cls):
        if op in KERNELS:
            raise ValueError(f"CPU kernel {op} registered twice")
        cls.op, cls.functions = op, functions
        KERNELS[op] = cls
        return cls
    return register


@dataclass(frozen=True)
class Window:
    """A sliding window over the H and W axes of an NHWC tensor (ONNX pooling/conv attributes, resolved)."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]       # top, left, bottom, right
    dilations: tuple[int, int]
    out: tuple[int, int]                  # output rows, cols

    def struct(self) -> tuple[int, ...]:
        """The fields of struct o2g_window, in order."""
        return self.kernel + self.strides + self.pads + self.dilations + self.out
