"""Lookups at indices computed from token ids (passes/index_paths.py): RoBERTa's position ids become a
position_embedding step reading the ids; indices that do not depend on the ids fold to a constant."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import onnx2gemmini as o2g
from onnx2gemmini.compare import run_diff
from onnx2gemmini.data import Dataset
from onnx2gemmini.kernels import padding_positions
from tests.helpers import infer_outputs, rng

S, D, PAD, VOCAB = 8, 16, 1, 40


def roberta_embeddings(pad=PAD, positions=S + PAD + 1, shift=0):
    """Word, position (create_position_ids_from_input_ids, as exported) and token-type lookups (zeros gathered
    at the positions), summed, LayerNorm, a projection. `shift` != 0 breaks the position form (negative
    control): the ids it counts are then not the ones a padding id keeps."""
    r = rng(1)
    inits = {"word": r.normal(0, 0.5, (VOCAB, D)).astype(np.float32),
             "pos": r.normal(0, 0.5, (positions + abs(shift), D)).astype(np.float32),
             "types": r.normal(0, 0.5, (2, D)).astype(np.float32), "zeros": np.zeros((1, 64), np.int64),
             "pad": np.array(pad, np.int64), "one": np.array(1, np.int32), "shift": np.array(pad + shift, np.int64),
             "gamma": np.ones(D, np.float32), "beta": np.zeros(D, np.float32),
             "W": r.normal(0, 0.3, (D, 6)).astype(np.float32)}
    nodes = [("Gather", ["word", "ids"], ["w"], {}), ("Equal", ["ids", "pad"], ["is_pad"], {}),
             ("Not", ["is_pad"], ["kept"], {}), ("Cast", ["kept"], ["kept32"], {"to": TensorProto.INT32}),
             ("CumSum", ["kept32", "one"], ["running"], {}), ("Mul", ["running", "kept32"], ["counted"], {}),
             ("Cast", ["counted"], ["counted64"], {"to": TensorProto.INT64}),
             ("Add", ["counted64", "shift"], ["position_ids"], {}), ("Gather", ["pos", "position_ids"], ["p"], {}),
             ("GatherElements", ["zeros", "position_ids"], ["type_ids"], {"axis": 1}),
             ("Gather", ["types", "type_ids"], ["t"], {}), ("Add", ["w", "t"], ["wt"], {}),
             ("Add", ["wt", "p"], ["e"], {}),
             ("LayerNormalization", ["e", "gamma", "beta"], ["n"], {"axis": -1}), ("MatMul", ["n", "W"], ["y"], {})]
    return infer_outputs([helper.make_node(op, i, o, name=o[0], **a) for op, i, o, a in nodes], {"ids": [1, S]},
                         inits, input_types={"ids": TensorProto.INT64})


def padded_ids(samples, seed):
    """Token ids as a tokenizer gives them: pad ids after each sequence's end, none before."""
    r = rng(seed)
    ids = r.integers(2, VOCAB, (samples, 1, S))
    for i, length in enumerate(r.integers(2, S + 1, samples)):
        ids[i, 0, length:] = PAD
    return ids


def test_roberta_position_ids_read_the_token_ids():
    model = roberta_embeddings()
    compiled = o2g.compile(model, calib=Dataset({"ids": padded_ids(8, 0)}, None, "t"))
    ops = [s.params.op for s in compiled.plan.steps if hasattr(s, "params")]
    assert ops.count("embedding") == 1 and ops.count("position_embedding") == 1 and "gather" not in ops
    step = next(s for s in compiled.plan.steps if getattr(s, "op", "") == "position_embedding")
    assert step.params.pad == PAD and compiled.plan.tensors[step.inputs[0]].onnx_name == "ids"
    assert not [n for n in compiled.graph.nodes if n.op_type in ("CumSum", "Equal", "GatherElements")]
    assert not any("t" in n.outputs for n in compiled.graph.nodes)  # token types: folded to a constant
    data = Dataset({"ids": padded_ids(6, 1)}, None, "t")
    assert (data.inputs["ids"] == PAD).any()
    result = run_diff(compiled, data)
    assert result["verdict"]["passed"], result["verdict"]
    lookup = next(layer for layer in result["layers"] if layer["name"] == "p")
    assert lookup["mismatches_vs_ort_qdq"] == 0 and lookup["tolerance_lsb"] == 0
    fp32 = result["outputs"]["y"]["fp32_vs_original"]["sqnr_db"]
    assert fp32 is None or fp32 > 100  # the rewrite computes the model's function (padding included)


def test_padding_positions_match_the_definition():
    ids = np.array([[5, 7, 1, 9, 1, 1], [1, 4, 4, 1, 3, 1]])
    assert padding_positions(ids, 1).tolist() == [[2, 3, 1, 4, 1, 1], [1, 2, 3, 1, 4, 1]]


def test_other_index_arithmetic_is_left_alone():
    """Negative control: positions offset by 2 more than the pad id are not RoBERTa's form; nothing is
    fused, and the integer ops are named in the one error."""
    with pytest.raises(o2g.O2GError, match="reads the integer input 'ids'"):
        o2g.compile(roberta_embeddings(shift=2), calib=Dataset({"ids": padded_ids(4, 0)}, None, "t"))


def test_positions_beyond_the_table_are_not_fused():
    with pytest.raises(o2g.O2GError, match="reads the integer input 'ids'"):
        o2g.compile(roberta_embeddings(positions=S), calib=Dataset({"ids": padded_ids(4, 0)}, None, "t"))
