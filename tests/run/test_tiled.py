"""Tile-by-tile execution (run/tiled.py) equals whole-call execution (run/kernels.py) bit for bit, for
arbitrary in-bounds tiles, for gemmini.h's tiles and for the tiles the search chooses on every preset."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from onnx2gemmini.plan import Conv, Matmul
from onnx2gemmini.run import kernels
from onnx2gemmini.run.tiled import run_conv, run_matmul
from onnx2gemmini.tiling import apply_tiles, choose_conv_tiles, choose_matmul_tiles
from tests.test_tiling import CONFIGS, any_conv_tiles, conv_geometries

ALL_CONFIGS = pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
TINY = CONFIGS["tiny"]


def _conv_case(g, seed, relu=True, with_bias=True):
    rng = np.random.default_rng(seed)
    step = Conv("c", **{f: getattr(g, f) for f in ("batch_size", "in_row_dim", "in_col_dim", "in_channels",
                                                     "out_channels", "out_row_dim", "out_col_dim", "stride",
                                                     "padding", "kernel_dim", "pool_size", "pool_stride",
                                                     "pool_padding")},
                act=int(relu), scale=float(rng.uniform(0.0005, 0.02)))
    x = rng.integers(-128, 128, (g.batch_size, g.in_row_dim, g.in_col_dim, g.in_channels), dtype=np.int8)
    w = rng.integers(-128, 128, (g.kernel_dim ** 2 * g.in_channels, g.out_channels), dtype=np.int8)
    bias = rng.integers(-20000, 20000, g.out_channels).astype(np.int32) if with_bias else None
    pool = (g.pool_size, g.pool_stride, g.pool_padding) if g.pool_stride else None
    whole = kernels.conv(x, w, bias, g.stride, g.padding, g.kernel_dim, (g.out_row_dim, g.out_col_dim),
                         step.scale, relu, pool)
    return step, x, w, bias, whole


def _matmul_case(dims, seed, with_bias=True, repeating=True):
    rng = np.random.default_rng(seed)
    i, j, k = dims
    step = Matmul("m", I=i, J=j, K=k, scale=float(rng.uniform(0.0005, 0.02)), act=int(rng.integers(0, 2)),
                  repeating_bias=repeating)
    a = rng.integers(-128, 128, (i, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, j), dtype=np.int8)
    d = None
    if with_bias:
        d = rng.integers(-20000, 20000, j if repeating else (i, j)).astype(np.int32)
    whole = kernels.matmul(a, b, d, step.scale, step.act == 1, repeating)
    return step, a, b, d, whole


@given(data=st.data(), seed=st.integers(0, 2**16), relu=st.booleans(), with_bias=st.booleans())
def test_conv_any_tiles_equal_whole(data, seed, relu, with_bias):
    g = data.draw(conv_geometries())
    tiles = data.draw(any_conv_tiles(g))
    step, x, w, bias, whole = _conv_case(g, seed, relu, with_bias)
    got = run_conv(step, x, w, bias, TINY, tiles)
    assert got.dtype == whole.dtype and got.shape == whole.shape
    assert np.array_equal(got, whole)


@given(data=st.data(), seed=st.integers(0, 2**16))
def test_pooled_conv_halo_tiles_equal_whole(data, seed):
    """Pooled tiles overlap in conv rows (the halo) and start in the pool padding."""
    g = data.draw(conv_geometries(pool=True))
    tiles = (1, 1, 1) + data.draw(any_conv_tiles(g))[3:]
    step, x, w, bias, whole = _conv_case(g, seed)
    assert np.array_equal(run_conv(step, x, w, bias, TINY, tiles), whole)


@ALL_CONFIGS
@given(g=conv_geometries(max_dim=14, max_channels=40), seed=st.integers(0, 2**16))
def test_conv_chosen_and_baseline_tiles_equal_whole(config, g, seed):
    step, x, w, bias, whole = _conv_case(g, seed)
    assert np.array_equal(run_conv(step, x, w, bias, config), whole)          # gemmini.h's tiles
    chosen = choose_conv_tiles(g, config)
    assert np.array_equal(run_conv(step, x, w, bias, config, chosen), whole)


def test_downsample_conv_tiles_equal_whole():
    from onnx2gemmini.tiling.geometry import ConvGeometry
    g = ConvGeometry(1, 12, 12, 24, 20, 6, 6, stride=2, padding=0, kernel_dim=1)
    step, x, w, bias, whole = _conv_case(g, 7)
    assert np.array_equal(run_conv(step, x, w, bias, TINY, choose_conv_tiles(g, TINY)), whole)


@given(dims=st.tuples(st.integers(1, 90), st.integers(1, 90), st.integers(1, 200)),
       tiles=st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(1, 8)),
       seed=st.integers(0, 2**16), with_bias=st.booleans(), repeating=st.booleans())
def test_matmul_any_tiles_equal_whole(dims, tiles, seed, with_bias, repeating):
    step, a, b, d, whole = _matmul_case(dims, seed, with_bias, repeating)
    got = run_matmul(step, a, b, d, TINY, tiles)
    assert got.dtype == whole.dtype and np.array_equal(got, whole)


@ALL_CONFIGS
@given(dims=st.tuples(st.integers(1, 300), st.integers(1, 300), st.integers(1, 300)), seed=st.integers(0, 2**16))
def test_matmul_chosen_and_baseline_tiles_equal_whole(config, dims, seed):
    step, a, b, d, whole = _matmul_case(dims, seed)
    assert np.array_equal(run_matmul(step, a, b, d, config), whole)
    assert np.array_equal(run_matmul(step, a, b, d, config, choose_matmul_tiles(*dims, config)), whole)


def test_step_tiles_are_used_when_none_are_given():
    from onnx2gemmini.plan import Plan
    step, a, b, d, whole = _matmul_case((40, 30, 70), 3)
    plan = apply_tiles(Plan("m", "0" * 64, 17, TINY, {}, {}, (step,), (), ()))
    tiled_step = plan.steps[0]
    assert tiled_step.tiles is not None
    assert np.array_equal(run_matmul(tiled_step, a, b, d, TINY), whole)


def test_large_accumulations_wrap_like_the_accumulator():
    """Partial sums are combined modulo 2^32, as the int32 accumulator does, whatever the tile order."""
    step = Matmul("m", I=16, J=16, K=4096, scale=1e-6, act=0)
    a = np.full((16, 4096), -128, np.int8)
    b = np.full((4096, 16), -128, np.int8)                    # products sum to 2^26 ...
    d = np.full(16, 2**31 - 2**25, np.int32)                  # ... and with the bias cross 2^31
    whole = kernels.matmul(a, b, d, step.scale, False)
    assert (whole == -128).all()                              # wrapped to -2^31 + 2^25
    assert np.array_equal(run_matmul(step, a, b, d, TINY, (1, 1, 3)), whole)
