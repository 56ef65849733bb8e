"""Gather with constant indices (an exact int8 copy on the CPU) and embedding lookups by integer model inputs."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import onnx2gemmini as o2g
from onnx2gemmini.compare import run_diff
from onnx2gemmini.fidelity import NO_FLOORS
from onnx2gemmini.data import Dataset, random_data
from tests.helpers import assert_matches_ort, infer_outputs, random_dataset, rng

CASES = {
    "rows": ((5, 6), 0, np.array([4, 0, 2], np.int64)),
    "negative_indices": ((2, 5, 3), 1, np.array([-1, 0, -5], np.int64)),
    "matrix_of_indices": ((2, 7), 1, np.array([[6, 1], [0, 3]], np.int64)),
    "scalar_index": ((3, 4, 5), 2, np.array(2, np.int64)),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_gather_is_exact(case):
    shape, axis, indices = CASES[case]
    model = infer_outputs([helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)], {"x": list(shape)},
                          {"i": indices})
    compiled, _ = assert_matches_ort(model)
    steps = [s for s in compiled.plan.steps if getattr(s, "op", "") == "gather"]
    assert len(steps) == 1


def test_non_constant_indices_are_refused():
    model = infer_outputs([helper.make_node("Cast", ["k"], ["i"], to=7),
                           helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], {"x": [4, 2], "k": [3]})
    with pytest.raises(o2g.O2GError, match="non-constant indices"):
        o2g.compile(model)


# --- embedding lookups: a constant table indexed by an integer model input (token ids) ------------------

def lookup_model(table_shape, ids_shape, axis=0, ids_type=TensorProto.INT64, seed=0):
    """Gather(table, ids) with `ids` an integer model input, then a MatMul so the lookup feeds Gemmini."""
    table = rng(seed).normal(0, 0.5, table_shape).astype(np.float32)
    out_rank = len(table_shape) + len(ids_shape) - 1
    width = table_shape[-1] if axis != len(table_shape) - 1 else ids_shape[-1]
    w = rng(seed + 1).normal(0, 0.3, (width, 5)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], axis=axis, name="lookup"),
             helper.make_node("MatMul", ["e", "w"], ["y"], name="proj")]
    model = infer_outputs(nodes, {"ids": list(ids_shape)}, {"table": table, "w": w},
                          input_types={"ids": ids_type})
    assert len(model.graph.output[0].type.tensor_type.shape.dim) == out_rank
    return model


LOOKUPS = {
    "token_ids_int64": ((30, 16), (1, 7), 0, TensorProto.INT64),
    "token_ids_int32": ((12, 8), (2, 3), 0, TensorProto.INT32),
    "table_axis_1": ((3, 11, 6), (4,), 1, TensorProto.INT64),
}


@pytest.mark.parametrize("case", list(LOOKUPS), ids=list(LOOKUPS))
def test_embedding_lookup_is_exact(case):
    table_shape, ids_shape, axis, ids_type = LOOKUPS[case]
    compiled, _ = assert_matches_ort(lookup_model(table_shape, ids_shape, axis, ids_type))
    steps = [s for s in compiled.plan.steps if getattr(s, "op", "") == "embedding"]
    assert len(steps) == 1
    ids = compiled.plan.tensors[steps[0].inputs[0]]
    assert ids.kind == "input" and ids.dtype == ("int32" if ids_type == TensorProto.INT32 else "int64")
    assert "ids" not in compiled.quant.scales  # token ids are never quantized


def test_negative_ids_count_from_the_end_as_in_onnx():
    model = lookup_model((9, 4), (1, 6))
    ids = np.array([[[-1, -9, 0, 8, -4, 3]]] * 2, np.int64)
    compiled = o2g.compile(model, calib=random_dataset(model, 4, 0))
    data = Dataset({"ids": ids}, None, "test")
    result = run_diff(compiled, data, floors=NO_FLOORS)
    lookup = next(layer for layer in result["layers"] if layer["name"] == "lookup")
    assert lookup["mismatches_vs_ort_qdq"] == 0 and lookup["tolerance_lsb"] == 0, lookup
    assert result["verdict"]["passed"], result["verdict"]


def test_ids_outside_the_table_are_refused(tmp_path):
    model = lookup_model((9, 4), (1, 6))
    path = tmp_path / "ids.npz"
    np.savez(path, ids=np.array([[[0, 1, 2, 9, 0, 0]]], np.int64))
    with pytest.raises(o2g.O2GError, match=r"id 9, outside the table it indexes \(9 rows: ids -9 to 8\)"):
        o2g.compile(model, calib=str(path))
    np.savez(path, ids=np.zeros((1, 1, 6), np.float32))
    with pytest.raises(o2g.O2GError, match="holds floats"):
        o2g.compile(model, calib=str(path))


def test_random_calibration_draws_ids_inside_the_table():
    model = lookup_model((5, 4), (1, 40))
    compiled = o2g.compile(model)  # no --calib: seeded random ids
    assert any("no calibration data" in w for w in compiled.warnings)
    data = random_data(compiled.graph.inputs, 8)
    assert data.inputs["ids"].dtype == np.int64 and 0 <= data.inputs["ids"].min() and data.inputs["ids"].max() == 4


def test_integer_inputs_read_by_other_ops_are_refused():
    """Only lookups read token ids: a mask built from them (Cast, arithmetic) is named in the one error."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="lookup"),
             helper.make_node("Cast", ["ids"], ["m"], to=TensorProto.FLOAT, name="mask"),
             helper.make_node("Unsqueeze", ["m", "axes"], ["m2"], name="unsq"),
             helper.make_node("Mul", ["e", "m2"], ["y"], name="masked")]
    model = infer_outputs(nodes, {"ids": [1, 4]}, {"table": np.ones((6, 3), np.float32),
                                                    "axes": np.array([2], np.int64)},
                          input_types={"ids": TensorProto.INT64})
    with pytest.raises(o2g.O2GError, match=r"Cast.*reads the integer input 'ids'"):
        o2g.compile(model)


def test_a_computed_table_indexed_by_ids_is_refused():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Gather", ["r", "ids"], ["y"], name="lookup")]
    model = infer_outputs(nodes, {"x": [6, 3], "ids": [2]}, input_types={"ids": TensorProto.INT64})
    with pytest.raises(o2g.O2GError, match="only constant tables"):
        o2g.compile(model)


def test_a_4d_embedding_lookup_is_refused():
    """A rank-4 output would read as an NHWC activation downstream; refused rather than mislaid (the same table
    read by 2-D ids compiles: negative control)."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["y"], name="lookup")]
    table = {"table": rng(0).normal(0, 1, (10, 4)).astype(np.float32)}
    model = infer_outputs(nodes, {"ids": [1, 2, 3]}, table, input_types={"ids": TensorProto.INT64})
    with pytest.raises(o2g.O2GError, match="a 4-D embedding lookup"):
        o2g.compile(model)
    o2g.compile(infer_outputs(nodes, {"ids": [2, 3]}, table, input_types={"ids": TensorProto.INT64}))
