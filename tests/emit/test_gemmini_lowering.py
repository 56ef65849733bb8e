"""The tile_matmul oracle (gemmini_lowering.py): Buddy-MLIR's lowering and gemmini.h, transcribed, executed by a
transcription of libgemmini's loop_ws. The gemmini.h side must compute what the emulator computes (the C back
end's proven arithmetic); Buddy's side must too for the bias form model.mlir emits, and must not for the one-row
form model.mlir used to emit (the negative control: it reads past D)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx2gemmini import kernels
from tests.emit import gemmini_lowering as gl

CFG = gl.Config()
DIM = CFG.dim


def case(rng, i, j, k, bias: str):
    a = rng.integers(-128, 128, (i, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, j), dtype=np.int8)
    d = {"none": None, "row": rng.integers(-3000, 3000, (1, j), dtype=np.int32),
         "full": rng.integers(-3000, 3000, (i, j), dtype=np.int32)}[bias]
    return a, b, d


def emulator(a, b, d, scale, relu, full_c):
    bias = None if d is None else np.broadcast_to(d, (a.shape[0], b.shape[1]))
    return kernels.matmul(a, b, bias, scale, relu, False, full_C=full_c)


def valid_tiles(i, j, k, draw_i, draw_j, draw_k):
    blocks = [-(-n // DIM) for n in (i, j, k)]
    ti, tj, tk = (1 + d % b for d, b in zip((draw_i, draw_j, draw_k), blocks))
    while (ti * tk + tk * tj) * DIM > gl.BANK_NUM * CFG.bank_rows // 2 or ti * tj * DIM > CFG.acc_rows // 2:
        ti, tj, tk = max(1, ti // 2), max(1, tj // 2), max(1, tk // 2)
    return ti, tj, tk


SHAPES = st.tuples(st.integers(1, 70), st.integers(1, 70), st.integers(1, 90))


@settings(max_examples=40, deadline=None)
@given(shape=SHAPES, bias=st.sampled_from(["none", "row", "full"]), relu=st.booleans(), full_c=st.booleans(),
       tiles=st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9)), seed=st.integers(0, 2**16))
def test_gemmini_h_computes_what_the_emulator_computes(shape, bias, relu, full_c, tiles, seed):
    """The transcriptions are right where they can be checked against our proven arithmetic: gemmini.h's
    tiled_matmul on libgemmini's loop_ws gives the emulator's values, for any tiling."""
    i, j, k = shape
    a, b, d = case(np.random.default_rng(seed), i, j, k, bias)
    scale = 0.0123
    program = gl.gemmini_h_tiled_matmul(i, j, k, d is not None, bias == "row", int(relu), scale, full_c,
                                        valid_tiles(i, j, k, *tiles), CFG)
    got = gl.execute(program, {"A": a, "B": b, "D": d if d is not None else np.zeros((1, 1), np.int32)}, (i, j), CFG)
    np.testing.assert_array_equal(got, emulator(a, b, d, scale, relu, full_c))


@settings(max_examples=40, deadline=None)
@given(shape=SHAPES, bias=st.sampled_from(["none", "row", "full"]), relu=st.booleans(), full_c=st.booleans(),
       seed=st.integers(0, 2**16))
def test_buddys_lowering_of_the_emitted_bias_form_computes_what_gemmini_h_computes(shape, bias, relu, full_c, seed):
    """model.mlir's operands: a repeating bias as DIM identical rows (zeros without a bias), a full bias as is.
    Through Buddy's lowering, with Buddy's own tile sizes, Gemmini computes gemmini.h's (and the emulator's)
    values."""
    i, j, k = shape
    a, b, d = case(np.random.default_rng(seed), i, j, k, bias)
    repeating = bias != "full"
    d_emitted = np.tile(d if d is not None else np.zeros((1, j), np.int32), (DIM, 1)) if repeating else d
    program = gl.buddy_tile_matmul(a.shape, b.shape, (i, j), d_emitted.shape, repeating, int(relu), 0.0123, full_c,
                                   CFG)
    got = gl.execute(program, {"A": a, "B": b, "D": d_emitted}, (i, j), CFG)
    np.testing.assert_array_equal(got, emulator(a, b, d, 0.0123, relu, full_c))


@pytest.mark.parametrize("i", [2, 5, 17, 40])
def test_the_one_row_bias_form_fails_under_buddys_lowering(i):
    """Negative control, the form model.mlir emitted before (memref<1xJxi32>, repeatingBias): Buddy's config_ld
    gives D its memref's row stride, so the second row of every DIM-row block reads past the bias."""
    a, b, d = case(np.random.default_rng(i), i, 24, 32, "row")
    program = gl.buddy_tile_matmul(a.shape, b.shape, (i, 24), d.shape, True, 0, 0.02, False, CFG)
    assert program.ld_stride[2] == 24 * 4            # where gemmini.h has 0
    with pytest.raises(gl.OutOfBounds, match="D"):
        gl.execute(program, {"A": a, "B": b, "D": d}, (i, 24), CFG)
    reference = gl.gemmini_h_tiled_matmul(i, 24, 32, True, True, 0, 0.02, False, program.tiles, CFG)
    assert reference.ld_stride[2] == 0


def test_a_one_row_matmul_is_right_in_either_form():
    """Why the models whose matmuls all have one row were exact through Buddy before: row 0 is the bias."""
    a, b, d = case(np.random.default_rng(3), 1, 40, 20, "row")
    program = gl.buddy_tile_matmul(a.shape, b.shape, (1, 40), d.shape, True, 0, 0.05, False, CFG)
    got = gl.execute(program, {"A": a, "B": b, "D": d}, (1, 40), CFG)
    np.testing.assert_array_equal(got, emulator(a, b, d, 0.05, False, False))


def test_buddys_tiles_fill_the_double_buffered_scratchpad():
    """The tile sizes of Buddy's heuristic (its port of tiled_matmul_auto) stay within loop_ws's bounds and
    grow to the matrix (a 1000-wide layer at DIM 16: J takes every block it can)."""
    for i, j, k in [(1, 1000, 512), (196, 64, 576), (3136, 16, 144), (16, 16, 16)]:
        ti, tj, tk = gl.buddy_tiles(i, j, k, CFG)
        assert (ti * tk + tk * tj) * DIM <= gl.BANK_NUM * CFG.bank_rows // 2 and ti * tj * DIM <= CFG.acc_rows // 2
        assert ti <= -(-i // DIM) and tj <= -(-j // DIM) and tk <= -(-k // DIM)
