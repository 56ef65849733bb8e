"""Rewrite passes, checked on unsimplified graphs so each pattern is exercised by our code."""
import numpy as np
import pytest
from onnx import helper

from onnx2gemmini.ort_session import session as ort_session
from onnx2gemmini.config import PRESETS
from onnx2gemmini.graph import from_onnx
from onnx2gemmini.load import load
from onnx2gemmini.passes import run_passes
from tests.helpers import assert_matches_ort, infer_outputs, rng


def rewritten(model, config="default"):
    graph, changes = run_passes(from_onnx(load(model, simplify=False).model), PRESETS[config])
    return graph, changes


def conv_bn_relu_pool(pool_pads=0):
    r = rng(0)
    inits = {"W": r.normal(size=(4, 3, 3, 3)).astype(np.float32), "s": r.uniform(0.5, 2, 4).astype(np.float32),
             "b": r.normal(size=4).astype(np.float32), "m": r.normal(size=4).astype(np.float32),
             "v": r.uniform(0.5, 2, 4).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[pool_pads] * 4)]
    return infer_outputs(nodes, {"x": [1, 3, 8, 8]}, inits)


def test_bn_relu_pool_fold_into_one_conv_with_same_numbers():
    model = conv_bn_relu_pool(pool_pads=1)
    graph, changes = rewritten(model)
    assert [n.op_type for n in graph.nodes] == ["Conv"]
    conv = graph.nodes[0]
    assert conv.fused.relu and conv.fused.pool.padding == 1
    assert conv.outputs == ["y"]
    assert len(changes) == 3
    # the folded conv computes the same floats as conv + BN
    x = rng(1).normal(size=(1, 3, 8, 8)).astype(np.float32)
    ref = ort_session(model).run(None, {"x": x})[0]
    w, b = graph.initializers[conv.inputs[1]], graph.initializers[conv.inputs[2]]
    folded = helper.make_graph([helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3],
                                                 pads=[1, 1, 1, 1]),
                                helper.make_node("Relu", ["c"], ["r"]),
                                helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                                 pads=[1, 1, 1, 1])], "f",
                               [helper.make_tensor_value_info("x", 1, [1, 3, 8, 8])],
                               [helper.make_tensor_value_info("y", 1, None)],
                               [helper.make_tensor("W", 1, w.shape, w.ravel()),
                                helper.make_tensor("B", 1, b.shape, b.ravel())])
    m = helper.make_model(folded, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    got = ort_session(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_pool_not_fused_on_a_config_without_max_pool():
    graph, _ = rewritten(conv_bn_relu_pool(), "ibert")
    assert [n.op_type for n in graph.nodes] == ["Conv", "MaxPool"]


def test_padded_pool_not_fused_without_relu():
    r = rng(0)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3]),
             helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    model = infer_outputs(nodes, {"x": [1, 3, 8, 8]}, {"W": r.normal(size=(4, 3, 3, 3)).astype(np.float32)})
    graph, _ = rewritten(model)
    assert [n.op_type for n in graph.nodes] == ["Conv", "MaxPool"]


def test_pool_window_above_three_not_fused():
    r = rng(0)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[4, 4], strides=[4, 4])]
    model = infer_outputs(nodes, {"x": [1, 3, 8, 8]}, {"W": r.normal(size=(4, 3, 1, 1)).astype(np.float32)})
    graph, _ = rewritten(model)
    assert [n.op_type for n in graph.nodes] == ["Conv", "MaxPool"]


def test_matmul_add_becomes_bias_and_clip_0_6_fuses():
    r = rng(0)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Clip", ["a", "lo", "hi"], ["y"])]
    model = infer_outputs(nodes, {"x": [2, 8]}, {"W": r.normal(size=(8, 4)).astype(np.float32),
                                                "b": r.normal(size=4).astype(np.float32),
                                                "lo": np.float32(0), "hi": np.float32(6)})
    graph, changes = rewritten(model)
    assert [n.op_type for n in graph.nodes] == ["MatMul"]
    node = graph.nodes[0]
    assert node.fused.clip == (0.0, 6.0) and node.fused.bias
    assert any("became the bias" in c for c in changes)


def test_add_of_two_activations_is_not_a_bias():
    r = rng(0)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "x2"], ["y"])]
    model = infer_outputs(nodes, {"x": [2, 8], "x2": [2, 4]}, {"W": r.normal(size=(8, 4)).astype(np.float32)})
    graph, _ = rewritten(model)
    assert [n.op_type for n in graph.nodes] == ["MatMul", "Add"]


def bn_scale_relu(mul_shape=(3, 1, 1), add_shape=(1, 3, 1, 1)):
    """A standalone BN followed by a Caffe-style Scale (per-channel Mul and Add) and a ReLU."""
    r = rng(3)
    inits = {"s": r.uniform(0.5, 2, 3).astype(np.float32), "b": r.normal(size=3).astype(np.float32),
             "m": r.normal(size=3).astype(np.float32), "v": r.uniform(0.5, 2, 3).astype(np.float32),
             "k": r.uniform(-2, 2, mul_shape).astype(np.float32), "t": r.normal(size=add_shape).astype(np.float32)}
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"]),
             helper.make_node("Mul", ["k", "n"], ["p"]), helper.make_node("Add", ["p", "t"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    return infer_outputs(nodes, {"x": [1, 3, 5, 5]}, inits)


def test_per_channel_scale_and_relu_merge_into_one_batchnorm():
    from tests.helpers import assert_matches_ort
    model = bn_scale_relu()
    graph, changes = rewritten(model)
    assert [n.op_type for n in graph.nodes] == ["BatchNormalization"]
    assert graph.nodes[0].fused.relu and graph.nodes[0].outputs == ["y"]
    assert sum("merged into" in c for c in changes) == 2
    compiled, _ = assert_matches_ort(model)
    assert [getattr(s, "op", s.kind) for s in compiled.plan.steps] == ["quantize", "affine", "transpose"]


def test_a_mul_along_another_axis_is_not_merged():
    graph, _ = rewritten(bn_scale_relu(mul_shape=(1, 1, 5)))
    assert [n.op_type for n in graph.nodes] == ["BatchNormalization", "Mul", "Add"]


def gated(gate="Sigmoid", swapped=False, shared=False, **attrs):
    """conv -> gate -> Mul(conv, gate) (SiLU or written-out hard swish); `shared`: the gate also an output."""
    w = rng(40).uniform(-0.4, 0.4, (6, 3, 3, 3)).astype(np.float32)
    mul_in = ["s", "c"] if swapped else ["c", "s"]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node(gate, ["c"], ["s"], **attrs), helper.make_node("Mul", mul_in, ["y"])]
    return infer_outputs(nodes, {"x": [1, 3, 5, 5]}, {"w": w}, outputs=("y", "s") if shared else ("y",))


@pytest.mark.parametrize("gate,attrs,swapped", [("Sigmoid", {}, False), ("Sigmoid", {}, True),
                                                ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, False)])
def test_x_times_its_gate_becomes_one_lookup_table(gate, attrs, swapped):
    model = gated(gate, swapped, **attrs)
    graph, changes = rewritten(model)
    assert [n.op_type for n in graph.nodes] == ["Conv", "Mul"] and graph.nodes[1].fused.gate[0] == gate
    compiled, result = assert_matches_ort(model, samples=6)
    assert [getattr(s, "op", s.kind) for s in compiled.plan.steps].count("lut") == 1
    assert result["layers"][-1]["mismatches_vs_ort_qdq"] <= result["layers"][-1]["allowed_mismatches"]


def test_a_gate_read_elsewhere_is_not_fused():
    graph, _ = rewritten(gated(shared=True))
    assert [n.op_type for n in graph.nodes] == ["Conv", "Sigmoid", "Mul"]


@pytest.mark.parametrize("attrs,shape", [
    ({"kernel_shape": [3], "pads": [1, 1]}, (2, 8, 20)),
    ({"kernel_shape": [5], "strides": [2], "pads": [3, 1], "dilations": [2], "group": 4}, (1, 8, 33)),
    ({"kernel_shape": [1]}, (1, 8, 7)),
    ({"kernel_shape": [4], "auto_pad": "SAME_UPPER", "strides": [3]}, (1, 8, 17)),
], ids=["k3", "strided-dilated-grouped", "pointwise", "same-upper"])
def test_conv1d_runs_as_a_2d_conv_of_height_one(attrs, shape):
    r = rng(3)
    group = attrs.get("group", 1)
    inits = {"W": r.normal(size=(12, shape[1] // group, attrs["kernel_shape"][0])).astype(np.float32),
             "B": r.normal(size=12).astype(np.float32)}
    model = infer_outputs([helper.make_node("Conv", ["x", "W", "B"], ["c"], **attrs),
                           helper.make_node("Relu", ["c"], ["y"])], {"x": list(shape)}, inits)
    graph, changes = rewritten(model)
    assert any("1-D Conv as a 2-D Conv" in c for c in changes)
    conv = next(n for n in graph.nodes if n.op_type == "Conv")
    assert len(graph.shapes[conv.inputs[0]]) == 4 and conv.fused.relu
    assert_matches_ort(model)


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("AveragePool", {"kernel_shape": [2], "strides": [2]}),
    ("AveragePool", {"kernel_shape": [3], "pads": [1, 1], "count_include_pad": 1}),
], ids=["maxpool", "avgpool", "avgpool-pad"])
def test_pool1d_runs_as_a_2d_pool_of_height_one(op, attrs):
    model = infer_outputs([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": [1, 8, 21]})
    graph, changes = rewritten(model)
    assert any(f"1-D {op} as a 2-D" in c for c in changes)
    assert_matches_ort(model)


def test_an_empty_slice_feeding_a_concat_is_dropped():
    """Partial rotary embeddings concatenate a zero-width slice: it is dropped, the rest compiles."""
    starts, ends, axes = (np.array([v], np.int64) for v in (8, 8, -1))
    inits = {"s": starts, "e": ends, "a": axes}
    model = infer_outputs([helper.make_node("Slice", ["x", "s", "e", "a"], ["empty"]),
                           helper.make_node("Relu", ["x"], ["r"]),
                           helper.make_node("Concat", ["r", "empty"], ["y"], axis=-1)], {"x": [1, 4, 8]}, inits)
    graph, changes = rewritten(model)
    assert any("empty output, dropped" in c for c in changes)
    assert [n.op_type for n in graph.nodes] == ["Relu", "Identity"]
    assert_matches_ort(model)


@pytest.mark.parametrize("shape,axis", [((6, 5, 3, 3), 0), ((6, 5, 3, 3), 1), ((7, 1, 3, 3), 0), ((9,), 0)])
@pytest.mark.parametrize("op", [np.divide, np.multiply])
def test_equalization_scales_blockwise_exactly_as_in_float64(shape, axis, op, monkeypatch):
    """Block by block (here 7 values per block, so several) the scaled weights are float32(float64 w op s)
    bit for bit; negative control: the same in float32 differs."""
    from onnx2gemmini.passes import equalize
    monkeypatch.setattr(equalize, "BLOCK", 7)
    r = np.random.default_rng(len(shape) + axis)
    w = (r.normal(size=shape) * r.uniform(1e-3, 10, size=shape)).astype(np.float32)
    s = r.uniform(0.01, 100, size=shape[axis])
    s = s.reshape([-1 if a == axis else 1 for a in range(len(shape))])
    want = op(w.astype(np.float64), s).astype(np.float32)
    got = equalize._scaled(op, w, s)
    assert got.dtype == np.float32 and np.array_equal(got.view(np.int32), want.view(np.int32))
    assert not np.array_equal(op(w, s.astype(np.float32)), want)
