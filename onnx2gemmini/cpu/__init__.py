"""The CPU half of the Plan: one typed kernel per CPU op (table.py), grouped by family.

    moves      transpose, clip, gather, remap, concat, lut: int8 values moved (or requantized), exact
    windows    im2col, maxpool, avgpool, dwconv: sliding windows over NHWC tensors
    float_ops  quantize, softmax, layernorm, lrn, affine, binary, resize_linear, reduce: float32 between DQ
               and Q
"""
from .abi import CCall, CFunction, TensorArg
from .float_ops import Affine, Binary, LayerNorm, Lrn, Quantize, Reduce, ResizeLinear, Softmax
from .moves import Clip, Concat, Gather, Lut, Remap, Transpose
from .table import KERNELS, CallSite, CpuKernel, Operand, Window
from .windows import Avgpool, Dwconv, Im2col, Maxpool

__all__ = ["KERNELS", "Affine", "Avgpool", "Binary", "CCall", "CFunction", "CallSite", "Clip", "Concat",
           "CpuKernel", "Dwconv", "Gather", "Im2col", "LayerNorm", "Lrn", "Lut", "Maxpool", "Operand", "Quantize",
           "Reduce", "Remap", "ResizeLinear", "Softmax", "TensorArg", "Transpose", "Window", "functions"]


def functions() -> dict[str, CFunction]:
    """Every C function the CPU kernels call, by name."""
    return {f.name: f for kernel in KERNELS.values() for f in kernel.functions}
