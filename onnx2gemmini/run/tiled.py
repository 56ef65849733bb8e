"""Execute one Matmul or Conv step tile by tile, in gemmini.h's loop order, with Gemmini's arithmetic.

Why: kernels.matmul/kernels.conv compute a whole call at once. This executor follows the tiles instead —
int32 partial sums per K (or kernel/channel) tile accumulated in place, the bias loaded with the first
K tile, scaling/ReLU (and, for convs, the fused max-pool over the tile's pooled rows/cols, computed from
the conv rows the tile covers including its halo) when the output tile is complete — and must return
exactly what the whole-call kernels return. That equality is the proof that a tiling cannot change the
result, and the reference for any future tile-level emulation (e.g. per-tile traces).

Partial sums are kept in int64 and wrapped to int32 once, which is the accumulator's modulo-2^32
arithmetic whatever the order of the additions.
"""
from __future__ import annotations

import numpy as np

from ..plan import Conv, Matmul
from ..tiling.baseline import baseline_conv_tiles, baseline_matmul_tiles
from ..tiling.geometry import CONV_TILE_NAMES, MATMUL_TILE_NAMES, ConvGeometry, spans, tiles_tuple
from .. import numerics
from . import kernels


def run_matmul(step: Matmul, a: np.ndarray, b: np.ndarray, d: np.ndarray | None, config,
               tiles=None) -> np.ndarray:
    """tiled_matmul (WS): loops i0 -> j0 -> k0 over (tile_I, tile_J, tile_K) DIM-block tiles.

    Tiles: `tiles`, else step.tiles, else gemmini.h's choice. Returns kernels.matmul's [I, J] int8.
    """
    tiles = tiles or step.tiles or baseline_matmul_tiles(step.I, step.J, step.K, config)
    ti, tj, tk = (t * config.dim for t in tiles_tuple(MATMUL_TILE_NAMES, tiles))
    a = a.reshape(step.I, step.K)
    bias = None if d is None else (d.reshape(1, -1) if step.repeating_bias else d.reshape(step.I, step.J))
    out = np.empty((step.I, step.J), np.int8)
    for i0, i_n in spans(step.I, ti):
        for j0, j_n in spans(step.J, tj):
            acc = np.zeros((i_n, j_n), np.int64)
            if bias is not None:  # mvin'd with k0 == 0 (repeating: the one row, for every row)
                acc += bias[:, j0:j0 + j_n] if step.repeating_bias else bias[i0:i0 + i_n, j0:j0 + j_n]
            for k0, k_n in spans(step.K, tk):
                acc += kernels.int8_matmul(a[i0:i0 + i_n, k0:k0 + k_n], b[k0:k0 + k_n, j0:j0 + j_n])
            out[i0:i0 + i_n, j0:j0 + j_n] = numerics.acc_scale(numerics.wrap_int32(acc), step.scale, step.act == 1)
    return out


def _pad_input(x: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """Zero-pad top/left by `padding` and bottom/right as far as the output size needs (spec §3.3)."""
    p, k, s = g.padding, g.kernel_dim, g.stride
    bottom = max(0, (g.out_row_dim - 1) * s + k - g.in_row_dim - p)
    right = max(0, (g.out_col_dim - 1) * s + k - g.in_col_dim - p)
    return kernels.pad_nhwc(x, (p, p, bottom, right))


def _pool_tile(y: np.ndarray, rows: tuple[int, int, int], cols: tuple[int, int, int], pool) -> np.ndarray:
    """Max-pool one tile the way the store controller does: the tile's conv rows/cols sit at their
    offset inside a zero frame (positions outside the conv output count as 0), windows at pool_stride."""
    size, stride, _ = pool
    (r_off, r_frame, n_r), (c_off, c_frame, n_c) = rows, cols
    frame = np.zeros((y.shape[0], r_frame, c_frame, y.shape[3]), np.int8)
    frame[:, r_off:r_off + y.shape[1], c_off:c_off + y.shape[2]] = y
    pooled = np.full((y.shape[0], n_r, n_c, y.shape[3]), -128, np.int8)
    for dy in range(size):
        for dx in range(size):
            win = frame[:, dy:dy + (n_r - 1) * stride + 1:stride, dx:dx + (n_c - 1) * stride + 1:stride]
            np.maximum(pooled, win, out=pooled)
    return pooled


def run_conv(step: Conv, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, config,
             tiles=None) -> np.ndarray:
    """tiled_conv: loops b -> porow -> pocol -> poch -> krow -> kcol -> kch; tiles over pooled rows/cols.

    Tiles: `tiles`, else step.tiles, else gemmini.h's choice. Returns kernels.conv's NHWC int8 output
    (pooled dims when a pool is fused).
    """
    g = ConvGeometry.of(step)
    if g.input_dilation != 1 or g.kernel_dilation != 1:
        raise ValueError(f"{step.node}: dilated convs are not executed tile by tile")
    tiles = tiles or step.tiles or baseline_conv_tiles(g, config)
    batches, porows, pocols, pochs, krows, kcols, kchs = tiles_tuple(CONV_TILE_NAMES, tiles)
    pool = g.pool
    pool_size, pool_stride, pool_pad = pool
    k, s = g.kernel_dim, g.stride
    xp = _pad_input(x.reshape(g.batch_size, g.in_row_dim, g.in_col_dim, g.in_channels), g)
    w4 = w.reshape(k, k, g.in_channels, g.out_channels)
    pr, pc = g.pool_out_dims
    out = np.empty((g.batch_size, pr, pc, g.out_channels), np.int8)
    relu = step.act == 1
    for b0, b_n in spans(g.batch_size, batches):
        for pr0, pr_n in spans(pr, porows):
            orow, orows = pr0 * pool_stride - pool_pad, pr_n * pool_stride + pool_size - 1
            r_lo, r_hi = max(orow, 0), min(orow + orows, g.out_row_dim)   # conv rows, halo included
            for pc0, pc_n in spans(pc, pocols):
                ocol, ocols = pc0 * pool_stride - pool_pad, pc_n * pool_stride + pool_size - 1
                c_lo, c_hi = max(ocol, 0), min(ocol + ocols, g.out_col_dim)
                for oc0, oc_n in spans(g.out_channels, pochs):
                    acc = np.zeros((b_n, r_hi - r_lo, c_hi - c_lo, oc_n), np.int64)
                    if bias is not None:  # first kernel/channel tile
                        acc += bias[oc0:oc0 + oc_n]
                    for kr0, kr_n in spans(k, krows):
                        for kc0, kc_n in spans(k, kcols):
                            for ch0, ch_n in spans(g.in_channels, kchs):
                                patch = xp[b0:b0 + b_n,
                                           r_lo * s + kr0:(r_hi - 1) * s + kr0 + kr_n,
                                           c_lo * s + kc0:(c_hi - 1) * s + kc0 + kc_n,
                                           ch0:ch0 + ch_n]
                                cols = kernels.im2col(patch, (kr_n, kc_n), (s, s), (0, 0, 0, 0), (1, 1),
                                                      (r_hi - r_lo, c_hi - c_lo))
                                wt = w4[kr0:kr0 + kr_n, kc0:kc0 + kc_n, ch0:ch0 + ch_n, oc0:oc0 + oc_n]
                                acc += kernels.int8_matmul(cols, wt.reshape(-1, oc_n)).reshape(acc.shape)
                    y = numerics.acc_scale(numerics.wrap_int32(acc), step.scale, relu)
                    if not g.no_pool:
                        y = _pool_tile(y, (r_lo - orow, orows, pr_n), (c_lo - ocol, ocols, pc_n), pool)
                    out[b0:b0 + b_n, pr0:pr0 + pr_n, pc0:pc0 + pc_n, oc0:oc0 + oc_n] = y
    return out
