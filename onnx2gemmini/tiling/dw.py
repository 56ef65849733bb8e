"""Depthwise convs: `tiled_conv_dw` on Gemmini or an exact int8 kernel on the host CPU — an ESTIMATE decides.

gemmini.h runs a depthwise conv one channel at a time: each kernel row is one weight block (its taps packed
in one scratchpad row) streamed against the channel's output rows, so the array does about kernel_dim
useful MACs per cycle (one PE column of DIM x DIM), plus fill/drain per channel. The host side is the runtime's o2g_dwconv: its instructions per MAC and per
output were measured on Spike, and become cycles through CPU_CPI. Both sides stay estimates in the report
(docs/cost_model.md).
"""
from __future__ import annotations

import math

from ..plan import ConvDw
from .cost import LOOP_OVERHEAD_BLOCKS, TileShape, weight_block_cycles

# Measured by scripts/measure_cpu_kernels.py: o2g_dwconv built with the generated Makefile's `riscv` flags
# (rv64gc, -O2 -ffast-math, picolibc), instret read around the call on Spike, over 32 geometries (3x3 and
# 5x5, stride 1 and 2, 16..256 channels, 7..56 pixels square). The kernel skips the window taps that fall in
# the padding and sets up each output pixel once for all its channels, so relative least squares over
#     instructions = a * MACs inside the input + b * outputs + c * output pixels
# fits every geometry within 1.2% (mean 0.3%); a two-term fit over padded MACs misses small maps by 25%.
# Re-run the script when o2g_dwconv changes (tests/test_tiling_dw.py fails when the constants go stale).
CPU_INSTRUCTIONS_PER_MAC = 4.70      # per multiply-accumulate of a tap inside the input
CPU_INSTRUCTIONS_PER_OUTPUT = 17.22  # per output value: bias, requantization, saturation, store
CPU_INSTRUCTIONS_PER_PIXEL = 135.24  # per output pixel (all channels): window bounds and row pointers
# Not measured: Spike retires one instruction per cycle. 1.0 is the lower bound of an in-order single-issue
# core such as Rocket (load-use stalls, its multi-cycle mul/div and cache misses only add), so the CPU
# estimate is optimistic and a depthwise conv leaves the CPU only when Gemmini beats even that.
CPU_CPI = 1.0


def taps_inside(size: int, kernel: int, stride: int, padding: int, out: int) -> int:
    """Window taps of one axis, summed over its `out` positions, that fall inside the input (not padding)."""
    return sum(1 for o in range(out) for t in range(kernel) if 0 <= o * stride + t - padding < size)


def valid_macs(step: ConvDw) -> int:
    """Multiply-accumulates o2g_dwconv performs: taps in the padding are skipped."""
    rows = taps_inside(step.in_row_dim, step.kernel_dim, step.stride, step.padding, step.out_row_dim)
    cols = taps_inside(step.in_col_dim, step.kernel_dim, step.stride, step.padding, step.out_col_dim)
    return step.batch_size * step.channels * rows * cols


def cpu_dw_instructions(step: ConvDw) -> float:
    """o2g_dwconv's instructions retired, from the measured fit."""
    pixels = step.batch_size * step.out_row_dim * step.out_col_dim
    return (valid_macs(step) * CPU_INSTRUCTIONS_PER_MAC + pixels * step.channels * CPU_INSTRUCTIONS_PER_OUTPUT
            + pixels * CPU_INSTRUCTIONS_PER_PIXEL)


def dw_dram_bytes(step: ConvDw) -> int:
    """Bytes moved by mvin/mvout: input and weights once, int32 bias, the (pooled) output once."""
    n, c = step.batch_size, step.channels
    out_rows, out_cols = step.pool_out_dims
    return (n * step.in_row_dim * step.in_col_dim * c + c * step.kernel_dim ** 2 + 4 * c
            + n * out_rows * out_cols * c)


def dw_shape(step: ConvDw, config) -> TileShape:
    """How gemmini.h feeds the array: tiled_conv_dw runs sp_tiled_conv per channel with one input channel,
    whose first-layer packing puts a kernel row's taps in one scratchpad row, so a channel is one weight
    block per kernel row, each streamed against the channel's output rows (runs of out_col_dim pixels,
    costed by weight_block_cycles: Gemmini's short-run rule), plus fill/drain per channel."""
    dim = config.dim
    rows = step.batch_size * step.out_row_dim
    taps = step.kernel_dim ** 2
    return TileShape(step.channels, rows * step.out_col_dim, 1, taps, step.kernel_dim,
                     weight_block_cycles(rows, step.out_col_dim, dim), LOOP_OVERHEAD_BLOCKS * dim)


def gemmini_dw_cycles(step: ConvDw, config) -> int:
    compute = dw_shape(step, config).cycles
    dma = -(-dw_dram_bytes(step) // (config.dma_bus_bits // 8))
    return max(compute, dma)


def cpu_dw_cycles(step: ConvDw) -> int:
    """o2g_dwconv's estimated cycles: measured instructions times CPU_CPI, rounded up."""
    return math.ceil(cpu_dw_instructions(step) * CPU_CPI)


def dw_cost(step: ConvDw, config) -> dict:
    """Report figures of a tiled_conv_dw call (its tiling is gemmini.h's own: there is no baseline to beat)."""
    est = gemmini_dw_cycles(step, config)
    ideal = -(-step.macs // (config.dim * config.dim))
    dram = dw_dram_bytes(step)
    return {"tiles": None, "baseline_tiles": None, "dram_bytes": dram, "baseline_dram_bytes": dram,
            "est_cycles": est, "baseline_est_cycles": est, "utilization": ideal / est if est else None,
            "baseline_utilization": ideal / est if est else None, "ideal_cycles": ideal,
            "cpu_est_cycles": cpu_dw_cycles(step)}
