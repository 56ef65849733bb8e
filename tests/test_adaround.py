"""AdaRound: weights rounded up or down to minimise the layer's output error, never further than the two
neighbouring integers, and the compiled model still matches onnxruntime bit for bit where it did."""
import numpy as np
import pytest
from onnx import helper

from onnx2gemmini.quant import adaround
from onnx2gemmini.numerics import scale_for
from tests.helpers import assert_matches_ort, make_model, rng

GEOMETRY = {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1)}


def smooth_images(n=8, c=16, side=20, seed=0) -> np.ndarray:
    """Non-negative, spatially correlated inputs (what a conv after a ReLU sees): neighbouring patch
    values move together, which is where rounding each weight to nearest is far from best."""
    x = rng(seed).normal(size=(n, c, side + 4, side + 4))
    x = sum(x[:, :, i:i + side, j:j + side] for i in range(5) for j in range(5)) / 5
    return np.maximum(x, 0).astype(np.float32)


def test_im2col_rows_reproduce_the_convolution():
    x = smooth_images(2, 3, 6)
    w = rng(1).normal(size=(4, 3, 3, 3)).astype(np.float32)
    rows = adaround.layer_rows(x, GEOMETRY)
    got = (rows @ np.moveaxis(w, 0, -1).reshape(-1, 4)).reshape(2, 6, 6, 4)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 6, 6, 4))
    for i in range(3):
        for j in range(3):
            want += np.einsum("nchw,oc->nhwo", xp[:, :, i:i + 6, j:j + 6], w[:, :, i, j])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_rounding_lowers_the_output_error_and_stays_between_neighbours():
    rows = adaround.layer_rows(smooth_images(), GEOMETRY)
    w = rng(2).normal(0, 0.1, (rows.shape[1], 24))
    s = scale_for(float(np.abs(w).max()))
    nearest = np.round(w / s).astype(np.int8)
    q = adaround.round_weights(w, rows, s)
    assert np.all((q == np.floor(w / s)) | (q == np.ceil(w / s)))
    assert np.mean(q != nearest) > 0.01  # it does change roundings ...
    before, after = adaround.output_error(w, nearest, rows, s), adaround.output_error(w, q, rows, s)
    assert after < 0.8 * before  # ... and the output error drops by more than a fifth
    per_column = adaround.round_weights(w, rows, np.full(24, s, np.float32))
    np.testing.assert_array_equal(per_column, q)  # one scale per output column: the same problem here


@pytest.mark.parametrize("op", ["Conv", "Gemm"])
def test_compiled_with_adaround_matches_onnxruntime(op):
    r = rng(3)
    if op == "Conv":
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["y"])]
        inits = {"w": r.normal(0, 0.2, (8, 4, 3, 3)).astype(np.float32), "b": r.normal(0, 0.1, 8).astype(np.float32)}
        model = make_model(nodes, {"x": [1, 4, 8, 8]}, {"y": [1, 8, 8, 8]}, inits)
    else:
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)]
        inits = {"w": r.normal(0, 0.2, (16, 32)).astype(np.float32), "b": r.normal(0, 0.1, 16).astype(np.float32)}
        model = make_model(nodes, {"x": [64, 32]}, {"y": [64, 16]}, inits)
    compiled, _ = assert_matches_ort(model, samples=8, adaround=True)
    assert compiled.quant.adarounded == (nodes[0].name or compiled.graph.nodes[0].name,)
    assert "1 rounded by AdaRound" in compiled.quant.weight_scheme()
    plain, _ = assert_matches_ort(model, samples=8)
    layer = compiled.graph.nodes[0].name
    assert not np.array_equal(compiled.quant.weights[layer].q, plain.quant.weights[layer].q)


def test_a_layer_with_too_few_calibration_rows_keeps_nearest_rounding():
    """A Gemm on one row per sample: 8 samples cannot pin down 32 inputs' worth of rounding choices."""
    r = rng(4)
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)]
    model = make_model(nodes, {"x": [1, 32]}, {"y": [1, 16]}, {"w": r.normal(0, 0.2, (16, 32)).astype(np.float32)})
    compiled, _ = assert_matches_ort(model, samples=8, adaround=True)
    assert compiled.quant.adarounded == ()
