"""A step's operands laid out as the flat DRAM arrays its call addresses, and its output read back.

Why strided copies: Matmul and Conv steps may read and write rows `stride` elements apart (slices of a
wider buffer). The machine addresses DRAM exactly as the call does, so each operand is placed at its
step's stride, the gaps filled with GAP: a load or store that strays into a gap changes the result.
Operands come dense (as the emulator holds them); the output comes back dense, in the emulator's shape.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..plan import Conv, ConvDw, GlobalAverage, Matmul, Resadd

GAP = 0x55


def _strided(x: np.ndarray, rows: int, width: int, stride: int, dtype) -> np.ndarray:
    buf = np.full((rows, stride), GAP, dtype)
    buf[:, :width] = np.asarray(x).reshape(rows, width)
    return buf.reshape(-1)


def _output(rows: int, width: int, stride: int, shape: tuple,
            dtype=np.int8) -> tuple[np.ndarray, Callable[[], np.ndarray]]:
    buf = np.full(rows * stride, GAP, dtype)
    return buf, lambda: buf.reshape(rows, stride)[:, :width].reshape(shape).copy()


def dram_of(step, arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], Callable[[], np.ndarray]]:
    """(DRAM arrays by the operand names the unroller uses, a function reading the output back)."""
    if isinstance(step, Matmul):
        dram = {"A": _strided(arrays[step.A], step.I, step.K, step.stride_A, np.int8),
                "B": _strided(arrays[step.B], step.K, step.J, step.stride_B, np.int8)}
        if step.D:
            d = np.asarray(arrays[step.D], np.int32)
            dram["D"] = (d.reshape(-1) if step.repeating_bias
                         else _strided(d, step.I, step.J, step.stride_D, np.int32))
        dram["C"], read = _output(step.I, step.J, step.stride_C, (step.I, step.J),
                                  np.int32 if step.full_C else np.int8)
    elif isinstance(step, (Conv, ConvDw)):
        ch = step.in_channels if isinstance(step, Conv) else step.channels
        oc = step.out_channels if isinstance(step, Conv) else step.channels
        in_stride, out_stride = (step.in_stride, step.out_stride) if isinstance(step, Conv) else (ch, oc)
        pixels = step.batch_size * step.in_row_dim * step.in_col_dim
        pr, pc = step.pool_out_dims
        dram = {"input": _strided(arrays[step.input], pixels, ch, in_stride, np.int8),
                "weights": np.asarray(arrays[step.weights], np.int8).reshape(-1)}
        if step.bias:
            dram["bias"] = np.asarray(arrays[step.bias], np.int32).reshape(-1)
        n_out = step.batch_size * pr * pc
        dram["output"], read = _output(n_out, oc, out_stride, (step.batch_size, pr, pc, oc))
    elif isinstance(step, Resadd):
        dram = {"A": np.asarray(arrays[step.A], np.int8).reshape(-1),
                "B": np.asarray(arrays[step.B], np.int8).reshape(-1)}
        dram["C"], read = _output(step.I, step.J, step.J, (step.I, step.J))
    elif isinstance(step, GlobalAverage):
        dram = {"input": np.asarray(arrays[step.input], np.int8).reshape(-1)}
        dram["output"], read = _output(step.batches, step.channels, step.channels,
                                       (step.batches, 1, 1, step.channels))
    else:
        raise TypeError(f"{type(step).__name__} is not a Gemmini step")
    return dram, read
