"""The Plan: the one contract between the front end (handlers, tiling) and the back ends (emitters, runners).

Every dataclass is frozen and mirrors a gemmini.h call field for field, so an emitter prints a step and a
runner executes it without knowing anything about ONNX.
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .cpu import CallSite, CpuKernel, Operand
from .numerics import along_axis
from .tolerance import Tolerance

NO_ACTIVATION, RELU = 0, 1


@dataclass(frozen=True)
class Tensor:
    """A buffer. Activations are int8; 4-D activations are stored NHWC (`layout`), the rest row-major."""

    id: str
    onnx_name: str
    shape: tuple[int, ...]          # in storage layout
    dtype: str = "int8"             # int8 | int32 | float32 (a model output kept float: scale None) | int64
    #                                 (int64/int32 model inputs: token ids, scale None)
    layout: str = "plain"           # plain | NHWC (ONNX NCHW data stored channels-last)
    scale: float | None = None
    kind: str = "activation"        # input | activation | output | weight | bias | temp
    view_of: str | None = None      # same bytes as another tensor, only the shape differs
    slice_of: str | None = None     # a range of the last axis of another tensor: its rows are strided
    offset: int = 0                 # first element of that range (slices only)
    # A model output that joins ranges (quantize.py): one scale per index along this ONNX-layout axis;
    # `scale` is then the largest.
    scale_axis: int | None = None
    axis_scales: tuple[float, ...] = ()

    @property
    def onnx_shape(self) -> tuple[int, ...]:
        if self.layout == "NHWC":
            n, h, w, c = self.shape
            return (n, c, h, w)
        return self.shape

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items()}

    def scales(self):
        """The scale of every value, broadcastable to the storage shape: one float32, or one per index along
        `scale_axis` (a float32 tensor holds real values: 1)."""
        if self.dtype == "float32":
            return np.float32(1.0)
        if self.scale_axis is None:
            return np.float32(self.scale)
        axis = (0, 2, 3, 1).index(self.scale_axis) if self.layout == "NHWC" else self.scale_axis  # ONNX -> storage
        return along_axis(self.axis_scales, axis, len(self.shape))

    def scale_runs(self) -> list[tuple[int, float]]:
        """`axis_scales` as (count, scale) runs, for comments: a detector's output has a few long runs."""
        runs: list[tuple[int, float]] = []
        for v in self.axis_scales:
            if runs and runs[-1][1] == v:
                runs[-1] = (runs[-1][0] + 1, v)
            else:
                runs.append((1, v))
        return runs

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """Real values of this tensor's int8 (or int32 accumulator, or float32) buffer (storage layout), as
        float32."""
        return q.astype(np.float32) * self.scales()


def base_of(tensors: dict[str, Tensor], tid: str) -> Tensor:
    """The tensor that owns `tid`'s bytes, following views and slices."""
    t = tensors[tid]
    while t.view_of is not None or t.slice_of is not None:
        t = tensors[t.view_of or t.slice_of]
    return t


def row_stride(tensors: dict[str, Tensor], tid: str) -> int:
    """Elements between consecutive rows (last-axis vectors) of `tid` in its base's bytes."""
    t = tensors[tid]
    return row_stride(tensors, t.slice_of) if t.slice_of is not None else t.shape[-1]


def elem_offset(tensors: dict[str, Tensor], tid: str) -> int:
    """Elements from the start of the base to `tid`'s first element."""
    t = tensors[tid]
    return t.offset + elem_offset(tensors, t.slice_of) if t.slice_of is not None else 0


@dataclass(frozen=True)
class Step:
    """Base of every plan step: `node` is the ONNX node it implements, `target` where it runs."""

    kind: ClassVar[str] = "step"
    target: ClassVar[str] = "gemmini"
    node: str

    def reads(self) -> tuple[str, ...]:
        return ()

    def writes(self) -> tuple[str, ...]:
        return ()

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "target": self.target}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            d[f.name] = list(v) if isinstance(v, tuple) else v
        return d


@dataclass(frozen=True)
class Matmul(Step):
    """tiled_matmul_auto / tiled_matmul: C[I][J] = act(scale * (A[I][K] B[K][J] + D)), WS dataflow; with
    full_C, C is int32 and receives the raw accumulators A·B + D (no scale, no activation)."""

    kind: ClassVar[str] = "matmul"
    I: int = 0
    J: int = 0
    K: int = 0
    A: str = ""
    B: str = ""
    D: str | None = None
    C: str = ""
    stride_A: int = 0
    stride_B: int = 0
    stride_D: int = 0
    stride_C: int = 0
    act: int = NO_ACTIVATION
    scale: float = 1.0
    repeating_bias: bool = True
    tiles: dict | None = None  # {"tile_I", "tile_J", "tile_K"} in DIM blocks; None = gemmini.h's heuristic
    heuristic_hazard: str = ""  # why gemmini.h's own tiles for this call are unsafe (then never used)
    mean_of: int = 0  # a global average of this many values as a matmul by ones (ops/pool.py); 0: a product
    full_C: bool = False  # C is acc_t: the accumulators read out at full width (config.acc_read_full_width)
    # act SOFTMAX (normalizer.py, configs with has_normalizations): the accumulators' real scale, from which
    # gemmini.h derives the I-BERT constants; A and B pass the mvin scaler on their way in (1.0: unscaled)
    bert_scale: float = 0.0
    A_scale_factor: float = 1.0
    B_scale_factor: float = 1.0

    @property
    def c_bytes(self) -> int:
        """Bytes per element of C: acc_t with full_C, elem_t otherwise."""
        return 4 if self.full_C else 1

    def reads(self):
        return (self.A, self.B) + ((self.D,) if self.D else ())

    def writes(self):
        return (self.C,)

    @property
    def macs(self) -> int:
        return self.I * self.J * self.K


class _PooledConv:
    """What Conv and ConvDw share: input/weights/bias in, one output, Gemmini's fused max-pool geometry."""

    def reads(self):
        return (self.input, self.weights) + ((self.bias,) if self.bias else ())

    def writes(self):
        return (self.output,)

    @property
    def pool_out_dims(self) -> tuple[int, int]:
        if not self.pool_stride:
            return self.out_row_dim, self.out_col_dim
        return tuple((d + 2 * self.pool_padding - self.pool_size) // self.pool_stride + 1
                     for d in (self.out_row_dim, self.out_col_dim))


@dataclass(frozen=True)
class Conv(_PooledConv, Step):
    """tiled_conv_auto / tiled_conv: NHWC input, [KH*KW*IC][OC] weights, int32 bias, fused ReLU and max-pool."""

    kind: ClassVar[str] = "conv"
    batch_size: int = 1
    in_row_dim: int = 0
    in_col_dim: int = 0
    in_channels: int = 0
    out_channels: int = 0
    out_row_dim: int = 0
    out_col_dim: int = 0
    stride: int = 1
    input_dilation: int = 1
    kernel_dilation: int = 1
    padding: int = 0
    kernel_dim: int = 1
    input: str = ""
    weights: str = ""
    bias: str | None = None
    output: str = ""
    act: int = NO_ACTIVATION
    scale: float = 1.0
    pool_size: int = 0
    pool_stride: int = 0
    pool_padding: int = 0
    tiles: dict | None = None  # batches, porows, pocols, pochs, krows, kcols, kchs
    heuristic_hazard: str = ""  # why gemmini.h's own tiles for this call are unsafe (then never used)
    in_stride: int = 0         # elements between input pixels (0: in_channels, dense)
    out_stride: int = 0        # elements between output pixels (0: out_channels, dense)

    def __post_init__(self):
        object.__setattr__(self, "in_stride", self.in_stride or self.in_channels)
        object.__setattr__(self, "out_stride", self.out_stride or self.out_channels)

    @property
    def macs(self) -> int:
        return (self.batch_size * self.out_row_dim * self.out_col_dim * self.out_channels
                * self.kernel_dim * self.kernel_dim * self.in_channels)


@dataclass(frozen=True)
class ConvDw(_PooledConv, Step):
    """tiled_conv_dw_auto: depthwise (multiplier 1), NHWC, [C][KH][KW] weights, int32 bias, fused ReLU/max-pool."""

    kind: ClassVar[str] = "conv_dw"
    batch_size: int = 1
    in_row_dim: int = 0
    in_col_dim: int = 0
    channels: int = 0
    out_row_dim: int = 0
    out_col_dim: int = 0
    stride: int = 1
    padding: int = 0
    kernel_dim: int = 1
    input: str = ""
    weights: str = ""
    bias: str | None = None
    output: str = ""
    act: int = NO_ACTIVATION
    scale: float = 1.0
    pool_size: int = 0
    pool_stride: int = 0
    pool_padding: int = 0

    @property
    def macs(self) -> int:
        return self.batch_size * self.out_row_dim * self.out_col_dim * self.channels * self.kernel_dim ** 2


@dataclass(frozen=True)
class Resadd(Step):
    """tiled_resadd_auto: C = act(C_scale * (sat8(A * A_scale) + sat8(B * B_scale))) over an I x J matrix."""

    kind: ClassVar[str] = "resadd"
    I: int = 0
    J: int = 0
    A_scale: float = 1.0
    B_scale: float = 1.0
    C_scale: float = 1.0
    A: str = ""
    B: str = ""
    C: str = ""
    relu: bool = False

    def reads(self):
        return (self.A, self.B)

    def writes(self):
        return (self.C,)


@dataclass(frozen=True)
class GlobalAverage(Step):
    """tiled_global_average_auto: NHWC [batches][dim][dim][channels] -> [batches][channels], RNE mean."""

    kind: ClassVar[str] = "global_average"
    input: str = ""
    output: str = ""
    batches: int = 1
    channels: int = 0
    dim: int = 0

    def reads(self):
        return (self.input,)

    def writes(self):
        return (self.output,)


@dataclass(frozen=True)
class CpuOp(Step):
    """A step the host core runs: one kernel of the CPU table (cpu/), with the reason it is not on Gemmini.

    `golden` overrides the kernel's own tolerance against onnxruntime where the ONNX node this step
    belongs to is checked against a golden with other semantics (ConvTranspose: onnxruntime sums in
    float32 and requantizes, Gemmini does not)."""

    kind: ClassVar[str] = "cpu"
    target: ClassVar[str] = "cpu"
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    params: CpuKernel | None = None
    reason: str = ""
    golden: Tolerance | None = None

    @property
    def op(self) -> str:
        return self.params.op

    def reads(self):
        return self.inputs

    def writes(self):
        return self.outputs

    def golden_tolerance(self, site: CallSite) -> Tolerance:
        return self.golden or self.params.golden(site)

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "target": self.target, "node": self.node, "op": self.op,
             "inputs": list(self.inputs), "outputs": list(self.outputs), "params": self.params.to_dict(),
             "reason": self.reason}
        if self.golden is not None:
            d["golden"] = dataclasses.asdict(self.golden)
        return d


@dataclass(frozen=True)
class Plan:
    """Everything a back end needs: buffers, constant data, steps in execution order, the config."""

    model_name: str
    model_sha256: str
    opset: int
    config: Any                       # GemminiConfig
    tensors: dict[str, Tensor]
    constants: dict[str, np.ndarray]  # weights (int8, Gemmini layout) and biases (int32)
    steps: tuple[Step, ...]
    inputs: tuple[str, ...]           # float model-input tensors, ONNX order
    outputs: tuple[str, ...]          # int8 tensors holding the model outputs, ONNX order
    calibration: dict = field(default_factory=dict)
    costs: tuple = ()                 # per step: tiling's cost figures (dict) or None; () before tiling.attach_costs

    def base(self, tensor_id: str) -> Tensor:
        return base_of(self.tensors, tensor_id)

    def row_stride(self, tensor_id: str) -> int:
        return row_stride(self.tensors, tensor_id)

    def elem_offset(self, tensor_id: str) -> int:
        return elem_offset(self.tensors, tensor_id)

    def operand(self, tid: str) -> Operand:
        """A tensor or constant as the CPU kernels' calls see it."""
        if tid in self.constants:
            c = self.constants[tid]
            return Operand(tid, tuple(c.shape), str(c.dtype), c.shape[-1] if c.ndim else 1, True)
        t = self.tensors[tid]
        return Operand(tid, t.shape, t.dtype, self.row_stride(tid) if t.shape else 1)

    def call_site(self, step: "CpuOp") -> CallSite:
        return CallSite(tuple(self.operand(t) for t in step.inputs), tuple(self.operand(t) for t in step.outputs))

    def to_dict(self) -> dict:
        return {
            "model": self.model_name,
            "sha256": self.model_sha256,
            "opset": self.opset,
            "config": self.config.to_dict(),
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "tensors": {k: v.to_dict() for k, v in self.tensors.items()},
            "constants": {k: {"dtype": str(v.dtype), "shape": list(v.shape),
                              "sha256": hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()}
                          for k, v in self.constants.items()},
            "steps": [s.to_dict() for s in self.steps],
            "calibration": self.calibration,
            "costs": list(self.costs),
        }
