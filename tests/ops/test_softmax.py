"""Softmax: a float kernel on the CPU, within 1 LSB of onnxruntime; with a constant attention mask fused in."""
import numpy as np
import onnx
import pytest
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini.data import Dataset
from onnx2gemmini.run.emulator import Emulator
from tests.helpers import assert_matches_ort, infer_outputs, rng


@pytest.mark.parametrize("shape,axis", [((2, 10), -1), ((2, 3, 5), 1), ((1, 4, 3, 3), 1)],
                         ids=["2d", "3d_axis1", "4d_channels"])
def test_softmax_within_one_lsb(shape, axis):
    model = infer_outputs([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], {"x": list(shape)})
    compiled, result = assert_matches_ort(model)
    step = next(s for s in compiled.plan.steps if getattr(s, "op", "") == "softmax")
    assert step.reason and result["layers"][0]["tolerance_lsb"] == 1


# --- a constant attention mask fused in (passes/fuse_mask.py) ---------------------------------------------

S = 6
CAUSAL = np.triu(np.ones((S, S), bool), 1)  # True: masked (a later position)


def masked_model(form: str, masked=CAUSAL, fill=-np.inf, heads=2):
    """scores = x @ W (so the softmax reads Gemmini's int8 output), masked by a constant, then Softmax."""
    inits = {"W": rng(3).normal(0, 0.6, (S, S)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["s"], name="scores")]
    if form == "add":
        inits["M"] = np.where(masked, np.float32(fill), np.float32(0)).reshape(1, 1, S, S)
        nodes.append(helper.make_node("Add", ["s", "M"], ["m"], name="mask"))
    else:  # where: Where(cond, fill, s), DeBERTa's masked_fill
        inits["c"], inits["f"] = masked.reshape(1, 1, S, S), np.float32(fill)
        nodes.append(helper.make_node("Where", ["c", "f", "s"], ["m"], name="mask"))
    nodes.append(helper.make_node("Softmax", ["m"], ["y"], axis=-1, name="softmax"))
    return infer_outputs(nodes, {"x": [1, heads, S, S]}, inits)


@pytest.mark.parametrize("form,fill", [("add", -np.inf), ("add", np.finfo(np.float32).min), ("add", -10000.0),
                                       ("where", -np.inf), ("where", np.finfo(np.float32).min)],
                         ids=["add_inf", "add_finfo_min", "add_minus_1e4", "where_inf", "where_finfo_min"])
def test_constant_masks_fuse_into_the_softmax(form, fill):
    compiled, result = assert_matches_ort(masked_model(form, fill=fill))
    step = next(s for s in compiled.plan.steps if getattr(s, "op", "") == "softmax_masked")
    keep = compiled.plan.constants[step.inputs[1]]
    assert keep.shape == (S, S) and (keep == ~CAUSAL).all()  # one copy, read again for every head
    layer = next(l for l in result["layers"] if l["name"] == "softmax")
    assert layer["tolerance_lsb"] == 1 and layer["max_lsb_vs_ort_qdq"] <= 1
    y = compiled.plan.tensors[step.outputs[0]]
    out = Emulator(compiled.plan).run({"x": rng(5).uniform(-1, 1, (1, 2, S, S)).astype(np.float32)})
    assert (out[y.id][..., CAUSAL] == 0).all() and (out[y.id][..., ~CAUSAL] > 0).any()


def test_a_mask_that_masks_nothing_is_removed():
    """DeBERTa exported without an attention mask: Where(all False, -inf, scores) is the scores."""
    compiled, _ = assert_matches_ort(masked_model("where", masked=np.zeros((S, S), bool)))
    ops = [s.params.op for s in compiled.plan.steps if hasattr(s, "params")]
    assert "softmax" in ops and "softmax_masked" not in ops


def test_a_row_with_nothing_to_attend_to_is_refused():
    masked = CAUSAL.copy()
    masked[2] = True
    with pytest.raises(o2g.O2GError, match="leaves a row with no position"):
        o2g.compile(masked_model("add", masked=masked))


def test_infinite_constants_elsewhere_are_still_refused():
    """Negative control of the load check: the same -inf constant added before a Relu is not a mask."""
    model = masked_model("add")
    model.graph.node[2].op_type = "Relu"
    model.graph.node[2].ClearField("attribute")
    with pytest.raises(o2g.O2GError, match="contains infinite values"):
        o2g.compile(model)


def test_an_infinite_mask_no_fusion_took_is_refused_before_quantization():
    """load.py lets -inf through on its way to a Softmax; the pre-flight refuses it where no mask fusion took it
    (here: the passes are not run), and passes it once fuse_mask has (negative control)."""
    from onnx2gemmini.config import load_config
    from onnx2gemmini.graph import from_onnx
    from onnx2gemmini.passes import fuse_mask
    from onnx2gemmini.planner import preflight
    graph = from_onnx(onnx.shape_inference.infer_shapes(masked_model("add")))
    with pytest.raises(o2g.O2GError, match="reads the infinite constant 'M', which no attention-mask fusion took"):
        preflight(graph)
    assert fuse_mask.run(graph, load_config(None))
    preflight(graph)


def test_scores_too_wide_for_an_exact_mask_are_refused():
    """255 * scale at or above 10000 - 104: exp(masked - max) would not be exactly 0 in the float model."""
    model = masked_model("add", fill=-10000.0)
    data = Dataset({"x": rng(2).uniform(-1, 1, (4, 1, 2, S, S)).astype(np.float32) * 2000}, None, "t")
    with pytest.raises(o2g.O2GError, match="too wide for its attention mask to mask exactly"):
        o2g.compile(model, calib=data)
    o2g.compile(model, calib=Dataset({"x": data.inputs["x"] / 2000}, None, "t"))  # the same model, usual scores
