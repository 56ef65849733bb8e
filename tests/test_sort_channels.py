"""Sorted output channels (passes/sort_channels.py, `--weight-scales sorted`): the float function is unchanged,
channels of like range share a weight-scale group, and the int8 code stays bit-exact with onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnx2gemmini as o2g
from onnx2gemmini.ort_session import session as ort_session
from onnx2gemmini.compiler import prepare
from onnx2gemmini.golden import build_float
from onnx2gemmini.passes.sort_channels import MIN_GAIN_DB, group_gain_db
from tests.helpers import assert_matches_ort, infer_outputs, random_dataset, rng

OC = 48  # three groups of DIM (16) channels; every third channel (16 of them) at full range


def spread_weights(oc=OC, c=8, k=3, small=0.02, seed=0) -> np.ndarray:
    """Every third output channel at full range, the others at `small` of it: contiguous groups mix them."""
    w = rng(seed).normal(0, 0.3, (oc, c, k, k)).astype(np.float32)
    return w * np.where(np.arange(oc) % 3 == 0, 1.0, small).astype(np.float32).reshape(-1, 1, 1, 1)


def sorted_chain(reader: str = "silu", small: float = 0.02) -> onnx.ModelProto:
    """x -> conv (OC channels of spread ranges) -> `reader` -> 1x1 conv -> y."""
    inits = {"W0": spread_weights(small=small), "B0": rng(1).normal(0, 0.2, OC).astype(np.float32),
             "W1": rng(2).normal(0, 0.3, (6, OC, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W0", "B0"], ["c"], name="conv0", kernel_shape=[3, 3], pads=[1] * 4)]
    last = "c"
    if reader.startswith("silu"):
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"], name="sig"), helper.make_node("Mul", ["c", "s"], ["a"])]
        last = "a"
    if reader.endswith("pool_prelu"):
        inits["slope"] = rng(3).uniform(0.05, 0.5, (OC, 1, 1)).astype(np.float32)
        nodes += [helper.make_node("MaxPool", [last], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
                  helper.make_node("PRelu", ["p", "slope"], ["q"], name="prelu")]
        last = "q"
    elif reader == "relu":
        nodes += [helper.make_node("Relu", ["c"], ["a"], name="relu")]
        last = "a"
    nodes.append(helper.make_node("Conv", [last, "W1"], ["y"], name="conv1", kernel_shape=[1, 1]))
    return infer_outputs(nodes, {"x": [1, 8, 8, 8]}, inits)


def _run_float(model_or_graph, x: np.ndarray) -> np.ndarray:
    sess = ort_session(model_or_graph)
    return sess.run(["y"], {"x": x})[0]


@pytest.mark.parametrize("reader", ["silu", "pool_prelu", "relu", "silu_pool_prelu"])
def test_sorting_keeps_the_float_function(reader):
    model = sorted_chain(reader)
    _, graph, _, changes = prepare(model, sort_channels=True)
    conv = next(n for n in graph.nodes if n.name == "conv0")
    assert graph.channel_groups == {"conv0": 16}
    assert any("conv0: 48 output channels sorted" in line for line in changes)
    ranges = np.abs(graph.const(conv.inputs[1])).reshape(OC, -1).max(axis=1)
    assert np.all(np.diff(ranges) <= 0)  # largest first
    x = rng(4).uniform(-1, 1, (1, 8, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(_run_float(build_float(graph), x), _run_float(model, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reader", ["silu", "pool_prelu", "relu"])
def test_sorted_groups_match_onnxruntime_and_are_finer_than_neighbours(reader):
    model = sorted_chain(reader)
    compiled, result = assert_matches_ort(model, weight_scales="sorted")
    assert result["verdict"]["exact_model"] == (reader != "silu")  # the SiLU table is within 1 LSB
    runs = compiled.quant.weights["conv0"].groups()
    assert [(a, b) for a, b, _ in runs] == [(0, 16), (16, 32), (32, 48)]
    # the 16 full-range channels fill the first group; the small ones' groups get finer scales
    assert runs[1][2] < runs[0][2] / 4 and runs[2][2] < runs[0][2] / 4
    grouped = o2g.compile(model, calib=random_dataset(model, 2, 0), weight_scales="groups")
    assert all(s > runs[0][2] / 4 for _, _, s in grouped.quant.weights["conv0"].groups())  # each mixes both
    assert len([s for s in compiled.plan.steps if s.node == "conv0" and s.kind == "conv"]) == 3


def test_the_worst_channel_gains_what_the_rule_promises():
    """The small channels' weights, rounded at their own group's scale, gain at least MIN_GAIN_DB over one scale."""
    model = sorted_chain("silu")

    def worst_channel_db(weight_scales):
        compiled = o2g.compile(model, calib=random_dataset(model, 2, 0), weight_scales=weight_scales)
        conv = next(n for n in compiled.graph.nodes if n.name == "conv0")
        w, wq = compiled.graph.const(conv.inputs[1]).reshape(OC, -1), compiled.quant.weights["conv0"]
        scales = wq.channel_scale if wq.channel_scale is not None else np.full(OC, wq.scale, np.float32)
        err = wq.q.reshape(OC, -1) * scales.reshape(-1, 1) - w
        return float(np.min(10 * np.log10(np.sum(w ** 2, axis=1) / np.sum(err ** 2, axis=1))))

    assert worst_channel_db("sorted") >= worst_channel_db("tensor") + MIN_GAIN_DB


@pytest.mark.parametrize("tail", ["concat", "add", "output"])
def test_order_is_kept_where_a_reader_needs_it(tail):
    """A Concat, an Add or a model output sees the channels as the model has them: no sorting there. (The
    Concat and the Add join a constant and a conv reads their result, so only their op type refuses them.)"""
    model = sorted_chain("relu")
    nodes = list(model.graph.node)
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    joined = OC
    if tail == "concat":
        consts["C"], joined = np.ones((1, 4, 8, 8), np.float32), OC + 4
        nodes.append(helper.make_node("Concat", ["a", "C"], ["z"], axis=1))
    elif tail == "add":
        consts["C"] = rng(5).normal(0, 1, (OC, 1, 1)).astype(np.float32)
        nodes.append(helper.make_node("Add", ["a", "C"], ["z"]))
    outputs = ("y", "a")
    if tail != "output":
        consts["W2"] = rng(6).normal(0, 0.3, (2, joined, 1, 1)).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["z", "W2"], ["v"], name="conv2", kernel_shape=[1, 1]))
        outputs = ("y", "v")
    model = infer_outputs(nodes, {"x": [1, 8, 8, 8]}, consts, outputs=outputs)
    _, graph, _, changes = prepare(model, sort_channels=True)
    assert graph.channel_groups == {} and not any(line.startswith("sort_channels") for line in changes)


def test_close_ranges_keep_one_scale():
    """Below MIN_GAIN_DB the extra calls buy little: one scale, one call."""
    model = sorted_chain("silu", small=0.5)
    compiled = o2g.compile(model, calib=random_dataset(model, 2, 0), weight_scales="sorted")
    assert compiled.graph.channel_groups == {}
    assert compiled.quant.weights["conv0"].channel_scale is None


def test_group_gain():
    assert group_gain_db(np.array([8.0] * 16 + [2.0] * 16 + [1.0] * 8), 16) == pytest.approx(20 * np.log10(8))
    assert group_gain_db(np.array([8.0, 1.0, 1.0, 1.0]), 2) == pytest.approx(20 * np.log10(8))
    assert group_gain_db(np.array([8.0, 1.0, 8.0, 1.0]), 2) == 0.0
    assert group_gain_db(np.zeros(4), 2) == 0.0


def test_channels_already_in_order_are_grouped_in_place():
    model = sorted_chain("relu")
    w0 = next(t for t in model.graph.initializer if t.name == "W0")
    w = numpy_helper.to_array(w0)
    w0.CopyFrom(numpy_helper.from_array(w[np.argsort(-np.abs(w).reshape(OC, -1).max(axis=1), kind="stable")], "W0"))
    _, graph, _, _ = prepare(model, sort_channels=True)
    conv = next(n for n in graph.nodes if n.name == "conv0")
    assert graph.channel_groups == {"conv0": 16} and conv.inputs[1] == "W0"  # grouped, nothing permuted
