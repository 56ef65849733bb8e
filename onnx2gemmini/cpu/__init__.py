"""The CPU half of the Plan: one typed kernel per CPU op (table.py), grouped by family.

    moves      transpose, clip, gather, embedding, position_embedding, mask_rows, remap, concat, lut: int8 values moved (or requantized),
               exact; lut_f32: a float32 model output's lookup table
    windows    im2col, maxpool, avgpool, dwconv: sliding windows over NHWC tensors
    float_ops  quantize, softmax, softmax_masked, softmax_input_mask, layernorm, lrn, affine, binary,
               resize_linear, resize_cubic, reduce: float32 between DQ and Q
    recurrent  the LSTM / GRU recurrence in float32 over int8 input projections
    float_layers  float_conv: a conv or matmul kept float by --keep-float (float32 weights)
"""
from .abi import CCall, CFunction, TensorArg
from .float_layers import FloatConv
from .float_ops import (Affine, Binary, InputMaskedSoftmax, LayerNorm, Lrn, MaskedSoftmax, Quantize, Reduce,
                        ResizeCubic, ResizeLinear, Softmax)
from .moves import (Clip, Concat, Embedding, FloatLut, Gather, Lut, MaskRows, PositionEmbedding, Remap,
                    Transpose)
from .recurrent import Recurrent
from .table import KERNELS, CallSite, CpuKernel, Operand, Window
from .windows import Avgpool, Dwconv, Im2col, Maxpool

__all__ = ["KERNELS", "Affine", "Avgpool", "Binary", "CCall", "CFunction", "CallSite", "Clip", "Concat",
           "CpuKernel", "Dwconv", "Embedding", "FloatConv", "FloatLut", "Gather", "Im2col", "InputMaskedSoftmax", "LayerNorm", "Lrn", "Lut",
           "MaskRows", "MaskedSoftmax", "Maxpool", "Operand", "PositionEmbedding", "Quantize", "Recurrent", "Reduce", "Remap", "ResizeCubic",
           "ResizeLinear", "Softmax", "TensorArg", "Transpose", "Window", "functions"]


def functions() -> dict[str, CFunction]:
    """Every C function the CPU kernels call, by name."""
    return {f.name: f for kernel in KERNELS.values() for f in kernel.functions}
