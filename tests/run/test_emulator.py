"""The emulator's fast paths (float32 weights converted once, one float32 GEMM where the bound allows it)
compute exactly what the plain int32 path computes, wrap-around included."""
import numpy as np
import pytest

import onnx2gemmini as o2g
from onnx2gemmini import kernels
from onnx2gemmini.data import load_data
from onnx2gemmini.run.emulator import Emulator
from tests.test_cli import CALIB, EVAL, MODEL


def reference_matmul(a, b, d, scale, relu):
    """int64 accumulation wrapped to int32, then Gemmini's read-out: the arithmetic spelled out."""
    acc = a.astype(np.int64) @ b.astype(np.int64)
    if d is not None:
        acc = acc + d.astype(np.int64).reshape(1, -1)
    acc = acc.astype(np.uint32).view(np.int32) if acc.size else acc.astype(np.int32)
    y = np.rint(acc.astype(np.float32) * np.float32(scale))
    return np.clip(y, 0 if relu else -128, 127).astype(np.int8)


@pytest.mark.parametrize("k,weight,bias", [(64, 127, 1000), (1024, 127, 0), (1100, 127, 5), (5000, 3, 2**20),
                                           (4000, 127, 2**31 - 1)],
                         ids=["small", "K1024", "K1100", "small-weights", "wraps"])
def test_float32_path_only_where_exact_and_equal_to_the_int_path(k, weight, bias):
    r = np.random.default_rng(k)
    a = r.integers(-128, 128, (7, k)).astype(np.int8)
    a[0] = -128
    b = np.full((k, 5), weight, np.int8)
    b[:, 1] = -weight
    d = np.full(5, bias, np.int32)
    exact = kernels.float32_exact(b, d)
    assert exact == (128 * k * weight + bias <= 2**24)
    want = reference_matmul(a, b, d, 0.001, False)
    got = kernels.matmul(a, b.astype(np.float32), d, 0.001, False, exact_f32=exact)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(kernels.matmul(a, b, d, 0.001, False), want)


def test_float32_exact_needs_the_matrix_shape():
    with pytest.raises(ValueError, match="K, J"):
        kernels.float32_exact(np.zeros(6, np.int8), None)


def test_emulator_fast_paths_equal_the_int32_path(monkeypatch):
    """The bundled model: float32 GEMMs (where the bound allows) and cached weights give the bytes of the
    int32 path on int8 weights, every tensor of every step."""
    compiled = o2g.compile(MODEL, calib=CALIB, num_calib=16)
    data = load_data(EVAL, compiled.graph.inputs).head(3)
    fast = Emulator(compiled.plan)
    runs = [fast.run(data.sample(i), keep=True) for i in range(3)]
    assert any(fast._exact.values())
    monkeypatch.setattr(kernels, "float32_exact", lambda b, d: False)
    slow = Emulator(compiled.plan)
    monkeypatch.setattr(slow, "weights", lambda tid: compiled.plan.constants[tid])
    for i, buffers in enumerate(runs):
        plain = slow.run(data.sample(i), keep=True)
        assert plain.keys() == buffers.keys()
        for tid in plain:
            np.testing.assert_array_equal(plain[tid], buffers[tid])


def einsum_depthwise(x, w, bias, kernel, strides, pads, dilations, out, multiplier, scale, relu):
    """The depthwise conv as one int32 einsum over the windows (the plain spelling)."""
    win = kernels.windows(x, kernel, strides, pads, dilations, out).astype(np.int32)
    if multiplier > 1:
        win = np.repeat(win, multiplier, axis=-1)
    acc = np.einsum("nhwijc,ijc->nhwc", win, w.astype(np.int32))
    if bias is not None:
        acc = acc + bias
    return kernels.acc_scale(kernels.wrap_int32(acc), scale, relu)


@pytest.mark.parametrize("kernel,strides,pads,dilations,multiplier,bias", [
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, 0), ((3, 3), (2, 2), (0, 1, 1, 0), (1, 1), 1, 2**31 - 1),
    ((5, 3), (1, 2), (2, 1, 2, 1), (2, 1), 2, -2**31), ((1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 3, 7)],
    ids=["3x3", "stride2-wraps", "5x3-dilated-mult2", "1x1-mult3"])
def test_depthwise_taps_equal_the_einsum(kernel, strides, pads, dilations, multiplier, bias):
    r = np.random.default_rng(1)
    n, h, w_, c = 2, 9, 8, 3
    x = r.integers(-128, 128, (n, h, w_, c)).astype(np.int8)
    x[0, :3] = -128
    w = r.integers(-127, 128, (kernel[0], kernel[1], c * multiplier)).astype(np.int8)
    w[..., 0] = -127
    b = np.full(c * multiplier, bias, np.int32)
    oh = (h + pads[0] + pads[2] - dilations[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    ow = (w_ + pads[1] + pads[3] - dilations[1] * (kernel[1] - 1) - 1) // strides[1] + 1
    args = (x, w, b, kernel, strides, pads, dilations, (oh, ow), multiplier, 0.0123, False)
    np.testing.assert_array_equal(kernels.depthwise_conv(*args), einsum_depthwise(*args))
    np.testing.assert_array_equal(kernels.depthwise_conv(*args[:2], None, *args[3:]),
                                  einsum_depthwise(*args[:2], None, *args[3:]))
