"""Depthwise convs: `tiled_conv_dw` on Gemmini or an exact int8 kernel on the host CPU — an ESTIMATE decides.

gemmini.h runs a depthwise conv one channel at a time: every kernel element is a 1x1 weight streamed
against DIM output pixels, so the array does about one useful MAC per cycle (one PE of DIM x DIM), plus
fill/drain per channel. The host side is an assumption for an in-order scalar core such as Rocket: about
CPU_CYCLES_PER_MAC per int8 multiply-accumulate and CPU_CYCLES_PER_OUTPUT to requantize an output.
Both are stated as estimates in the report, never as measurements (docs/cost_model.md).
"""
from __future__ import annotations

from .plan import ConvDw

CPU_CYCLES_PER_MAC = 4      # assumption: two loads, a multiply-add and loop overhead per int8 MAC
CPU_CYCLES_PER_OUTPUT = 12  # assumption: float32 scale, round, clip per output value


def dw_dram_bytes(step: ConvDw) -> int:
    """Bytes moved by mvin/mvout: input and weights once, int32 bias, the (pooled) output once."""
    n, c = step.batch_size, step.channels
    out_rows, out_cols = step.pool_out_dims
    return (n * step.in_row_dim * step.in_col_dim * c + c * step.kernel_dim ** 2 + 4 * c
            + n * out_rows * out_cols * c)


def gemmini_dw_cycles(step: ConvDw, config) -> int:
    dim = config.dim
    pixels = step.batch_size * step.out_row_dim * step.out_col_dim
    compute = step.channels * (step.kernel_dim ** 2 * -(-pixels // dim) * dim + 2 * dim)
    dma = -(-dw_dram_bytes(step) // (config.dma_bus_bits // 8))
    return max(compute, dma)


def cpu_dw_cycles(step: ConvDw) -> int:
    outputs = step.batch_size * step.out_row_dim * step.out_col_dim * step.channels
    return step.macs * CPU_CYCLES_PER_MAC + outputs * CPU_CYCLES_PER_OUTPUT


def dw_cost(step: ConvDw, config) -> dict:
    """Report figures of a tiled_conv_dw call (its tiling is gemmini.h's own: there is no baseline to beat)."""
    est = gemmini_dw_cycles(step, config)
    ideal = -(-step.macs // (config.dim * config.dim))
    dram = dw_dram_bytes(step)
    return {"tiles": None, "baseline_tiles": None, "dram_bytes": dram, "baseline_dram_bytes": dram,
            "est_cycles": est, "baseline_est_cycles": est, "utilization": ideal / est if est else None,
            "baseline_utilization": ideal / est if est else None, "ideal_cycles": ideal,
            "cpu_est_cycles": cpu_dw_cycles(step)}
