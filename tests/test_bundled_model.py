"""The bundled digits CNN: bit-exact against onnxruntime's QDQ run over the whole evaluation split."""
from pathlib import Path

import numpy as np
import pytest

import onnx2gemmini as o2g

ROOT = Path(__file__).resolve().parents[1] / "models"


@pytest.fixture(scope="module")
def report():
    return o2g.diff(ROOT / "digits_cnn.onnx", data=ROOT / "digits_eval.npz", calib=ROOT / "digits_calib.npz")


def test_zero_mismatches_over_the_evaluation_split(report):
    assert report["samples"] == len(np.load(ROOT / "digits_eval.npz")["labels"])
    q = report["outputs"]["logits"]["int8_vs_ort_qdq"]
    assert q["compared"] == report["samples"] * 10 and q["mismatches"] == 0 and q["max_lsb"] == 0
    assert all(layer["mismatches_vs_ort_qdq"] == 0 for layer in report["layers"])
    assert report["verdict"]["passed"] and report["verdict"]["exact_model"]


def test_int8_accuracy_within_one_point_of_fp32(report):
    acc = report["accuracy"]
    assert acc["fp32"] >= 0.97
    assert acc["int8"] >= acc["fp32"] - 0.01


def test_every_op_lands_on_gemmini():
    compiled = o2g.compile(ROOT / "digits_cnn.onnx", calib=ROOT / "digits_calib.npz")
    kinds = [s.kind for s in compiled.plan.steps]
    assert kinds.count("conv") == 3 and kinds.count("matmul") == 2
    convs = [s for s in compiled.plan.steps if s.kind == "conv"]
    assert [c.pool_size for c in convs] == [0, 2, 2] and all(c.act == 1 for c in convs)


def test_python_api_run_write(tmp_path):
    compiled = o2g.compile(str(ROOT / "digits_cnn.onnx"), calib=str(ROOT / "digits_calib.npz"), config="default")
    x = np.load(ROOT / "digits_eval.npz")["input"][:1]
    y = compiled.run({"input": x})["logits"]
    assert y.shape == (1, 10) and y.dtype == np.float32
    out = compiled.write(tmp_path / "out")
    assert (out / "report.json").exists()
