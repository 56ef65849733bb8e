"""Cross-layer equalization and bias correction: the float function is kept, the int8 error shrinks."""
import numpy as np
import onnx
from onnx import helper, numpy_helper

import onnx2gemmini as o2g
from onnx2gemmini.ort_session import session
from onnx2gemmini.compare import run_diff
from onnx2gemmini.fidelity import NO_FLOORS
from onnx2gemmini.config import PRESETS
from onnx2gemmini.golden import build_float, build_qdq
from onnx2gemmini.graph import from_onnx
from onnx2gemmini.load import load
from onnx2gemmini.passes import run_passes
from tests.helpers import infer_outputs, random_dataset, rng


def pw_dw_pw(seed=0):
    """MobileNet's pointwise -> depthwise -> pointwise, with very uneven channel ranges."""
    r = rng(seed)
    spread = np.logspace(-2, 1, 8).astype(np.float32)
    inits = {"W1": (r.normal(size=(8, 4, 1, 1)) * spread.reshape(8, 1, 1, 1)).astype(np.float32),
             "W2": (r.normal(size=(8, 1, 3, 3)) / spread.reshape(8, 1, 1, 1)).astype(np.float32),
             "W3": r.normal(size=(6, 8, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W1"], ["a"], kernel_shape=[1, 1]), helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "W2"], ["b"], kernel_shape=[3, 3], pads=[1] * 4, group=8),
             helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Conv", ["br", "W3"], ["y"], kernel_shape=[1, 1])]
    return infer_outputs(nodes, {"x": [1, 4, 6, 6]}, inits)


def channel_range_spread(w):
    r = np.abs(w).reshape(w.shape[0], -1).max(axis=1)
    return r.max() / r.min()


def test_equalization_keeps_the_function_and_evens_ranges():
    model = pw_dw_pw()
    graph, changes = run_passes(from_onnx(load(model).model), PRESETS["default"], ("equalize",))
    assert any("equalized" in c for c in changes)
    x = {"x": rng(1).normal(size=(1, 4, 6, 6)).astype(np.float32)}
    ref = session(model).run(None, x)[0]
    np.testing.assert_allclose(session(build_float(graph)).run(None, x)[0], ref, rtol=1e-4, atol=1e-4)
    w1 = graph.initializers[graph.nodes[0].inputs[1]]
    original = next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "W1")
    assert channel_range_spread(w1) < channel_range_spread(original) / 10


def sqnr(model, **options):
    compiled = o2g.compile(model, calib=random_dataset(model, 16, 0, 0.0, 1.0), **options)
    result = run_diff(compiled, random_dataset(model, 16, 1, 0.0, 1.0), floors=NO_FLOORS)
    assert result["verdict"]["passed"]  # still bit-exact against onnxruntime's QDQ run
    return result["outputs"]["y"]["fp32_vs_int8"]["sqnr_db"]


def test_each_cure_improves_the_depthwise_block():
    model = pw_dw_pw()
    plain = sqnr(model, equalize=False, bias_correction=False)
    assert sqnr(model, equalize=True, bias_correction=False) > plain
    assert sqnr(model, equalize=False, bias_correction=True) > plain


def test_pre_quantized_models_are_not_equalized(tmp_path):
    first = o2g.compile(pw_dw_pw(), calib=random_dataset(pw_dw_pw()))
    path = tmp_path / "q.onnx"
    onnx.save(build_qdq(first.graph, first.quant), path)
    assert not any("equalize" in c for c in o2g.compile(path).changes)
