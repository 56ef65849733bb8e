"""Cost model: the closed-form DMA bytes equal a literal walk of gemmini.h's loop nests, the cycle
estimate keeps its stated invariants, and small cases match hand-computed numbers."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onnx2gemmini.config import PRESETS
from onnx2gemmini.tiling.cost import (LOOP_OVERHEAD_BLOCKS, MIN_FEED_ROWS, conv_cost, conv_traffic,
                                      global_average_cost, matmul_cost, matmul_traffic, pixels_per_row,
                                      resadd_cost, weight_block_cycles)
from onnx2gemmini.tiling.geometry import ConvGeometry, ceil_div
from tests.test_tiling import CONFIGS, any_conv_tiles, conv_geometries

DEFAULT = PRESETS["default"]
ALL_CONFIGS = pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))


# --- literal transcriptions of the loop nests (deliberately naive: one iteration per tile) -------

def walk_matmul(I, J, K, tiles, dim, has_bias=True) -> dict:
    """tiled_matmul_outer (WS) + what one loop_ws moves: A/B per tile unless pinned, D at k0 == 0,
    C at k0 == K0-1."""
    ti, tj, tk = (t * dim for t in tiles)
    n_i, n_j, n_k = ceil_div(I, ti), ceil_div(J, tj), ceil_div(K, tk)
    a_reuse, b_reuse = n_i * n_k <= 2, n_j * n_k <= 2
    moved = {"input": 0, "weights": 0, "bias": 0, "output": 0}
    for i0 in range(n_i):
        rows = min(ti, I - i0 * ti)
        for j0 in range(n_j):
            cols = min(tj, J - j0 * tj)
            for k0 in range(n_k):
                depth = min(tk, K - k0 * tk)
                if not (a_reuse and j0 >= 1):
                    moved["input"] += rows * depth
                if not (b_reuse and i0 >= 1):
                    moved["weights"] += depth * cols
                if k0 == 0 and has_bias:
                    moved["bias"] += 4 * rows * cols
                if k0 == n_k - 1:
                    moved["output"] += rows * cols
    return moved


def _input_cols_moved(icols_unpadded, lpad, rpad, dim, ds):
    """sp_tiled_conv's input column loop: chunks of up to DIM<<ds columns, padding chunks read nothing."""
    moved, icol = 0, -lpad
    while icol < icols_unpadded + rpad:
        n = min(dim << ds, icols_unpadded - icol)
        if icol < 0:
            n = min(dim, -icol)
        elif icol >= icols_unpadded:
            n = min(dim, icols_unpadded + rpad - icol)
        if 0 <= icol < icols_unpadded:
            moved += n >> ds
        icol += n
    return moved


def conv_tile_origins(g: ConvGeometry, tiles):
    """tiled_conv's loop nest (b -> porow -> pocol -> poch -> krow -> kcol -> kch), one tuple per tile:
    (b, porow, pocol, orow, ocol, poch, krow, kcol, kch), orow/ocol the tile's first conv output row/col."""
    batches, porows, pocols, pochs, krows, kcols, kchs = tiles
    _, pst, ppad = g.pool
    pr_dim, pc_dim = g.pool_out_dims
    for b in range(0, g.batch_size, batches):
        for porow in range(0, pr_dim, porows):
            for pocol in range(0, pc_dim, pocols):
                for poch in range(0, g.out_channels, pochs):
                    for krow in range(0, g.kernel_dim, krows):
                        for kcol in range(0, g.kernel_dim, kcols):
                            for kch in range(0, g.in_channels, kchs):
                                yield (b, porow, pocol, porow * pst - ppad, pocol * pst - ppad, poch, krow, kcol,
                                       kch)


def walk_conv(g: ConvGeometry, tiles, dim, has_bias=True) -> dict:
    """tiled_conv's loop nest and the pads it hands to sp_tiled_conv, tile by tile."""
    batches, porows, pocols, pochs, krows, kcols, kchs = tiles
    psz, pst, _ = g.pool
    pr_dim, pc_dim = g.pool_out_dims
    k, s, ds = g.kernel_dim, g.stride, int(g.downsample)
    n = [ceil_div(m, t) for m, t in zip(g.max_tiles, tiles)]
    b_reuse = n[6] * n[3] * n[4] * n[5] <= 2
    a_reuse = n[6] * n[4] * n[5] * n[0] * n[1] * n[2] <= 2
    moved = {"input": 0, "weights": 0, "bias": 0, "output": 0}
    for b, porow, pocol, orow, ocol, poch, krow, kcol, kch in conv_tile_origins(g, tiles):
        irow = max(orow, 0) * s + krow - g.padding
        icol = max(ocol, 0) * s + kcol - g.padding
        b_ = min(batches, g.batch_size - b)
        porows_, pocols_ = min(porows, pr_dim - porow), min(pocols, pc_dim - pocol)
        pochs_ = min(pochs, g.out_channels - poch)
        krows_, kcols_ = min(krows, k - krow), min(kcols, k - kcol)
        kchs_ = min(kchs, g.in_channels - kch)
        ocols_, orows_ = pocols_ * pst + psz - 1, porows_ * pst + psz - 1
        plpad, pupad = max(0, -ocol), max(0, -orow)
        prpad = max(0, ocol + ocols_ - g.out_col_dim)
        pdpad = max(0, orow + orows_ - g.out_row_dim)
        icols_ = (ocols_ - plpad - prpad) * s + kcols_ - 1
        irows_ = (orows_ - pupad - pdpad) * s + krows_ - 1
        lpad, upad = max(0, -icol), max(0, -irow)
        rpad = max(0, icol + icols_ - g.in_col_dim)
        dpad = max(0, irow + irows_ - g.in_row_dim)
        rows_unpadded, cols_unpadded = irows_ - upad - dpad, icols_ - lpad - rpad
        rows = sum(1 for r in range(-upad, rows_unpadded + dpad, 1 + ds)
                   if 0 <= r < rows_unpadded)
        cols = _input_cols_moved(cols_unpadded, lpad, rpad, dim, ds)
        if not (a_reuse and poch > 0):
            moved["input"] += b_ * rows * cols * kchs_
        if not (b_reuse and pocol + porow + b > 0):
            moved["weights"] += krows_ * kcols_ * kchs_ * pochs_
        if has_bias and krow == 0 and kcol == 0 and kch == 0:
            conv_px = (orows_ - pupad - pdpad) * (ocols_ - plpad - prpad)
            moved["bias"] += 4 * b_ * conv_px * pochs_
        if krow + krows >= k and kcol + kcols >= k and kch + kchs >= g.in_channels:
            moved["output"] += b_ * porows_ * pocols_ * pochs_
    return moved


def feed_cycles(stream, dim) -> int:
    """Cycles of a stream of (A rows, new weights) computes under Gemmini's ExecuteController rule (WS):
    a compute paired with a preload that brings new weights (the next compute's), or with none at the
    end of the call, takes DIM cycles; any other takes max(A rows, MIN_FEED_ROWS)."""
    cycles = 0
    for i, (rows, _) in enumerate(stream):
        nxt = stream[i + 1] if i + 1 < len(stream) else None
        cycles += dim if nxt is None or nxt[1] else max(rows, MIN_FEED_ROWS)
    return cycles


def walk_matmul_compute(I, J, K, tiles, dim) -> int:
    """tiled_matmul_outer's tiles, each one LoopMatmul (k -> j -> i, new weights at i == 0)."""
    ti, tj, tk = (t * dim for t in tiles)
    stream, n_tiles = [], 0
    for i0 in range(0, I, ti):
        for j0 in range(0, J, tj):
            for k0 in range(0, K, tk):
                n_tiles += 1
                rows, cols, depth = min(ti, I - i0), min(tj, J - j0), min(tk, K - k0)
                for _k in range(0, depth, dim):
                    for _j in range(0, cols, dim):
                        stream += [(min(dim, rows - i), i == 0) for i in range(0, rows, dim)]
    return feed_cycles(stream, dim) + n_tiles * LOOP_OVERHEAD_BLOCKS * dim


def walk_conv_compute(g: ConvGeometry, tiles, config) -> int:
    """tiled_conv's tiles, each one LoopConv (och -> krow -> kcol by pixels per row -> kch -> b -> orow ->
    ocol in DIM chunks, new weights at the first chunk), over the conv rows/cols the tile computes."""
    dim = config.dim
    batches, porows, pocols, pochs, krows, kcols, kchs = tiles
    psz, pst, _ = g.pool
    pr_dim, pc_dim = g.pool_out_dims
    stream, n_tiles = [], 0
    for b, porow, pocol, orow, ocol, poch, krow, kcol, kch in conv_tile_origins(g, tiles):
        n_tiles += 1
        orows_ = min(porows, pr_dim - porow) * pst + psz - 1
        ocols_ = min(pocols, pc_dim - pocol) * pst + psz - 1
        orows_eff = orows_ - max(0, -orow) - max(0, orow + orows_ - g.out_row_dim)
        ocols_eff = ocols_ - max(0, -ocol) - max(0, ocol + ocols_ - g.out_col_dim)
        kcols_ = min(kcols, g.kernel_dim - kcol)
        kchs_ = min(kchs, g.in_channels - kch)
        ppr = pixels_per_row(g, kcols_, kchs_, config)
        for _block in range(ceil_div(min(pochs, g.out_channels - poch), dim)
                            * min(krows, g.kernel_dim - krow) * ceil_div(kcols_, ppr)
                            * ceil_div(kchs_, dim)):
            first = True
            for _row in range(min(batches, g.batch_size - b) * max(0, orows_eff)):
                for c in range(0, max(0, ocols_eff), dim):
                    stream.append((min(dim, ocols_eff - c), first))
                    first = False
    return feed_cycles(stream, dim) + n_tiles * LOOP_OVERHEAD_BLOCKS * dim


# --- bytes: closed form == literal walk -----------------------------------------------------------

@given(dims=st.tuples(st.integers(1, 300), st.integers(1, 300), st.integers(1, 300)),
       tiles=st.tuples(st.integers(1, 20), st.integers(1, 20), st.integers(1, 20)),
       has_bias=st.booleans(), dim=st.sampled_from([4, 16]))
def test_matmul_traffic_equals_loop_walk(dims, tiles, has_bias, dim):
    config = CONFIGS["tiny"] if dim == 4 else DEFAULT
    tiles = tuple(min(t, ceil_div(d, dim)) for t, d in zip(tiles, dims))
    expected = walk_matmul(*dims, tiles, dim, has_bias)
    got = matmul_traffic(*dims, tiles, config, has_bias)
    assert {k: got[k] for k in expected} == expected
    assert got["total"] == sum(expected.values())
    assert matmul_cost(*dims, tiles, config, has_bias)["dram_bytes"] == got["total"]


@given(data=st.data(), has_bias=st.booleans(), dim=st.sampled_from([4, 16]))
def test_conv_traffic_equals_loop_walk(data, has_bias, dim):
    g = data.draw(conv_geometries(max_dim=30, max_channels=40, max_batch=3))
    tiles = data.draw(any_conv_tiles(g))
    config = CONFIGS["tiny"] if dim == 4 else DEFAULT
    expected = walk_conv(g, tiles, dim, has_bias)
    got = conv_traffic(g, tiles, has_bias)
    assert {k: got[k] for k in expected} == expected
    assert conv_cost(g, tiles, config, has_bias)["dram_bytes"] == got["total"]


@pytest.mark.parametrize("tiles", [(1, 3, 28, 64, 1, 1, 128), (1, 28, 28, 512, 1, 1, 16), (1, 5, 7, 48, 1, 1, 256)])
def test_conv_traffic_downsample_equals_loop_walk(tiles):
    g = ConvGeometry(1, 56, 56, 256, 512, 28, 28, stride=2, padding=0, kernel_dim=1)
    assert g.downsample
    expected = walk_conv(g, tiles, 16)
    assert {k: conv_traffic(g, tiles)[k] for k in expected} == expected
    assert expected["input"] % (28 * 28 * 256) == 0      # every other row and column, once per pass


# --- compute cycles: closed form == the command stream under the ExecuteController rule ------------

@given(dims=st.tuples(st.integers(1, 120), st.integers(1, 120), st.integers(1, 120)),
       tiles=st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(1, 8)), dim=st.sampled_from([4, 16]))
def test_matmul_compute_cycles_equal_the_command_stream(dims, tiles, dim):
    config = CONFIGS["tiny"] if dim == 4 else DEFAULT
    tiles = tuple(min(t, ceil_div(d, dim)) for t, d in zip(tiles, dims))
    c = matmul_cost(*dims, tiles, config)
    assert c["compute_cycles"] == walk_matmul_compute(*dims, tiles, dim)
    assert sum(s.cycles for s in c["shapes"]) == c["compute_cycles"]


@given(data=st.data(), dim=st.sampled_from([4, 16]))
def test_conv_compute_cycles_equal_the_command_stream(data, dim):
    g = data.draw(conv_geometries(max_dim=24, max_channels=40, max_batch=2))
    tiles = data.draw(any_conv_tiles(g))
    config = CONFIGS["tiny"] if dim == 4 else DEFAULT
    c = conv_cost(g, tiles, config)
    assert c["compute_cycles"] == walk_conv_compute(g, tiles, config)
    assert sum(s.cycles for s in c["shapes"]) == c["compute_cycles"]
    assert sum(s.count for s in c["shapes"]) == c["num_tiles"]


def test_short_runs_take_their_rows_and_a_block_ends_with_a_full_preload():
    assert weight_block_cycles(1, 16, 16) == 16          # one full compute
    assert weight_block_cycles(1, 49, 16) == 64          # 16+16+16, then 1 row paired with new weights: 16
    assert weight_block_cycles(7, 7, 16) == 6 * 7 + 16   # 7 rows of 7 pixels; the last compute takes DIM
    assert weight_block_cycles(3, 2, 16) == 4 + 4 + 16   # runs shorter than 4 rows take 4
    assert weight_block_cycles(0, 7, 16) == 0
    # a 3x3 conv on a 7x7 map, one tile: 9 weight blocks of 7 runs of 7 pixels, plus fill/drain
    g = ConvGeometry(1, 7, 7, 16, 16, 7, 7, 1, 1, 3)
    assert conv_cost(g, g.max_tiles, DEFAULT)["compute_cycles"] == 9 * 58 + 32


# --- hand-computed cases ----------------------------------------------------------------------------

def test_matmul_bytes_by_hand():
    # 64x64x64 at DIM 16 with 1-block tiles: I0 = J0 = K0 = 4, nothing pinned.
    t = matmul_traffic(64, 64, 64, (1, 1, 1), DEFAULT)
    assert t == {"input": 64 * 64 * 4, "weights": 64 * 64 * 4, "bias": 4 * 64 * 64, "output": 64 * 64,
                 "total": 4096 * 4 + 4096 * 4 + 4 * 4096 + 4096}
    # one K tile and one J tile: J0*K0 = 1 <= 2, so B is pinned and loaded once although I0 = 4.
    t = matmul_traffic(64, 64, 64, (1, 4, 4), DEFAULT)
    assert (t["input"], t["weights"]) == (64 * 64, 64 * 64)
    # full_C: C leaves as int32 accumulators, 4 bytes each; the stores cost the cycle estimate too
    full = matmul_traffic(64, 64, 64, (1, 4, 4), DEFAULT, out_bytes=4)
    assert full["output"] == 4 * t["output"] and full["total"] == t["total"] + 3 * t["output"]
    assert matmul_cost(64, 64, 64, (1, 4, 4), DEFAULT, out_bytes=4)["est_cycles"] > \
        matmul_cost(64, 64, 64, (1, 4, 4), DEFAULT)["est_cycles"]


def test_matmul_cycles_by_hand():
    # One 16x16x16 tile: 1 block = DIM cycles + 2*DIM fill/drain; loads 256 (A) + 256 (B) + 1024 (D)
    # bytes at 16 B/cycle before it, store 256 bytes after it: 96 + 48 + 16 = 160 cycles.
    c = matmul_cost(16, 16, 16, (1, 1, 1), DEFAULT)
    assert c["est_cycles"] == 160
    assert c["compute_cycles"] == 48 and c["ideal_cycles"] == 16
    assert c["utilization"] == pytest.approx(16 / 160)


def test_conv_cycles_count_padding_waste_of_partial_column_blocks():
    g = ConvGeometry(1, 20, 20, 16, 16, 20, 20, 1, 0, 1)
    whole = conv_cost(g, (1, 20, 16, 16, 1, 1, 16), DEFAULT)
    ragged = conv_cost(g, (1, 20, 17, 16, 1, 1, 16), DEFAULT)
    # 16 columns = 1 compute per row, 17 = 2 per row: the second, of 1 pixel, still takes MIN_FEED_ROWS.
    assert ragged["compute_cycles"] > whole["compute_cycles"]


def test_first_layer_packs_kernel_columns():
    g = ConvGeometry(1, 224, 224, 3, 64, 112, 112, 2, 3, 7)
    assert pixels_per_row(g, 7, 3, DEFAULT) == 5                    # DIM // 3 = 5 pixels per row
    assert pixels_per_row(g, 7, 3, CONFIGS["lean"]) == 5
    no_opt = type(DEFAULT)(name="x", has_first_layer_optimizations=False)
    assert pixels_per_row(g, 7, 3, no_opt) == 1
    tiles = (1, 7, 7, 32, 7, 7, 3)
    assert conv_cost(g, tiles, DEFAULT)["compute_cycles"] < conv_cost(g, tiles, no_opt)["compute_cycles"]


def test_resadd_and_global_average_costs():
    r = resadd_cost(3136, 256, DEFAULT)
    assert r["dram_bytes"] == 3 * 3136 * 256 and r["tiles"] == {"tile_I": 49, "tile_J": 96}
    assert r["est_cycles"] == 3 * 3136 * 256 // 16 and r["utilization"] == 0.0
    ga = global_average_cost(1, 2048, 7, DEFAULT)
    assert ga["dram_bytes"] == 49 * 2048 + 2048 and ga["tiles"] == {"channel_tile_size": 2048}


# --- estimate invariants --------------------------------------------------------------------------

@ALL_CONFIGS
@given(data=st.data())
def test_estimate_bounds(config, data):
    """The pipelined estimate is never below pure compute or pure DMA, and never above their sum plus
    rounding; utilization is ideal / estimated and never above 1."""
    g = data.draw(conv_geometries(max_dim=20, max_channels=40, max_batch=2))
    c = conv_cost(g, data.draw(any_conv_tiles(g)), config)
    assert c["est_cycles"] >= max(c["compute_cycles"], c["dma_cycles"] - 1)
    assert c["est_cycles"] <= c["compute_cycles"] + c["dma_cycles"] + 1
    assert c["utilization"] == pytest.approx(c["ideal_cycles"] / c["est_cycles"])
    assert 0 < c["utilization"] <= 1
