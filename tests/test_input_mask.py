"""Attention masks built from an integer model input (passes/input_mask.py): the bias subgraph is probed with
onnxruntime and fused into each Softmax only where it is a padding or causal mask on every probe."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import onnx2gemmini as o2g
from onnx2gemmini.compare import run_diff
from onnx2gemmini.data import Dataset
from tests.helpers import assert_matches_ort, infer_outputs, rng

S, H, D = 6, 2, 8
NEG = float(np.finfo(np.float32).min)


def attention(mask_nodes, mask_inits, bias="bias", nan_guard=False, batch=1, select=None, zero_padded=False):
    """Token ids -> embedding -> one attention head pair whose scores get `bias` (built from `mask` by
    `mask_nodes`) before the Softmax, then the context: a BERT-style block. `select`: (condition, fill) of a
    Where that replaces masked scores instead (DeBERTa); `zero_padded`: the embeddings times the mask."""
    r = rng(0)
    inits = {"emb": r.normal(0, 0.5, (20, D)).astype(np.float32), "Wq": r.normal(0, 0.4, (D, H * D)).astype(np.float32),
             "Wk": r.normal(0, 0.4, (D, H * D)).astype(np.float32), "qs": np.array([batch, S, H, D], np.int64),
             **mask_inits}
    nodes = [("Gather", ["emb", "ids"], ["e0" if zero_padded else "e"], {})]
    if zero_padded:
        inits["axis2"] = np.array([2], np.int64)
        nodes += [("Unsqueeze", ["mask", "axis2"], ["mask3"], {}),
                  ("Cast", ["mask3"], ["mask3f"], {"to": TensorProto.FLOAT}), ("Mul", ["e0", "mask3f"], ["e"], {})]
    nodes += [("MatMul", ["e", "Wq"], ["q2"], {}),
             ("MatMul", ["e", "Wk"], ["k2"], {}), ("Reshape", ["q2", "qs"], ["q3"], {}),
             ("Reshape", ["k2", "qs"], ["k3"], {}), ("Transpose", ["q3"], ["q"], {"perm": [0, 2, 1, 3]}),
             ("Transpose", ["k3"], ["k"], {"perm": [0, 2, 3, 1]}), ("MatMul", ["q", "k"], ["s"], {}),
             *mask_nodes, ("Where", [select[0], select[1], "s"], ["sm"], {}) if select else ("Add", ["s", bias], ["sm"], {}),
             ("Softmax", ["sm"], ["p"], {"axis": -1})]
    if nan_guard:  # transformers 5: a row of -inf gives NaN, zeroed afterwards
        inits["zero"] = np.float32(0)
        nodes += [("IsNaN", ["p"], ["isnan"], {}), ("Where", ["isnan", "zero", "p"], ["pz"], {})]
    nodes.append(("MatMul", ["pz" if nan_guard else "p", "q"], ["y"], {}))
    return infer_outputs([helper.make_node(op, i, o, name=o[0], **a) for op, i, o, a in nodes],
                         {"ids": [batch, S], "mask": [batch, S]}, inits,
                         input_types={"ids": TensorProto.INT64, "mask": TensorProto.INT64})


def bert_style(batch=1):
    """(1 - mask) * finfo.min, as BERT's get_extended_attention_mask writes it."""
    nodes = [("Cast", ["mask"], ["mf"], {"to": TensorProto.FLOAT}), ("Unsqueeze", ["mf", "axes"], ["m4"], {}),
             ("Sub", ["one", "m4"], ["inv"], {}), ("Mul", ["inv", "neg"], ["bias"], {})]
    return attention(nodes, {"axes": np.array([1, 2], np.int64), "one": np.float32(1), "neg": np.float32(NEG)},
                     batch=batch)


def transformers5_style(causal=False):
    """Cast to bool, And with a constant (causal: the lower triangle), Where(keep, 0, -inf), NaN guard."""
    tri = np.tril(np.ones((S, S), bool)) if causal else np.ones((S, S), bool)
    nodes = [("Cast", ["mask"], ["mb"], {"to": TensorProto.BOOL}), ("Unsqueeze", ["mb", "axes"], ["m4"], {}),
             ("And", ["tri", "m4"], ["keep"], {}), ("Where", ["keep", "zero_b", "ninf"], ["bias"], {})]
    return attention(nodes, {"axes": np.array([1, 2], np.int64), "tri": tri.reshape(1, 1, S, S),
                             "zero_b": np.float32(0), "ninf": np.float32(-np.inf)}, nan_guard=True)


def t5_style():
    """T5: Where(keep, position bias, finfo.min): a constant bias wherever a position is kept."""
    nodes = [("Cast", ["mask"], ["mb"], {"to": TensorProto.BOOL}), ("Unsqueeze", ["mb", "axes"], ["keep"], {}),
             ("Where", ["keep", "position_bias", "neg"], ["bias"], {})]
    return attention(nodes, {"axes": np.array([1, 2], np.int64), "neg": np.float32(NEG),
                             "position_bias": rng(9).normal(0, 1, (1, H, S, S)).astype(np.float32)})


def deberta_style():
    """DeBERTa: the embeddings times the mask, and Where(Not(mask_q * mask_k), finfo.min, scores): a padded
    query attends to nothing (its row comes out uniform, as the float model's does)."""
    nodes = [("Unsqueeze", ["mask", "axes_k"], ["mk"], {}), ("Unsqueeze", ["mask", "axes_q"], ["mq"], {}),
             ("Mul", ["mk", "mq"], ["mqk"], {}), ("Cast", ["mqk"], ["kept"], {"to": TensorProto.BOOL}),
             ("Not", ["kept"], ["masked"], {})]
    return attention(nodes, {"axes_k": np.array([1, 2], np.int64), "axes_q": np.array([1, 3], np.int64),
                             "neg": np.float32(NEG)}, select=("masked", "neg"), zero_padded=True)


@pytest.mark.parametrize("build,form", [(bert_style, "padding"), (transformers5_style, "padding"),
                                        (lambda: transformers5_style(causal=True), "causal"),
                                        (lambda: bert_style(batch=2), "padding"), (t5_style, "padding"),
                                        (deberta_style, "query_key")],
                         ids=["bert_finfo_min", "transformers5_where", "causal", "batch_2", "t5_position_bias",
                              "deberta_query_key"])
def test_masks_from_an_input_fuse_into_the_softmax(build, form):
    compiled, result = assert_matches_ort(build())
    step = next(s for s in compiled.plan.steps if getattr(s, "op", "") == "softmax_input_mask")
    assert step.params.form == form
    assert compiled.plan.tensors[step.inputs[1]].onnx_name == "mask"
    assert not [n for n in compiled.graph.nodes if n.op_type in ("Cast", "Where", "IsNaN", "And", "Sub", "Not")]
    assert [n.op_type == "MaskRows" for n in compiled.graph.nodes].count(True) == (build is deberta_style)
    biases = [n for n in compiled.graph.nodes if n.op_type == "Add"]  # T5's position bias stays, as a constant
    assert len(biases) == (build is t5_style) and all(compiled.graph.const(n.inputs[1]) is not None for n in biases)
    mask_info = next(vi for vi in compiled.graph.inputs if vi.name == "mask")
    assert mask_info.attention_mask == form
    layer = next(l for l in result["layers"] if l["name"] == "p")
    assert layer["max_lsb_vs_ort_qdq"] <= 1
    # the fused graph computes what the original model does, padding included (the probes are not the data)
    for out in result["outputs"].values():
        assert out["fp32_vs_original"]["sqnr_db"] is None or out["fp32_vs_original"]["sqnr_db"] > 100


def test_padded_positions_get_no_attention():
    compiled = o2g.compile(bert_style(), calib=Dataset(
        {"ids": np.arange(24).reshape(4, 1, S) % 20, "mask": np.tile([[[1, 1, 1, 1, 0, 0]]], (4, 1, 1))}, None, "t"))
    data = Dataset({"ids": np.arange(12).reshape(2, 1, S) % 20, "mask": np.array([[[1, 1, 0, 0, 0, 0]],
                                                                                 [[1, 1, 1, 1, 1, 1]]])}, None, "t")
    result = run_diff(compiled, data)
    assert result["verdict"]["passed"]
    from onnx2gemmini.run.emulator import Emulator
    step = next(s for s in compiled.plan.steps if getattr(s, "op", "") == "softmax_input_mask")
    buffers = Emulator(compiled.plan).run(data.sample(0), keep=True)
    p = buffers[step.outputs[0]].reshape(1, H, S, S)
    assert (p[..., 2:] == 0).all() and (p[..., :2] > 0).all()


def test_a_mask_that_is_not_a_padding_or_causal_mask_is_not_fused():
    """Negative control of the probe: keys reversed (position k reads mask[S-1-k]) is a valid bias of the
    input, but no form the kernel computes: nothing is fused and the mask's ops are named in the error."""
    nodes = [("Cast", ["mask"], ["mf"], {"to": TensorProto.FLOAT}),
             ("Slice", ["mf", "starts", "ends", "axes1", "steps"], ["rev"], {}),
             ("Unsqueeze", ["rev", "axes"], ["m4"], {}), ("Sub", ["one", "m4"], ["inv"], {}),
             ("Mul", ["inv", "neg"], ["bias"], {})]
    model = attention(nodes, {"axes": np.array([1, 2], np.int64), "one": np.float32(1), "neg": np.float32(NEG),
                              "starts": np.array([-1], np.int64), "ends": np.array([-S - 1], np.int64),
                              "axes1": np.array([1], np.int64), "steps": np.array([-1], np.int64)})
    with pytest.raises(o2g.O2GError, match="reads the integer input 'mask'"):
        o2g.compile(model)


def test_data_whose_mask_leaves_a_query_nothing_is_refused(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, ids=np.zeros((2, 1, S), np.int64), mask=np.array([[[1] * S], [[0] * S]], np.int64))
    with pytest.raises(o2g.O2GError, match="attention mask 'mask' of sample 1 masks every position"):
        o2g.compile(bert_style(), calib=str(path))
    np.savez(path, ids=np.zeros((1, 1, S), np.int64), mask=np.array([[[0] + [1] * (S - 1)]], np.int64))
    with pytest.raises(o2g.O2GError, match="masks its first position"):
        o2g.compile(transformers5_style(causal=True), calib=str(path))
    np.savez(path, ids=np.zeros((1, 1, S), np.int64), mask=np.array([[[1, 1, 2, 0, 0, 0]]], np.int64))
    with pytest.raises(o2g.O2GError, match="holds 2; a mask holds 0 \\(masked\\) and 1 \\(attend\\)"):
        o2g.compile(deberta_style(), calib=str(path))  # query_key: padded rows are fine, other values are not


def test_a_padded_query_attends_uniformly_as_in_the_float_model():
    """query_key: the row of a padded query keeps nothing; the float model's Where makes it uniform, and the
    int8 kernel too (not 0, not NaN). The embeddings of padded positions are zeroed exactly."""
    compiled = o2g.compile(deberta_style())
    sample = {"ids": np.arange(S).reshape(1, S) % 20, "mask": np.array([[1, 1, 1, 0, 0, 0]])}
    from onnx2gemmini.run.emulator import Emulator
    buffers = Emulator(compiled.plan).run(sample, keep=True)
    step = next(s for s in compiled.plan.steps if getattr(s, "op", "") == "softmax_input_mask")
    p = buffers[step.outputs[0]].reshape(1, H, S, S)
    assert (p[:, :, 3:, :] == p[:, :, 3:, :1]).all() and (p[:, :, 3:, 0] > 0).all()  # uniform padded rows
    assert (p[:, :, :3, 3:] == 0).all() and (p[:, :, :3, :3] > 0).any()
    rows = next(s for s in compiled.plan.steps if getattr(s, "op", "") == "mask_rows")
    e = buffers[rows.outputs[0]].reshape(1, S, D)
    assert (e[0, 3:] == 0).all() and (e[0, :3] != 0).any()
