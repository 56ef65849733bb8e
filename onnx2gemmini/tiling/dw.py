"""Depthwise convs: `tiled_conv_dw` on Gemmini or an exact int8 kernel on the host CPU — an ESTIMATE decides.

gemmini.h runs a depthwise conv one channel at a time: every kernel element is a 1x1 weight streamed
against DIM output pixels, so the array does about one useful MAC per cycle (one PE of DIM x DIM), plus
fill/drain per channel. The host side is the runtime's o2g_dwconv: its instructions per MAC and per
output were measured on Spike, and become cycles through CPU_CPI. Both sides stay estimates in the report
(docs/cost_model.md).
"""
from __future__ import annotations

import math

from ..plan import ConvDw

# Measured by scripts/measure_cpu_kernels.py: o2g_dwconv built with the generated Makefile's `riscv` flags
# (rv64gc, -O2 -ffast-math, picolibc), instret read around the call on Spike, over 32 geometries (3x3 and
# 5x5, stride 1 and 2, 16..256 channels, 7..56 pixels square); relative least squares gives
# instructions = 20.42 * MACs + 104.99 * outputs, within 9.4% of every geometry (mean 3.4%). MACs count
# padded window taps (ConvDw.macs), so small maps come out up to 9% over. Re-run it when o2g_dwconv changes.
CPU_INSTRUCTIONS_PER_MAC = 20.42
CPU_INSTRUCTIONS_PER_OUTPUT = 104.99
# Not measured: Spike retires one instruction per cycle. 1.0 is the lower bound of an in-order single-issue
# core such as Rocket (load-use stalls, its multi-cycle mul/div and cache misses only add), so the CPU
# estimate is optimistic and a depthwise conv leaves the CPU only when Gemmini beats even that.
CPU_CPI = 1.0
CPU_CYCLES_PER_MAC = CPU_INSTRUCTIONS_PER_MAC * CPU_CPI
CPU_CYCLES_PER_OUTPUT = CPU_INSTRUCTIONS_PER_OUTPUT * CPU_CPI


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
    """o2g_dwconv's estimated cycles: measured instructions times CPU_CPI, rounded up."""
    outputs = step.batch_size * step.out_row_dim * step.out_col_dim * step.channels
    return math.ceil(step.macs * CPU_CYCLES_PER_MAC + outputs * CPU_CYCLES_PER_OUTPUT)


def dw_cost(step: ConvDw, config) -> dict:
    """Report figures of a tiled_conv_dw call (its tiling is gemmini.h's own: there is no baseline to beat)."""
    est = gemmini_dw_cycles(step, config)
    ideal = -(-step.macs // (config.dim * config.dim))
    dram = dw_dram_bytes(step)
    return {"tiles": None, "baseline_tiles": None, "dram_bytes": dram, "baseline_dram_bytes": dram,
            "est_cycles": est, "baseline_est_cycles": est, "utilization": ideal / est if est else None,
            "baseline_utilization": ideal / est if est else None, "ideal_cycles": ideal,
            "cpu_est_cycles": cpu_dw_cycles(step)}
