"""`--input-value NAME=V`: an input frozen before simplification, so the branches on it fold away; the
original model is fed the same value by diff; every bad declaration is one usage error."""
import dataclasses
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx2gemmini as o2g
from onnx2gemmini import input_values
from onnx2gemmini.errors import UnsupportedError, UsageError
from onnx2gemmini.fidelity import NO_FLOORS
from tests.stream_models import chunks, streaming_model
from tests.test_cli import assert_one_error_line, run


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("frozen") / "stream.onnx"
    onnx.save(streaming_model("GRU"), str(path))
    return path


def test_frozen_rate_removes_the_if():
    model = streaming_model("GRU")
    with pytest.raises(UnsupportedError, match="If"):
        o2g.compile(model, calib={"x": chunks(8), "sr": np.full((8,), 16000, np.int64),
                                  "state": np.zeros((8, 1, 1, 16), np.float32)})
    compiled = o2g.compile(model, calib={"x": chunks(16), "state": np.zeros((16, 1, 1, 16), np.float32)},
                           input_values={"sr": 16000})
    assert "If" not in {n.op_type for n in compiled.graph.nodes}
    assert "sr" not in {i.name for i in compiled.graph.inputs}
    assert compiled.loaded.input_values["sr"].dtype == np.int64


@pytest.mark.parametrize("rate", [16000, 8000])
def test_diff_feeds_the_original_the_frozen_value(rate):
    """The If's two branches scale the chunk differently: diff feeds the original model the rate the compile
    froze, so the rewritten graph's fp32 matches it. Negative control: the same compile with the other rate
    recorded as frozen (what diff would do if it fed the original a value of its own) fails the 60 dB check."""
    data = {"x": chunks(12, 1), "state": np.zeros((12, 1, 1, 16), np.float32)}
    compiled = o2g.compile(streaming_model("GRU"), calib=data, input_values=[f"sr={rate}"])
    result = o2g.diff(compiled, data=data, min_sqnr="none", min_top1="none")
    assert result["verdict"]["passed"], result["verdict"]
    for name in ("prob", "stateN"):
        assert result["outputs"][name]["fp32_vs_original"]["sqnr_db"] > 100
    wrong = {"sr": np.array(24000 - rate, np.int64)}
    mislabelled = dataclasses.replace(compiled, loaded=dataclasses.replace(compiled.loaded, input_values=wrong))
    result = o2g.diff(mislabelled, data=data, min_sqnr="none", min_top1="none")
    assert not result["verdict"]["passed"]
    assert result["outputs"]["stateN"]["fp32_vs_original"]["sqnr_db"] < 60


def test_report_records_the_frozen_value(model_file, tmp_path):
    out = tmp_path / "out"
    proc = run(model_file, "--input-value", "sr=16000", "-o", out, "--emit", "c")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["model"]["input_values"] == {"sr": 16000}
    assert [i["name"] for i in report["model"]["inputs"]] == ["x", "state"]


@pytest.mark.parametrize("spec, fragments", [
    ("rate=16000", ["no input 'rate'", "inputs: sr, state, x"]),
    ("sr=16k", ["'16k' is not an integer (int64)"]),
    ("sr=1.5", ["'1.5' is not an integer"]),
    ("sr=16000,8000", ["2 values given", "a scalar"]),
    ("sr", ["expected NAME=V"]),
    ("sr=99999999999999999999", ["outside int64's range"]),
])
def test_bad_values_are_one_usage_error(model_file, tmp_path, spec, fragments):
    proc = run(model_file, "--input-value", spec, "-o", tmp_path / "out")
    assert_one_error_line(proc, 2, "--input-value", *fragments)
    assert not (tmp_path / "out").exists()


def test_an_input_the_graph_does_not_read_is_refused():
    model = streaming_model("GRU", with_rate=False)
    model.graph.input.append(helper.make_tensor_value_info("unused", TensorProto.FLOAT, [1]))
    with pytest.raises(UsageError, match="does not read this input"):
        o2g.compile(model, input_values={"unused": 1.0})


def test_values_take_the_declared_type_and_shape():
    info = helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, "n"])
    assert input_values._typed("v", ["1", "2.5", "-3"], info).tolist() == [[1.0, 2.5, -3.0]]
    flag = helper.make_tensor_value_info("b", TensorProto.BOOL, [])
    assert input_values._typed("b", ["true"], flag).item() is True
    with pytest.raises(UsageError, match="not a boolean"):
        input_values._typed("b", ["2"], flag)
    with pytest.raises(UsageError, match="not a finite"):
        input_values._typed("v", ["nan"], info)
    assert input_values.parse(["a=1,2", "b=3"]) == {"a": ["1", "2"], "b": ["3"]}
    with pytest.raises(UsageError, match="given twice"):
        input_values.parse(["a=1", "a=2"])


def test_a_value_of_the_wrong_type_names_the_keyword():
    with pytest.raises(UsageError, match=r"^input_values: expected NAME=V strings"):
        o2g.compile(streaming_model("GRU"), input_values=5)
    with pytest.raises(UsageError, match=r"^states: expected OUTPUT=INPUT strings"):
        o2g.compile(streaming_model("GRU"), input_values={"sr": 16000}, states=5)
