"""Cost model of one Gemmini call under given tiles: DMA bytes (exact) and cycles (an ESTIMATE).

Why this shape: the bytes follow from the tiles and gemmini.h's loop nests alone, so they are counted
exactly, tile by tile, the way `tiled_matmul_outer` / `tiled_conv` issue their loop instructions (which
operand is re-loaded, which is pinned, where the halo rows are, which padding is never read). Cycles
depend on the memory system and the pipeline, which we do not simulate: they are a documented
first-order estimate (docs/cost_model.md), good for comparing tilings, never a measurement.

Bytes are what the mvin/mvout instructions move: int8 operands and outputs, int32 bias rows. A
repeating bias (DRAM stride 0) is moved once per output row, as the DMA reads it once per row.
"""
from __future__ import annotations

import itertools
from collections import Counter
from functools import lru_cache
from math import prod
from typing import NamedTuple

from .baseline import baseline_global_average_tile, baseline_resadd_tiles
from .geometry import ConvGeometry, ceil_div, spans

BIAS_BYTES = 4               # acc_t
LOOP_OVERHEAD_BLOCKS = 2     # array fill + drain per loop instruction, in units of DIM cycles
MIN_FEED_ROWS = 4            # ExecuteController's floor on rows fed per compute (accumulator write-after-write)


def bus_bytes(config) -> float:
    """Bytes the DMA moves per cycle (dma_bus_bits / 8)."""
    return config.dma_bus_bits / 8


class _Pipeline:
    """Tiles as a double-buffered pipeline: each tile costs max(compute, its DMA), except that the first
    tile's loads and the last tile's store overlap nothing and are added on top. Tiles come in groups of
    identical ones (count, compute cycles, bytes loaded, bytes stored, is first, is last)."""

    def __init__(self, config):
        self.config, self.bw = config, bus_bytes(config)
        self.est = self.compute = self.dma = 0.0

    def add(self, count: int, compute: float, loads: int, store: int, first: bool, last: bool) -> None:
        exposed = (loads if first else 0) + (store if last else 0)   # only ever in a group of one tile
        self.est += count * max(compute, (loads + store - exposed) / self.bw) + exposed / self.bw
        self.compute += count * compute
        self.dma += count * (loads + store) / self.bw

    def estimate(self, macs: int) -> dict:
        ideal = macs / (self.config.dim * self.config.dim)
        est = int(-(-self.est // 1))
        return {"est_cycles": est, "compute_cycles": int(self.compute), "dma_cycles": int(-(-self.dma // 1)),
                "ideal_cycles": ideal, "utilization": (ideal / est) if est else 0.0}


class TileShape(NamedTuple):
    """A class of identical loop instructions as the array sees them: what an independent systolic-array
    model (scripts/compare_scalesim.py) needs to cost the same tiling, and how our model costs it."""

    count: int          # identical tiles
    rows: int           # A rows (output pixels) streamed past each weight block
    cols: int           # output channels (J) of the tile
    depth: int          # reduction length as a plain GEMM (K; krows*kcols*kchs for a conv)
    blocks: int         # DIMxDIM weight blocks our model feeds (kernel-column packing included)
    block_cycles: int   # cycles per weight block (weight_block_cycles)
    overhead: int       # fill/drain cycles per tile

    @property
    def cycles(self) -> int:
        """Our compute cycles for all `count` tiles."""
        return self.count * (self.blocks * self.block_cycles + self.overhead)


def weight_block_cycles(rows: int, cols: int, dim: int) -> int:
    """Cycles the array spends on one DIMxDIM weight block: `rows` runs of `cols` A rows (a conv tile's
    output rows of `cols` pixels; a matmul tile is one run of its I rows), each run fed in computes of
    at most DIM rows.

    Why not DIM per compute: Gemmini's ExecuteController (WS, no transposes; ucb-bar/gemmini
    ExecuteController.scala, "Increase the throughput of matmuls in WS mode", #87) feeds a compute
    paired with a preload that carries no new weights for max(A rows, MIN_FEED_ROWS) cycles; only the
    compute paired with the next block's weight preload takes DIM. LoopConv/LoopMatmul preload new
    weights only before a block's first compute, so only the block's last compute pays DIM.
    """
    if rows <= 0 or cols <= 0:
        return 0
    full, rem = divmod(cols, dim)
    tail = max(rem, MIN_FEED_ROWS) if rem else 0
    last = tail if rem else dim
    return rows * (full * dim + tail) - last + dim


def _classes(sizes: list) -> list[tuple[int, object, bool, bool]]:
    """Group a dimension's tiles into (count, size, is_first, is_last) classes: first, middle, last."""
    n = len(sizes)
    out = [(1, sizes[0], True, n == 1)]
    if n > 2:
        out.append((n - 2, sizes[1], False, False))
    if n > 1:
        out.append((1, sizes[-1], False, True))
    return out


# --- matmul (tiled_matmul_outer, WS: i0 -> j0 -> k0, one loop_ws per tile) ------------------------

def matmul_reuse(I: int, J: int, K: int, tiles, config) -> tuple[int, int, int, bool, bool]:
    """(I0, J0, K0, a_reuse, b_reuse): tile counts and gemmini.h's operand pinning (spec §3.1)."""
    dim = config.dim
    i0, j0, k0 = (ceil_div(ceil_div(d, dim), t) for d, t in zip((I, J, K), tiles))
    return i0, j0, k0, i0 * k0 <= 2, j0 * k0 <= 2


def matmul_traffic(I: int, J: int, K: int, tiles, config, has_bias: bool = True, out_bytes: int = 1) -> dict:
    """Exact DMA bytes of tiled_matmul(WS) with these tiles, by operand.

    A (I x K) is loaded by every (i0, j0, k0) tile, i.e. J0 times, unless pinned (I0*K0 <= 2: once);
    B (K x J) I0 times unless pinned (J0*K0 <= 2); D (int32 bias rows) once per output tile at k0 == 0;
    C once per output tile at k0 == K0-1, `out_bytes` per element (4 with full_C).
    """
    i0, j0, _, a_reuse, b_reuse = matmul_reuse(I, J, K, tiles, config)
    parts = {"input": I * K * (1 if a_reuse else j0), "weights": K * J * (1 if b_reuse else i0),
             "bias": BIAS_BYTES * I * J if has_bias else 0, "output": I * J * out_bytes}
    parts["total"] = sum(parts.values())
    return parts


def matmul_cost(I: int, J: int, K: int, tiles, config, has_bias: bool = True, out_bytes: int = 1) -> dict:
    """Bytes (exact) and cycles (estimate) of one tiled_matmul call; see docs/cost_model.md."""
    dim = config.dim
    ti, tj, tk = tiles
    n_i, n_j, n_k, a_reuse, b_reuse = matmul_reuse(I, J, K, tiles, config)
    dims = [_classes([s for _, s in spans(d, t * dim)]) for d, t in zip((I, J, K), tiles)]
    pipe, overhead, shapes = _Pipeline(config), LOOP_OVERHEAD_BLOCKS * dim, []
    for (ci, ri, fi, li), (cj, cj_el, fj, lj), (ck, ck_el, fk, lk) in itertools.product(*dims):
        load_a = 0 if (a_reuse and not fj) else ri * ck_el
        load_b = 0 if (b_reuse and not fi) else ck_el * cj_el
        load_d = BIAS_BYTES * ri * cj_el if (has_bias and fk) else 0
        shape = TileShape(ci * cj * ck, ri, cj_el, ck_el, ceil_div(cj_el, dim) * ceil_div(ck_el, dim),
                          weight_block_cycles(1, ri, dim), overhead)
        shapes.append(shape)
        store = ri * cj_el * out_bytes if lk else 0
        pipe.add(shape.count, shape.cycles // shape.count, load_a + load_b + load_d, store,
                 fi and fj and fk, li and lj and lk)
    est = pipe.estimate(I * J * K)
    traffic = matmul_traffic(I, J, K, tiles, config, has_bias, out_bytes)
    est.update(dram_bytes=traffic["total"], dram_breakdown={k: v for k, v in traffic.items() if k != "total"},
               num_tiles=n_i * n_j * n_k, pinned={"input": a_reuse, "weights": b_reuse}, shapes=tuple(shapes))
    return est


# --- conv (tiled_conv: b -> porow -> pocol -> poch -> krow -> kcol -> kch, one loop_conv_ws per tile) --

def conv_reuse(g: ConvGeometry, tiles) -> tuple[tuple[int, ...], bool, bool]:
    """(tile counts per element, a_reuse, b_reuse) as tiled_conv decides them."""
    counts = tuple(ceil_div(m, t) for m, t in zip(g.max_tiles, tiles))
    n_b, n_pr, n_pc, n_poch, n_kr, n_kc, n_kch = counts
    b_reuse = n_kch * n_poch * n_kr * n_kc <= 2
    a_reuse = n_kch * n_kr * n_kc * n_b * n_pr * n_pc <= 2
    return counts, a_reuse, b_reuse


@lru_cache(maxsize=65536)
def conv_axis(g: ConvGeometry, axis: int, po_tile: int, k_tile: int) -> tuple:
    """Per (pooled-output tile, kernel tile) pair along rows (axis 0) or cols (axis 1):
    (out_eff, loaded, po_size, k_size, po_first, po_last, k_first, k_last) for every pair.

    out_eff: conv outputs the tile computes (halo included, padding excluded: `orows - pupad - pdpad`);
    loaded: input rows/cols the DMA reads (padding is written as zeros, never read; downsample reads every
    other one). Mirrors the lpad/rpad/upad/dpad arithmetic of tiled_conv.
    """
    if g.input_dilation != 1:
        raise ValueError("input dilation is not modelled by the cost model")
    pool_size, pool_stride, pool_pad = g.pool
    pooled = g.pool_out_dims[axis]
    out_dim = (g.out_row_dim, g.out_col_dim)[axis]
    in_dim = (g.in_row_dim, g.in_col_dim)[axis]
    ds = int(g.downsample)
    po_spans, k_spans = spans(pooled, po_tile), spans(g.kernel_dim, k_tile)
    items = []
    for pi, (po, po_n) in enumerate(po_spans):
        o = po * pool_stride - pool_pad
        o_n = po_n * pool_stride + pool_size - 1
        o_eff = max(0, o_n - max(0, -o) - max(0, o + o_n - out_dim))
        for ki, (k, k_n) in enumerate(k_spans):
            i = max(o, 0) * g.stride + k * g.kernel_dilation - g.padding
            i_n = o_eff * g.stride + k_n + (g.kernel_dilation - 1) * (k_n - 1) - 1
            unpadded = max(0, i_n - max(0, -i) - max(0, i + i_n - in_dim))
            loaded = (unpadded + ds) >> ds if axis == 0 else unpadded >> ds
            items.append((o_eff, loaded, po_n, k_n, pi == 0, pi == len(po_spans) - 1,
                          ki == 0, ki == len(k_spans) - 1))
    return tuple(items)


@lru_cache(maxsize=65536)
def conv_axis_sums(g: ConvGeometry, axis: int, po_tile: int, k_tile: int) -> tuple[int, int]:
    """(sum of loaded input rows over all tile pairs, sum of computed conv rows over pooled tiles)."""
    items = conv_axis(g, axis, po_tile, k_tile)
    loaded = sum(it[1] for it in items)
    computed = sum(it[0] for it in items if it[6])   # once per pooled tile (first kernel tile)
    return loaded, computed


def conv_traffic(geometry, tiles, has_bias: bool = True) -> dict:
    """Exact DMA bytes of tiled_conv with these tiles, by operand (closed form of the loop nest).

    input: every tile loads its input rows x cols (halo included, padding not) x kchs, for every poch
    tile unless pinned (a_reuse: loaded for poch == 0 only); weights: every tile loads
    krows*kcols*kchs*pochs unless pinned (b_reuse: only while b == porow == pocol == 0); bias: int32 per
    computed conv pixel (halo rows included) at the first kernel/channel tile; output: the (pooled) output
    once.
    """
    g = ConvGeometry.of(geometry)
    counts, a_reuse, b_reuse = conv_reuse(g, tiles)
    n_b, n_pr, n_pc, n_poch = counts[:4]
    _, porows, pocols, _, krows, kcols, _ = tiles
    rows_loaded, rows_out = conv_axis_sums(g, 0, porows, krows)
    cols_loaded, cols_out = conv_axis_sums(g, 1, pocols, kcols)
    n, ic, oc, k = g.batch_size, g.in_channels, g.out_channels, g.kernel_dim
    pr, pc = g.pool_out_dims
    parts = {"input": n * rows_loaded * cols_loaded * ic * (1 if a_reuse else n_poch),
             "weights": k * k * ic * oc * (1 if b_reuse else n_b * n_pr * n_pc),
             "bias": BIAS_BYTES * n * rows_out * cols_out * oc if has_bias else 0,
             "output": n * pr * pc * oc}
    parts["total"] = sum(parts.values())
    return parts


def pixels_per_row(g: ConvGeometry, kcols: int, kchs: int, config) -> int:
    """HAS_FIRST_LAYER_OPTIMIZATIONS: with few input channels, several kernel columns share one DIM-wide
    scratchpad row, so one array pass covers them (sp_tiled_conv's max_pixels_per_row)."""
    if (not config.has_first_layer_optimizations or g.downsample or g.input_dilation > 1
            or g.kernel_dilation > 1 or kchs > config.dim):
        return 1
    return min(config.dim // kchs, kcols)


def conv_cost(geometry, tiles, config, has_bias: bool = True) -> dict:
    """Bytes (exact) and cycles (estimate) of one tiled_conv call; see docs/cost_model.md."""
    g = ConvGeometry.of(geometry)
    dim = config.dim
    counts, a_reuse, b_reuse = conv_reuse(g, tiles)
    batches, porows, pocols, pochs, krows, kcols, kchs = tiles
    rows = Counter(conv_axis(g, 0, porows, krows))
    cols = Counter(conv_axis(g, 1, pocols, kcols))
    bs = _classes([s for _, s in spans(g.batch_size, batches)])
    ochs = _classes([s for _, s in spans(g.out_channels, pochs)])
    ichs = _classes([s for _, s in spans(g.in_channels, kchs)])
    pipe, overhead, shapes = _Pipeline(config), LOOP_OVERHEAD_BLOCKS * dim, []
    for (cb, b_n, fb, lb), (r, cr), (c, cc), (co, oc_n, fo, lo), (ck, ic_n, fk, lk) in itertools.product(
            bs, rows.items(), cols.items(), ochs, ichs):
        r_out, r_in, pr_n, kr_n, fpr, lpr, fkr, lkr = r
        c_out, c_in, pc_n, kcl_n, fpc, lpc, fkc, lkc = c
        load_in = 0 if (a_reuse and not fo) else b_n * r_in * c_in * ic_n
        load_w = 0 if (b_reuse and not (fb and fpr and fpc)) else kr_n * kcl_n * ic_n * oc_n
        load_bias = BIAS_BYTES * b_n * r_out * c_out * oc_n if (has_bias and fkr and fkc and fk) else 0
        store = b_n * pr_n * pc_n * oc_n if (lkr and lkc and lk) else 0
        ppr = pixels_per_row(g, kcl_n, ic_n, config)
        shape = TileShape(cb * cr * cc * co * ck, b_n * r_out * c_out, oc_n, kr_n * kcl_n * ic_n,
                          ceil_div(oc_n, dim) * kr_n * ceil_div(kcl_n, ppr) * ceil_div(ic_n, dim),
                          weight_block_cycles(b_n * r_out, c_out, dim), overhead)
        shapes.append(shape)
        pipe.add(shape.count, shape.cycles // shape.count, load_in + load_w + load_bias, store,
                 fb and fpr and fpc and fo and fkr and fkc and fk, lb and lpr and lpc and lo and lkr and lkc and lk)
    est = pipe.estimate(g.macs)
    traffic = conv_traffic(g, tiles, has_bias)
    est.update(dram_bytes=traffic["total"], dram_breakdown={k: v for k, v in traffic.items() if k != "total"},
               num_tiles=prod(counts), pinned={"input": a_reuse, "weights": b_reuse}, shapes=tuple(shapes))
    return est


# --- resadd and global average: pure data movement through the accumulator ------------------------

def resadd_cost(I: int, J: int, config, tiles=None) -> dict:
    """tiled_resadd: each (tile_I x tile_J) element tile moves A and B in (int8, into the accumulator)
    and C out; the array is idle, so the estimate is DMA-bound. Tiles default to gemmini.h's (§3.6)."""
    ti, tj = tiles or baseline_resadd_tiles(I, J, config)
    rows, cols = _classes([s for _, s in spans(I, ti)]), _classes([s for _, s in spans(J, tj)])
    pipe = _Pipeline(config)
    for (ci, r, fi, li), (cj, c, fj, lj) in itertools.product(rows, cols):
        pipe.add(ci * cj, 0, 2 * r * c, r * c, fi and fj, li and lj)
    est = pipe.estimate(0)
    est.update(dram_bytes=3 * I * J, dram_breakdown={"input": 2 * I * J, "weights": 0, "bias": 0,
                                                    "output": I * J},
               num_tiles=ceil_div(I, ti) * ceil_div(J, tj), tiles={"tile_I": ti, "tile_J": tj})
    return est


def global_average_cost(batches: int, channels: int, dim: int, config, channel_tile: int | None = None) -> dict:
    """tiled_global_average: one single-row mvin per pixel (accumulated in place), one mvout per channel
    tile; DMA-bound. The channel tile defaults to gemmini.h's (§3.7)."""
    tile = channel_tile or baseline_global_average_tile(channels, config)
    loads, store = batches * dim * dim * channels, batches * channels
    pipe = _Pipeline(config)
    pipe.add(1, 0, loads, store, True, True)
    est = pipe.estimate(0)
    est.update(dram_bytes=loads + store,
               dram_breakdown={"input": loads, "weights": 0, "bias": 0, "output": store},
               num_tiles=batches * ceil_div(channels, tile), tiles={"channel_tile_size": tile})
    return est
