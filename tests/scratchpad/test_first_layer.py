"""The MNIST-style first layer of spec/gemmini.md §3.10 (1 -> 32 channels, 28x28, 3x3, pad 1, fused 2x2
max-pool, DIM 16): its second input tile, pinned at scratchpad id 2, is loaded with 3 pixels per row, and
libgemmini's mvin also writes the 2 rows below it — the last rows of the weights pinned at id 1."""
from __future__ import annotations

import numpy as np
import pytest

from onnx2gemmini.config import PRESETS
from onnx2gemmini import kernels
from onnx2gemmini.scratchpad import find_hazards, run
from onnx2gemmini.tiling import ConvGeometry, baseline_conv_tiles, choose_conv_tiles
from tests.scratchpad.cases import conv_case

DEFAULT = PRESETS["default"]
HALF = DEFAULT.sp_rows // 2


def mnist_case(seed=0):
    return conv_case(seed, 1, 28, 28, 1, 32, 3, 1, 1, pool=(2, 2, 0))


TILINGS = {"gemmini.h": lambda g: baseline_conv_tiles(g, DEFAULT), "search": lambda g: choose_conv_tiles(g, DEFAULT)}


@pytest.mark.parametrize("tiling", list(TILINGS))
def test_hazard_found_and_machine_agrees(tiling):
    step, inputs, consts, _ = mnist_case()
    tiles = TILINGS[tiling](ConvGeometry.of(step))
    hazards = find_hazards(step, DEFAULT, tiles)
    assert hazards == run(step, inputs, consts, DEFAULT, tiles).hazards
    assert [(h.operand, h.rows, h.writer) for h in hazards] == [("B", (HALF - 2, HALF - 1), "the A load of loop 2")]
    assert "reads B from scratchpad rows 8190..8191" in str(hazards[0])
    assert find_hazards(step, DEFAULT, tiles, "rtl") == []


def _second_tile(step, tiles):
    """(pooled output region of the second input tile, its first two pixels in the padded input)."""
    _, porows, pocols, *_ = tiles
    pr, pc = step.pool_out_dims
    if porows < pr:
        region, porow, pocol = (slice(porows, pr), slice(0, pc)), porows, 0
    else:
        region, porow, pocol = (slice(0, pr), slice(pocols, pc)), 0, pocols
    row = max(porow * step.pool_stride - step.pool_padding, 0) * step.stride
    col = max(pocol * step.pool_stride - step.pool_padding, 0) * step.stride
    return region, row, col


@pytest.mark.parametrize("tiling", list(TILINGS))
def test_spike_output_is_the_emulator_with_the_clobbered_weights(tiling):
    """Predicted from first principles: in the second tile's loops, weight row (krow 2, kcol 2) holds in
    columns 1 and 2 the tile's input pixels 0 and 1, and row (krow 2, kcol 1) pixel 0 in column 2; the
    columns are output channels of the pinned first channel tile. Everything else is the emulator's."""
    step, inputs, consts, ref = mnist_case(3)
    tiles = TILINGS[tiling](ConvGeometry.of(step))
    (rows, cols), r0, c0 = _second_tile(step, tiles)
    xpad = np.pad(inputs["x"], ((0, 0), (1, 1), (1, 1), (0, 0)))
    p0, p1 = xpad[0, r0, c0, 0], xpad[0, r0, c0 + 1, 0]
    w = consts["w"].copy()
    w[8, 1], w[8, 2], w[7, 2] = p0, p1, p0
    clobbered = kernels.conv(inputs["x"], w, consts["b"], 1, 1, 3, (28, 28), step.scale, True, (2, 2, 0))
    predicted = ref.copy()
    pinned = slice(0, tiles[3])                                 # channels of the weights pinned at id 1
    predicted[:, rows, cols, pinned] = clobbered[:, rows, cols, pinned]

    got = run(step, inputs, consts, DEFAULT, tiles).output
    assert np.array_equal(got, predicted)
    assert set(np.nonzero(got != ref)[3]) == {1, 2}


@pytest.mark.parametrize("tiling", list(TILINGS))
def test_rtl_semantics_give_the_emulator_bytes(tiling):
    step, inputs, consts, ref = mnist_case(5)
    result = run(step, inputs, consts, DEFAULT, TILINGS[tiling](ConvGeometry.of(step)), semantics="rtl")
    assert result.hazards == []
    assert np.array_equal(result.output, ref)
