"""diff's accuracy verdict: int8 judged against the user's original model with a floor per output kind, and
against onnxruntime's own quantization of it (a reference our quantization code does not share). The planted
bugs below are shared by the emulator and the golden, so the exactness check passes them: only the
accuracy half can catch them."""
import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx2gemmini as o2g
from onnx2gemmini import compiler, fidelity
from onnx2gemmini.errors import UsageError
from onnx2gemmini.quant import quantize
from tests.test_cli import CALIB, EVAL, MODEL, assert_one_error_line, run

SAMPLES = 64


def _diff(**kwargs):
    return o2g.diff(MODEL, calib=CALIB, num_calib=32, data=EVAL, num_samples=SAMPLES, **kwargs)


def _weights_times(factor):
    """Every layer's int8 weights times `factor`, rounded: in the QuantTable, so the plan and the golden
    both have it."""
    real = quantize.quantize_weights

    def planted(*args, **kwargs):
        wq = real(*args, **kwargs)
        return dataclasses.replace(wq, q=np.clip(np.round(wq.q * factor), -127, 127).astype(np.int8))
    return planted


def _one_channel_scale_times(factor):
    """The first layer's first output channel's weight scale times `factor`, its int8 weights and int32 bias
    unchanged (so that channel's output is `factor` times too), in every table the compile builds."""
    real = compiler.build_table

    def planted(*args, **kwargs):
        table = real(*args, **kwargs)
        name, wq = next(iter(table.weights.items()))
        cs = wq.channel_scale if wq.channel_scale is not None else np.full(wq.q.shape[wq.axis], wq.scale, np.float32)
        cs = cs.copy()
        cs[0] *= np.float32(factor)
        table.weights[name] = dataclasses.replace(wq, channel_scale=cs, scale=float(cs.max()))
        return table
    return planted


def test_the_bundled_model_keeps_its_meaning():
    result = _diff(reference=True)
    f = result["fidelity"]["logits"]
    assert f["kind"] == "classification" and f["floor"] == {"top1": 0.95}
    assert f["against"] == "the original model"
    assert f["vs_original"]["top1_agreement"] >= 0.98 and f["passed"]
    ref = f["reference"]
    assert ref["made"] and ref["overridden_scales"] >= 3 and ref["sqnr_db"] > 25 and ref["ours_sqnr_db"] > 30
    weights = result["weights"]
    assert weights["checked"] == 5 and not weights["failures"] and not weights["unchecked"]
    assert all(0.45 < layer["worst_steps"] <= 0.5 + 1e-6 for layer in weights["layers"])  # nearest rounding
    assert result["verdict"]["accurate"] and result["verdict"]["passed"]


@pytest.mark.parametrize("where, plant", [("quantize_weights", _weights_times(0.8)),
                                          ("build_table", _one_channel_scale_times(1.25))],
                         ids=["int8 weights x0.8", "one channel's weight scale x1.25"])
def test_a_bug_shared_by_the_emulator_and_the_golden_fails_diff(monkeypatch, where, plant):
    monkeypatch.setattr(quantize if where == "quantize_weights" else compiler, where, plant)
    result = _diff(reference=True)
    out = result["outputs"]["logits"]
    assert out["int8_vs_ort_qdq"]["mismatches"] == 0 and not result["verdict"]["failures"]  # the golden is blind
    ref = result["fidelity"]["logits"]["reference"]
    assert ref["ours_sqnr_db"] < ref["sqnr_db"]  # onnxruntime's own quantization shows the loss (37.5 dB without)
    assert result["weights"]["failures"]
    assert not result["verdict"]["accurate"] and not result["verdict"]["passed"]
    assert any("a quantization bug the golden shares" in f for f in result["verdict"]["accuracy_failures"])


@pytest.mark.parametrize("where, plant", [("quantize_weights", _weights_times(0.8)),
                                          ("build_table", _one_channel_scale_times(1.25))],
                         ids=["int8 weights x0.8", "one channel's weight scale x1.25"])
def test_negative_control_without_the_weight_check_the_shared_bug_passes(monkeypatch, where, plant):
    """What catches the planted bugs is the weight check: without it, nothing does (the classifier's decisions
    survive them, within the top-1 floor's sampling noise)."""
    from onnx2gemmini import compare
    monkeypatch.setattr(quantize if where == "quantize_weights" else compiler, where, plant)
    monkeypatch.setattr(compare, "check_weights", lambda compiled: {"checked": 0, "layers": [], "failures": [],
                                                                    "unchecked": []})
    result = _diff()
    assert result["verdict"]["passed"]


def test_adarounded_weights_are_allowed_one_step():
    result = o2g.diff(MODEL, calib=CALIB, num_calib=32, data=EVAL, num_samples=4, adaround=True)
    layers = result["weights"]["layers"]
    rounded = [layer for layer in layers if layer["bound_steps"] == pytest.approx(1.001)]
    assert rounded and any(layer["worst_steps"] > 0.5 for layer in rounded) and result["verdict"]["passed"]
    assert all(layer["worst_steps"] <= 0.501 for layer in layers if layer not in rounded)


def test_a_floor_above_the_result_fails_accuracy_not_exactness():
    result = _diff(min_sqnr=60)
    v = result["verdict"]
    assert not v["failures"] and not v["accurate"] and not v["passed"]
    assert any("below the floor 60 dB" in f for f in v["accuracy_failures"])
    assert v["losing_layers"] and v["losing_layers"][0]["name"]
    assert any(r.startswith("--keep-float ") for r in v["remedies"])
    assert _diff(min_top1={"logits": None}, min_sqnr=None)["fidelity"]["logits"]["floor"] == {}


def test_the_cli_prints_accuracy_failed_and_exits_1():
    proc = run("diff", MODEL, "--calib", CALIB, "--data", EVAL, "--num-samples", "16", "--min-sqnr", "logits=60")
    assert proc.returncode == 1
    assert "ACCURACY FAILED: output logits: SQNR" in proc.stdout
    assert "remedies: --keep-float" in proc.stdout and "\nPASSED" not in proc.stdout
    assert proc.stderr.strip().splitlines()[-1].startswith("error: diff: accuracy: ")


@pytest.mark.parametrize("args, fragment", [
    (["--min-cosine", "1.5"], "--min-cosine: expected [OUTPUT=]VALUE with VALUE a number in [0, 1]"),
    (["--min-sqnr", "nope=10"], "--min-sqnr: the model has no output named 'nope'"),
    (["--min-top1", "x"], "--min-top1: expected"),
])
def test_bad_floors_are_usage_errors(args, fragment):
    proc = run("diff", MODEL, "--calib", CALIB, "--num-samples", "2", *args)
    assert_one_error_line(proc, 2, fragment)


def test_floors_per_output_override_every_output():
    floors = fidelity.parse_floors(sqnr=["20", "b=none"], cosine={"a": 0.5}, names=["a", "b"])
    assert floors.for_output("a", "map") == {"sqnr": 20.0, "cosine": 0.5}
    assert floors.for_output("b", "map") == {}
    assert floors.for_output("b", "classification") == {"top1": 0.95}
    with pytest.raises(UsageError):
        fidelity.parse_floors(top1=-0.1, names=["a"])


def test_top1_fails_only_beyond_sampling_noise():
    one_flip = fidelity.judge_output("y", "classification", "", {"top1": 0.95}, *_flips(16, 1))
    assert one_flip["vs_original"]["top1_agreement"] == 15 / 16 and one_flip["passed"]
    many = fidelity.judge_output("y", "classification", "", {"top1": 0.95}, *_flips(500, 40))
    assert not many["passed"] and "top-1 agreement 92.00%" in many["failures"][0]
    assert fidelity.wilson_upper(15, 16) > 0.95 > fidelity.wilson_upper(460, 500)


def _flips(n, flips):
    rng = np.random.default_rng(0)
    ref = [rng.normal(size=(1, 10)).astype(np.float32) for _ in range(n)]
    ours = [r.copy() for r in ref]
    for o in ours[:flips]:
        o[0, o.argmin()] = o.max() + 1
    return ref, ours


def test_embedding_cosine_is_judged_per_sample():
    rng = np.random.default_rng(1)
    ref = [rng.normal(size=(1, 8, 32)) for _ in range(8)]
    good = [r + 0.02 * rng.normal(size=r.shape) for r in ref]
    bad = good[:7] + [rng.normal(size=(1, 8, 32))]  # one sample destroyed
    assert fidelity.judge_output("e", "embedding", "", {"cosine": 0.99}, ref, good)["passed"]
    judged = fidelity.judge_output("e", "embedding", "", {"cosine": 0.99}, ref, bad)
    assert not judged["passed"] and judged["vs_original"]["cosine_worst"] < 0.5


def _model(op, out_shape, name="y"):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, out_shape[-1]])
    y = helper.make_tensor_value_info(name, TensorProto.FLOAT, list(out_shape))
    node = helper.make_node(op, ["x"], [name], axis=-1) if op == "Softmax" else helper.make_node(op, ["x"], [name])
    return helper.make_model(helper.make_graph([node], "g", [x], [y]))


@pytest.mark.parametrize("op, shape, name, kind", [
    ("Softmax", (1, 10), "prob", "classification"),
    ("Relu", (1, 10), "y", "map"),
    ("Relu", (1, 3, 8, 8), "y", "map"),
    ("Relu", (1, 384), "sentence_embedding", "embedding"),
    ("Relu", (1, 32, 384), "last_hidden_state", "embedding"),
    ("ReduceMean", (1, 384), "461", "embedding"),
])
def test_output_kinds(op, shape, name, kind):
    model = _model(op, shape, name)
    assert fidelity.output_kind(model, None, name, shape, False)[0] == kind
    assert fidelity.output_kind(model, None, name, shape, True)[0] == "joined"


def test_a_reference_that_cannot_be_made_says_why(monkeypatch):
    from onnx2gemmini import reference

    def refuse(*args, **kwargs):
        raise ValueError("range [-inf, inf] is not finite")
    monkeypatch.setattr(reference, "_quantize", refuse)
    result = _diff(reference=True)
    ref = result["fidelity"]["logits"]["reference"]
    assert ref["made"] is False and "range [-inf, inf] is not finite" in ref["why"]
    assert result["verdict"]["passed"]  # the reference is a figure, not a bound


def test_the_reference_takes_only_scales_of_tensors_the_rewrite_kept():
    """Equalization rescales channels between the first convs: those tensors keep their names but not their
    values, so their scales would mislead onnxruntime; only unchanged tensors get ours."""
    compiled = o2g.compile(MODEL, calib=CALIB, num_calib=8)
    from onnx2gemmini.reference import _overrides
    model = onnx.ModelProto.FromString(compiled.loaded.original)
    head = compiled.calib_head
    overrides = _overrides(compiled, model, [head.sample(i) for i in range(2)])
    assert "input" in overrides and "logits" in overrides
    assert "/features/features.2/Relu_output_0" in compiled.quant.scales
    assert "/features/features.2/Relu_output_0" not in overrides  # equalized


def test_losing_layers_see_through_views_and_rank_by_the_drop():
    """A layer's input SQNR is its producer's, found through a reshape that has no row of its own; the
    layer that adds the most noise comes first, not the one with the lowest SQNR."""
    from onnx2gemmini.graph import from_onnx
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("Reshape", ["a", "shape"], ["b"], name="view"),
             helper.make_node("Relu", ["b"], ["c"], name="second"),
             helper.make_node("Relu", ["c"], ["d"], name="third")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("d", TensorProto.FLOAT, [4])],
                              [helper.make_tensor("shape", TensorProto.INT64, [1], [4])])
    g = from_onnx(onnx.shape_inference.infer_shapes(helper.make_model(graph)))
    rows = [{"name": "first", "op": "Relu", "sqnr_db": 40.0}, {"name": "second", "op": "Relu", "sqnr_db": 20.0},
            {"name": "third", "op": "Relu", "sqnr_db": 18.0}]
    ranked = fidelity.losing_layers(rows, g)
    assert [r["name"] for r in ranked] == ["second", "first", "third"]
    assert ranked[0]["input_sqnr_db"] == 40.0 and ranked[0]["drop_db"] == 20.0
    assert ranked[1]["drop_db"] is None and ranked[2]["drop_db"] == 2.0


def test_an_original_that_cannot_run_is_said_and_fp32_stands_in(monkeypatch):
    """The comparison with the original is never skipped silently: why is in the output's document, and the
    accuracy half judges against the rewritten graph's fp32 instead."""
    from onnx2gemmini import compare
    monkeypatch.setattr(compare._Original, "run", lambda self, sample: {})
    result = o2g.diff(MODEL, calib=CALIB, num_calib=16, data=EVAL, num_samples=8)
    out, f = result["outputs"]["logits"], result["fidelity"]["logits"]
    assert "int8_vs_original" not in out and "could not run the original" in out["original_not_compared"]
    assert f["against"].startswith("the rewritten graph's fp32") and f["passed"]
    proc = run("diff", MODEL, "--calib", CALIB, "--data", EVAL, "--num-samples", "4")
    assert "not compared with the original model" not in proc.stdout  # said only when it happens


def test_a_sigmoid_probability_is_judged_by_its_decisions():
    """A detector's speech probability: its yes/no at 0.5 must agree with the original's, within sampling noise:
    a probability flipped on one step in ten fails, one moved by 0.015 that stays on its side passes."""
    from onnx2gemmini.graph import from_onnx
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])
    y = helper.make_tensor_value_info("p", TensorProto.FLOAT, [1])
    axes = onnx.numpy_helper.from_array(np.array([0], np.int64), "axes")
    model = helper.make_model(helper.make_graph([helper.make_node("Sigmoid", ["x"], ["s"]),
                                                 helper.make_node("Squeeze", ["s", "axes"], ["p"])], "g", [x], [y],
                                                [axes]))
    model = onnx.shape_inference.infer_shapes(model)
    kind, why = fidelity.output_kind(model, from_onnx(model), "p", (1,), False)
    assert kind == "decision", why
    ref = [np.array([v]) for v in np.linspace(0.02, 0.98, 400)]
    near = [r + np.where(r > 0.5, 0.015, -0.015) for r in ref]  # stays on its side
    crossing = [1 - r if k % 10 == 0 else r for k, r in enumerate(ref)]  # one step in ten flips
    assert fidelity.judge_output("p", kind, why, fidelity.DEFAULT_FLOORS["decision"], ref, near)["passed"]
    judged = fidelity.judge_output("p", kind, why, fidelity.DEFAULT_FLOORS["decision"], ref, crossing)
    assert not judged["passed"] and "decisions" in judged["failures"][0]
