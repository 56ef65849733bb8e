"""emit/annotated.py: model.annotated.onnx is the compiled model itself, each node carrying its plan."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini.ort_session import session as ort_session
from onnx2gemmini import quality
from onnx2gemmini.emit.annotated import KEY, annotated_model, graph_node_names
from onnx2gemmini.emit.report import build_report
from onnx2gemmini.graph import from_onnx
from tests.helpers import infer_outputs
from tests.reliability.test_determinism import _small_net

DATA = np.random.default_rng(2).standard_normal((4, 1, 3, 16, 16)).astype(np.float32)


def _annotated(compiled, measured=None):
    report = build_report(compiled, compiled.timing, measured)
    return annotated_model(compiled, report), report


def _props(node) -> dict[str, str]:
    return {p.key.removeprefix(KEY): p.value for p in node.metadata_props if p.key.startswith(KEY)}


def test_every_node_says_where_it_runs():
    compiled = o2g.compile(_small_net(), calib=DATA)
    model, report = _annotated(compiled, quality.from_calibration(compiled, compiled.calib_head))
    by_name = dict(zip(graph_node_names(model), model.graph.node))
    for i, row in enumerate(report["layers"]):
        if row["name"] not in by_name:
            continue  # the input quantization: a step of no ONNX node
        props = _props(by_name[row["name"]])
        assert row["target"] in props["target"] and f"#{i}" in props["steps"] and row["call"] in props["call"]
    conv = _props(by_name[next(n for n in by_name if by_name[n].op_type == "Conv")])
    assert conv["target"] == "gemmini" and conv["call"] == "tiled_conv" and conv["tiles"].startswith("{")
    assert int(conv["est_cycles"].replace(",", "")) > 0 and float(conv["sqnr_db"]) > 10
    relu = next(n for n in model.graph.node if n.op_type == "Relu")
    fused = _props(relu)
    assert fused["target"] == "fused" and by_name[fused["fused_into"]].op_type == "Conv"
    for node in model.graph.node:
        assert node.doc_string.startswith("target: ")
    summary = {p.key.removeprefix(KEY): p.value for p in model.metadata_props}
    assert summary["config"] == "default (DIM 16)" and summary["quality_source"] == "calibration"


def test_scales_are_the_compiled_ones():
    compiled = o2g.compile(_small_net(), calib=DATA)
    model, _ = _annotated(compiled)
    seen = {"output_scales": 0, "weight_scale": 0}
    for node, name in zip(model.graph.node, graph_node_names(model)):
        props = _props(node)
        if "output_scales" in props:
            want = [compiled.quant.scales[t] for t in node.output if t in compiled.quant.scales]
            assert [float(v) for v in props["output_scales"].split(", ")] == want
            seen["output_scales"] += 1
        if "weight_scale" in props:
            assert float(props["weight_scale"]) == compiled.quant.weights[name].scale
            seen["weight_scale"] += 1
    assert seen["output_scales"] >= 5 and seen["weight_scale"] == len(compiled.quant.weights) >= 3


def test_the_graph_is_unchanged_and_runs():
    compiled = o2g.compile(_small_net(), calib=DATA)
    model, _ = _annotated(compiled)
    onnx.checker.check_model(model)
    assert _bare(model) == _bare(compiled.loaded.model)
    x = DATA[0]
    a = ort_session(model).run(None, {"x": x})
    b = ort_session(compiled.loaded.model).run(None, {"x": x})
    np.testing.assert_array_equal(a[0], b[0])


def _bare(model: onnx.ModelProto) -> bytes:
    """The model without doc strings and metadata: graph, weights, opsets."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        node.doc_string = ""
        del node.metadata_props[:]
    del copy.metadata_props[:]
    copy.doc_string = ""
    return copy.SerializeToString()


def test_node_names_match_the_compiler_graph():
    """Unnamed and duplicate node names get the names graph.from_onnx gives them."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="r"),
             helper.make_node("Relu", ["b"], ["y"], name="r")]
    model = onnx.shape_inference.infer_shapes(infer_outputs(nodes, {"x": [1, 4]}))
    assert graph_node_names(model) == [n.name for n in from_onnx(model).nodes] == ["Relu_0", "r", "r_2"]


def test_a_diff_puts_mismatches_on_the_nodes():
    compiled = o2g.compile(_small_net(), calib=DATA)
    result = o2g.diff(compiled, data=DATA)
    model, _ = _annotated(compiled, quality.from_diff(result))
    names = graph_node_names(model)
    for layer in result["layers"]:
        props = _props(model.graph.node[names.index(layer["name"])])
        assert props["mismatches_vs_ort_qdq"] == f"{layer['mismatches_vs_ort_qdq']:,} of {layer['compared']:,}"
