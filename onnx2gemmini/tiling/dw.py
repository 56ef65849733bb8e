"""Depthwise convs: `tiled_conv_dw` on Gemmini or an exact int8 kernel on the host CPU — an ESTIMATE decides.

gemmini.h runs a depthwise conv one channel at a time: each kernel row is one weight block (its taps packed
in one scratchpad row) streamed against the channel's output rows, so the array does about kernel_dim
useful MACs per cycle (one PE column of DIM x DIM), plus fill/drain per channel. The host side is the
runtime's o2g_dwconv: its instructions per MAC, per output and per pixel were measured on Spike (the CPU
cost table, cpu/cost_table.py), and become cycles through the config's cpu_cpi, as every CPU step's do. Both sides stay estimates in the report
(docs/cost_model.md).
"""
from __future__ import annotations

from ..cpu import costs
from ..plan import ConvDw
from .cost import LOOP_OVERHEAD_BLOCKS, TileShape, weight_block_cycles

# The host side is the cost table's "dwconv" entry (cpu/cost_table.py, fitted on Spike by
# scripts/measure_cpu_kernels.py over 32 geometries: 3x3 and 5x5, stride 1 and 2, 16..256 channels, 7..56
# pixels square): o2g_dwconv skips the window taps that fall in the padding and sets up each output pixel once
# for all its channels, so instructions = a * MACs inside the input + b * outputs + c * output pixels (+ a
# per-call constant). Cycles = instructions x the config's cpu_cpi, the same as every other CPU step's.


def taps_inside(size: int, kernel: int, stride: int, padding: int, out: int) -> int:
    """Window taps of one axis, summed over its `out` positions, that fall inside the input (not padding)."""
    return costs.taps_inside(size, kernel, stride, padding, 1, out)


def _dw_terms(step: ConvDw):
    k, s, p = step.kernel_dim, step.stride, step.padding
    return costs.dwconv_terms(step.batch_size, step.in_row_dim, step.in_col_dim, step.channels, 1, (k, k), (s, s),
                              (p, p, p, p), (1, 1), (step.out_row_dim, step.out_col_dim))


def valid_macs(step: ConvDw) -> int:
    """Multiply-accumulates o2g_dwconv performs: taps in the padding are skipped."""
    return _dw_terms(step)[1]["mac"]


def cpu_dw_instructions(step: ConvDw) -> float:
    """o2g_dwconv's instructions retired, from the cost table."""
    return costs.instructions(*_dw_terms(step))


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


def cpu_dw_cycles(step: ConvDw, config) -> int:
    """o2g_dwconv's estimated cycles: measured instructions times the config's cpu_cpi, rounded up."""
    return costs.cycles(cpu_dw_instructions(step), config.cpu_cpi)


def dw_cost(step: ConvDw, config) -> dict:
    """Report figures of a tiled_conv_dw call (its tiling is gemmini.h's own: there is no baseline to beat)."""
    est = gemmini_dw_cycles(step, config)
    ideal = -(-step.macs // (config.dim * config.dim))
    dram = dw_dram_bytes(step)
    return {"tiles": None, "baseline_tiles": None, "dram_bytes": dram, "baseline_dram_bytes": dram,
            "est_cycles": est, "baseline_est_cycles": est, "utilization": ideal / est if est else None,
            "baseline_utilization": ideal / est if est else None, "ideal_cycles": ideal,
            "cpu_est_cycles": cpu_dw_cycles(step, config)}
