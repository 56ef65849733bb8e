"""Sweeps over small Gemmini steps: find_hazards reports exactly what the address-level machine sees,
and without a hazard the machine's output is the emulator's (kernels.py) bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

from onnx2gemmini.config import PRESETS
from onnx2gemmini.scratchpad import find_hazards, run
from onnx2gemmini.scratchpad.loops import ceil_div, conv_reuse, conv_rows, dw_geometry
from onnx2gemmini.tiling import ConvGeometry, baseline_conv_tiles, choose_conv_tiles
from tests.scratchpad.cases import (
    conv_case,
    conv_dw_case,
    global_average_case,
    matmul_case,
    resadd_case,
)

CONFIGS = st.sampled_from(list(PRESETS.values()))


def check(step, inputs, consts, ref, config, tiles=None):
    """The fast check equals the machine; no hazard -> the emulator's bytes; RTL semantics: never a
    hazard, always the emulator's bytes. Returns the machine's hazards."""
    result = run(step, inputs, consts, config, tiles)
    assert find_hazards(step, config, tiles) == result.hazards
    if not result.hazards:
        assert result.output.shape == ref.shape and np.array_equal(result.output, ref)
    else:
        rtl = run(step, inputs, consts, config, tiles, semantics="rtl")
        assert rtl.hazards == [] and np.array_equal(rtl.output, ref)
    return result.hazards


def out_dim(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def _fits(tiles, g, config):
    spad, acc = conv_rows(tiles, g.stride, g.downsample, g.pool, config)
    return spad <= config.sp_rows // 2 and acc <= config.acc_rows // 2


@st.composite
def conv_tiles(draw, g: ConvGeometry, config):
    """gemmini.h's tiles, the search's, two input tiles (rows or columns halved: operand pinning), or
    any tiles that fit, cutting each dimension into at most two tiles (three for rows and columns) so
    that a call stays a few hundred loops."""
    mode = draw(st.sampled_from(["gemmini.h", "search", "two", "any"]))
    if mode == "gemmini.h":
        return baseline_conv_tiles(g, config)
    if mode == "search":
        return choose_conv_tiles(g, config)
    full = g.max_tiles
    if mode == "two":
        axis = draw(st.sampled_from([1, 2]))
        assume(full[axis] > 1)
        tiles = full[:axis] + (ceil_div(full[axis], 2),) + full[axis + 1:]
    else:
        tiles = tuple(ceil_div(m, draw(st.integers(1, min(m, 3 if axis in (1, 2) else 2))))
                      for axis, m in enumerate(full))
    assume(_fits(tiles, g, config))
    return tiles


@pytest.mark.parametrize("config", list(PRESETS.values()), ids=list(PRESETS))
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_first_layer_convs(config, data, seed):
    """1-4 input channels (several pixels per scratchpad row), 8-64 pixels, kernel 1-7, stride 1-2,
    padding < kernel, fused max-pool 2/2 or 3/2/1 or none (pooling negative values without ReLU too),
    batch 1-2."""
    draw = data.draw
    k = draw(st.integers(1, 7), "kernel")
    rows, cols = draw(st.integers(8, 64), "rows"), draw(st.integers(8, 64), "cols")
    if draw(st.booleans(), "square"):
        cols = rows
    stride, pad = draw(st.integers(1, 2), "stride"), draw(st.integers(0, k - 1), "pad")
    pool = draw(st.sampled_from([None, (2, 2, 0), (3, 2, 1)]), "pool")
    assume(not pool or out_dim(min(rows, cols), k, stride, pad) >= pool[0])
    step, inputs, consts, ref = conv_case(seed, draw(st.integers(1, 2), "batch"), rows, cols,
                                          draw(st.integers(1, 4), "in"), draw(st.integers(1, 40), "out"), k,
                                          stride, pad, pool, relu=draw(st.booleans(), "relu"),
                                          bias=draw(st.booleans(), "bias"))
    g = ConvGeometry.of(step)
    hazards = check(step, inputs, consts, ref, config, draw(conv_tiles(g, config), "tiles"))
    event("hazard" if hazards else "no hazard")


@given(data=st.data(), seed=st.integers(0, 2**16), config=CONFIGS)
def test_convs_with_strided_pixels(data, seed, config):
    """Any channel counts (also > DIM, several channel blocks per mvin), input and output pixels
    further apart than their channels (slices of wider buffers), the downsample path."""
    draw = data.draw
    k, stride = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    rows = draw(st.integers(k, 20))
    step, inputs, consts, ref = conv_case(seed, 1, rows, draw(st.integers(k, 20)), draw(st.integers(1, 80)),
                                          draw(st.integers(1, 80)), k, stride, draw(st.integers(0, k - 1)),
                                          in_extra=draw(st.integers(0, 5)), out_extra=draw(st.integers(0, 5)))
    check(step, inputs, consts, ref, config, draw(conv_tiles(ConvGeometry.of(step), config)))


def test_downsample_conv():
    step, inputs, consts, ref = conv_case(1, 2, 16, 12, 24, 40, 1, 2, 0)
    assert ConvGeometry.of(step).downsample
    for config in PRESETS.values():
        check(step, inputs, consts, ref, config)


@given(data=st.data(), seed=st.integers(0, 2**16), config=CONFIGS)
def test_matmuls(data, seed, config):
    """Any tiles that fit, so that both operands get pinned (I0*K0 <= 2, J0*K0 <= 2) or not; biases
    repeated, full or none; strided rows."""
    draw = data.draw
    I, J, K = (draw(st.integers(1, 120)) for _ in range(3))
    step, inputs, consts, ref = matmul_case(seed, I, J, K, draw(st.sampled_from(["none", "repeating", "full"])),
                                            draw(st.booleans()), tuple(draw(st.integers(0, 3)) for _ in range(4)))
    dim, half_sp, half_acc = config.dim, config.sp_rows // 2, config.acc_rows // 2
    if draw(st.booleans()):
        tiles = None
    else:
        tiles = tuple(draw(st.integers(1, ceil_div(d, dim))) for d in (I, J, K))
        ti, tj, tk = tiles
        assume((ti * tk + tk * tj) * dim <= half_sp and ti * tj * dim <= half_acc)
    assert check(step, inputs, consts, ref, config, tiles) == []


@given(data=st.data(), seed=st.integers(0, 2**16), config=CONFIGS)
def test_resadds(data, seed, config):
    draw = data.draw
    I, J = draw(st.integers(1, 200)), draw(st.integers(1, 200))
    scales = (draw(st.sampled_from([1.0, 0.75])), draw(st.sampled_from([1.0, 1.5])), draw(st.floats(0.01, 2.0)))
    step, inputs, consts, ref = resadd_case(seed, I, J, scales, draw(st.booleans()))
    tiles = None if draw(st.booleans()) else (draw(st.integers(1, I)), draw(st.integers(1, J)))
    assume(tiles is None or ceil_div(tiles[0], config.dim) * config.dim * ceil_div(tiles[1], config.dim)
           <= config.acc_rows // 2)
    assert check(step, inputs, consts, ref, config, tiles) == []


@given(data=st.data(), seed=st.integers(0, 2**16), config=CONFIGS)
def test_global_averages(data, seed, config):
    draw = data.draw
    channels = draw(st.integers(1, 150))
    step, inputs, consts, ref = global_average_case(seed, draw(st.integers(1, 2)), channels, draw(st.integers(1, 7)))
    tiles = None if draw(st.booleans()) else {"channel_tile_size": draw(st.integers(1, channels))}
    assert check(step, inputs, consts, ref, config, tiles) == []


@given(data=st.data(), seed=st.integers(0, 2**16), config=CONFIGS)
def test_depthwise_convs(data, seed, config):
    """One channel per loop; up to DIM kernel columns packed per row, from scratchpad row 0."""
    draw = data.draw
    k = draw(st.integers(1, 5))
    rows, cols = draw(st.integers(max(k, 3), 16)), draw(st.integers(max(k, 3), 16))
    stride, pad = draw(st.integers(1, 2)), draw(st.integers(0, k - 1))
    pool = draw(st.sampled_from([None, (2, 2, 0), (3, 2, 1)]))
    assume(not pool or out_dim(min(rows, cols), k, stride, pad) >= pool[0])
    step, inputs, consts, ref = conv_dw_case(seed, draw(st.integers(1, 2)), rows, cols, draw(st.integers(1, 6)), k,
                                             stride, pad, pool)
    tiles = None
    if draw(st.booleans()):   # each dimension cut into at most two tiles (one channel per loop already)
        g = dw_geometry(step)
        t7 = tuple(ceil_div(m, draw(st.integers(1, min(m, 2)))) for m in g.max_tiles)
        assume(_fits(t7, g, config))
        tiles = dict(zip(("batches", "porows", "pocols", "krows", "kcols"), t7[:3] + t7[4:6]))
    assert check(step, inputs, consts, ref, config, tiles) == []


def test_two_input_tiles_are_what_pins_the_input():
    """The sweep's "two" tiles do reach tiled_conv's a_reuse with a second (id 2) input tile."""
    step, *_ = conv_case(0, 1, 28, 28, 1, 32, 3, 1, 1, pool=(2, 2, 0))
    a_reuse, b_reuse, inputs = conv_reuse(step, (1, 7, 14, 32, 3, 3, 1))
    assert (a_reuse, b_reuse, inputs) == (True, True, 2)
