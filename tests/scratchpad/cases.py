"""Steps with random operands and their whole-call emulator results (kernels.py), for the
address-level tests: each builder returns (step, inputs, constants, reference output)."""
from __future__ import annotations

import numpy as np

from onnx2gemmini.plan import Conv, ConvDw, GlobalAverage, Matmul, Resadd
from onnx2gemmini import kernels


def _int8(rng, shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


def conv_case(seed: int, batch, rows, cols, in_ch, out_ch, kernel, stride, padding, pool=None, relu=True,
              bias=True, in_extra=0, out_extra=0):
    """A Conv step (NHWC, HWIO weights), optionally with strided input/output pixels."""
    rng = np.random.default_rng(seed)
    out_r, out_c = (rows + 2 * padding - kernel) // stride + 1, (cols + 2 * padding - kernel) // stride + 1
    size, pstride, ppad = pool or (0, 0, 0)
    step = Conv("conv", batch_size=batch, in_row_dim=rows, in_col_dim=cols, in_channels=in_ch, out_channels=out_ch,
                out_row_dim=out_r, out_col_dim=out_c, stride=stride, padding=padding, kernel_dim=kernel,
                input="x", weights="w", bias="b" if bias else None, output="y", act=int(relu),
                scale=float(rng.uniform(0.0005, 0.02)), pool_size=size, pool_stride=pstride, pool_padding=ppad,
                in_stride=in_ch + in_extra, out_stride=out_ch + out_extra)
    x = _int8(rng, (batch, rows, cols, in_ch))
    w = _int8(rng, (kernel * kernel * in_ch, out_ch))
    b = rng.integers(-30000, 30000, out_ch).astype(np.int32)
    ref = kernels.conv(x, w, b if bias else None, stride, padding, kernel, (out_r, out_c), step.scale, relu,
                       pool if pool else None)
    return step, {"x": x}, {"w": w, "b": b}, ref


def matmul_case(seed: int, I, J, K, bias: str, relu: bool, extra=(0, 0, 0, 0)):
    """A Matmul step; bias 'none', 'repeating' (one row) or 'full' (I x J); strides = width + extra."""
    rng = np.random.default_rng(seed)
    step = Matmul("mm", I=I, J=J, K=K, A="a", B="w", D=None if bias == "none" else "d", C="c",
                  stride_A=K + extra[0], stride_B=J + extra[1], stride_D=J + extra[2], stride_C=J + extra[3],
                  act=int(relu), scale=float(rng.uniform(0.0005, 0.02)), repeating_bias=bias != "full")
    a, w = _int8(rng, (I, K)), _int8(rng, (K, J))
    d = rng.integers(-30000, 30000, J if bias == "repeating" else (I, J)).astype(np.int32)
    ref = kernels.matmul(a, w, None if bias == "none" else d, step.scale, relu, bias != "full")
    return step, {"a": a}, {"w": w, "d": d}, ref


def resadd_case(seed: int, I, J, scales, relu: bool):
    rng = np.random.default_rng(seed)
    step = Resadd("add", I=I, J=J, A_scale=scales[0], B_scale=scales[1], C_scale=scales[2], A="a", B="b", C="c",
                  relu=relu)
    a, b = _int8(rng, (I, J)), _int8(rng, (I, J))
    return step, {"a": a, "b": b}, {}, kernels.resadd(a, b, *scales, relu)


def global_average_case(seed: int, batches, channels, dim):
    rng = np.random.default_rng(seed)
    step = GlobalAverage("gap", input="x", output="y", batches=batches, channels=channels, dim=dim)
    x = _int8(rng, (batches, dim, dim, channels))
    return step, {"x": x}, {}, kernels.global_average(x)


def conv_dw_case(seed: int, batch, rows, cols, channels, kernel, stride, padding, pool=None, relu=True):
    """A ConvDw step ([C][KH][KW] weights), referenced as the emulator runs it."""
    rng = np.random.default_rng(seed)
    out_r, out_c = (rows + 2 * padding - kernel) // stride + 1, (cols + 2 * padding - kernel) // stride + 1
    size, pstride, ppad = pool or (0, 0, 0)
    step = ConvDw("dw", batch_size=batch, in_row_dim=rows, in_col_dim=cols, channels=channels, out_row_dim=out_r,
                  out_col_dim=out_c, stride=stride, padding=padding, kernel_dim=kernel, input="x", weights="w",
                  bias="b", output="y", act=int(relu), scale=float(rng.uniform(0.002, 0.05)), pool_size=size,
                  pool_stride=pstride, pool_padding=ppad)
    x = _int8(rng, (batch, rows, cols, channels))
    w = _int8(rng, (channels, kernel, kernel))
    b = rng.integers(-3000, 3000, channels).astype(np.int32)
    ref = kernels.depthwise_conv(x, w.transpose(1, 2, 0), b, (kernel, kernel), (stride, stride), (padding,) * 4,
                                 (1, 1), (out_r, out_c), 1, step.scale, relu)
    if pool:
        ref = kernels.maxpool_zero_padded(ref, *pool)
    return step, {"x": x}, {"w": w, "b": b}, ref
