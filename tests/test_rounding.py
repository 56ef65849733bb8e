"""Ties: multipliers that are powers of two make acc*M land on .5 often, so rounding mistakes show.

Inputs are integers with max 127 (s_in = 1), weights have max 127/128 (s_w = 1/128) and the fused
Clip(0, 127/16) fixes s_out = 1/16, so M = 1/8: every accumulator = 4 mod 8 is a tie.
"""
import numpy as np
from onnx import helper

from onnx2gemmini.data import Dataset
from onnx2gemmini import kernels
from tests.helpers import assert_matches_ort, infer_outputs, rng


def _integer_data(shape, samples, seed):
    r = rng(seed)
    x = r.integers(-127, 128, size=(samples,) + tuple(shape)).astype(np.float32)
    x.reshape(samples, -1)[:, 0] = 127.0
    return x


def _weights(shape, seed):
    w = rng(seed).integers(-127, 128, size=shape).astype(np.float32) / 128.0
    w.reshape(-1)[0] = 127 / 128
    return w


def test_conv_ties_round_half_to_even_like_onnxruntime():
    inits = {"W": _weights((8, 4, 3, 3), 1), "B": np.zeros(8, np.float32),
             "lo": np.float32(0), "hi": np.float32(127 / 16)}
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    model = infer_outputs(nodes, {"x": [1, 4, 6, 6]}, inits)
    calib = Dataset({"x": _integer_data((1, 4, 6, 6), 2, 0)}, None, "ints")
    compiled, result = assert_matches_ort(model, calib=calib)
    conv = next(s for s in compiled.plan.steps if s.kind == "conv")
    assert conv.scale == 0.125
    # the data really contains ties, so the test can fail
    x = _integer_data((1, 4, 6, 6), 2, 0)[0].transpose(0, 2, 3, 1).astype(np.int8)
    acc = kernels.int8_matmul(kernels.im2col(x, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (6, 6)),
                              compiled.plan.constants[conv.weights])
    assert np.count_nonzero((acc % 8 == 4) & (acc > 0)) > 10


def test_gemm_ties_round_half_to_even_like_onnxruntime():
    inits = {"W": _weights((32, 16), 2), "lo": np.float32(0), "hi": np.float32(127 / 16)}
    nodes = [helper.make_node("Gemm", ["x", "W"], ["g"]),
             helper.make_node("Clip", ["g", "lo", "hi"], ["y"])]
    model = infer_outputs(nodes, {"x": [4, 32]}, inits)
    calib = Dataset({"x": _integer_data((4, 32), 2, 3)}, None, "ints")
    compiled, _ = assert_matches_ort(model, calib=calib)
    assert next(s for s in compiled.plan.steps if s.kind == "matmul").scale == 0.125
