"""Scratchpad/accumulator rows a tile needs, counted exactly as gemmini.h counts them.

Why exactly gemmini.h's accounting: `tiled_matmul`/`tiled_conv` with GEMMINI_ASSERTIONS (and our host
header, runtime/host/gemmini.h) refuse a tile that does not fit by *their* count, so a tile we choose must
pass their count, not a more precise one. WS double-buffers: one tile may use half the scratchpad
(`BANK_NUM*BANK_ROWS/2`) and half the accumulator (`ACC_ROWS/2`).
"""
from __future__ import annotations

from .geometry import ConvGeometry, ceil_div


def budgets(config) -> tuple[int, int]:
    """(scratchpad rows, accumulator rows) one double-buffered tile may use."""
    return config.sp_rows // 2, config.acc_rows // 2


def matmul_rows(tiles, config) -> tuple[int, int]:
    """tiled_matmul_total_spad_rows / _acc_rows: tiles in DIM blocks -> (spad rows, acc rows)."""
    ti, tj, tk = tiles
    return (ti * tk + tk * tj) * config.dim, ti * tj * config.dim


def matmul_fits(tiles, config, dims: tuple[int, int, int] | None = None) -> bool:
    """The checks `tiled_matmul` (WS) makes: positive tiles within half of each memory, and, when the
    problem `dims` (I, J, K in elements) are given, no tile larger than the padded problem."""
    if min(tiles) < 1:
        return False
    spad, acc = matmul_rows(tiles, config)
    max_spad, max_acc = budgets(config)
    if spad > max_spad or acc > max_acc:
        return False
    if dims is not None:
        return all(t <= ceil_div(d, config.dim) for t, d in zip(tiles, dims))
    return True


def conv_rows(tiles, geometry, config) -> tuple[int, int]:
    """tiled_conv_total_spad_rows(false/true, ...): (A+B spad rows, C acc rows) of one conv tile.

    Pooling-aware: a tile of `porows` pooled rows needs `porows*pool_stride + pool_size - 1` conv rows and
    the input rows under them; the downsample path loads every other input row and column.
    """
    g = ConvGeometry.of(geometry)
    batches, porows, pocols, ochs, krows, kcols, kchs = tiles
    pool_size, pool_stride, _ = g.pool
    dim = config.dim
    orows = porows * pool_stride + pool_size - 1
    ocols = pocols * pool_stride + pool_size - 1
    krows_dilated = krows + (g.kernel_dilation - 1) * (krows - 1)
    kcols_dilated = kcols + (g.kernel_dilation - 1) * (kcols - 1)
    irows = ceil_div(orows * g.stride + krows_dilated - 1, g.input_dilation)
    icols = ceil_div(ocols * g.stride + kcols_dilated - 1, g.input_dilation)
    ds = int(g.downsample)
    a_rows = ceil_div(kchs, dim) * batches * (irows >> ds) * (icols >> ds)
    b_rows = ceil_div(ochs, dim) * kcols * krows * kchs
    c_rows = ceil_div(ochs, dim) * batches * orows * ocols
    return a_rows + b_rows, c_rows


def conv_fits(tiles, geometry, config) -> bool:
    """The checks `tiled_conv` makes under GEMMINI_ASSERTIONS: A+B within half the scratchpad, C within
    half the accumulator (plus: every tile size positive)."""
    if min(tiles) < 1:
        return False
    spad, acc = conv_rows(tiles, geometry, config)
    max_spad, max_acc = budgets(config)
    return spad <= max_spad and acc <= max_acc


def resadd_acc_rows(tile_I: int, tile_J: int, config) -> int:
    """tiled_resadd_stride_auto's accumulator count for an element tile (both inputs land in the acc)."""
    return ceil_div(tile_I, config.dim) * config.dim * ceil_div(tile_J, config.dim)
