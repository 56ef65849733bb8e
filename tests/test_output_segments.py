"""Model outputs that join ranges (quantize.segmented_concats): a Concat that is a model output keeps each
input's own int8 scale, so class scores (0..1) next to box coordinates (0..300) are not rounded to zero by
the boxes' step. The int8 bytes match onnxruntime's QDQ golden (per-axis Q/DQ) exactly, the C program and
the MLIR module compute the same bytes, `diff` reports the error of each part, and report.json and model.h
carry one scale per index along the axis."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini.quant import quantize
from onnx2gemmini.compare import run_diff
from onnx2gemmini.data import Dataset
from onnx2gemmini.emit.c import write_c
from onnx2gemmini.run import hostc
from onnx2gemmini.run.emulator import Emulator
from onnx2gemmini.run.selftest import selftest_case
from tests.helpers import infer_outputs, random_dataset, rng

BOX_RANGE = 300.0


def detector(box_range: float = BOX_RANGE, class_token: bool = False, read_again: bool = False):
    """x -> conv -> ReLU -> {box conv -> ReLU (0..box_range), class conv -> sigmoid (0..1)} -> flatten ->
    Concat on axis 1, as a YOLOv8 export joins boxes and scores. `class_token`: a constant third operand.
    `read_again`: the concat also feeds a ReLU (a second output), so its scale must stay one."""
    r = rng(3)
    inits = {"W1": r.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32),
             "Wb": r.normal(0, box_range / 2, (4, 8, 1, 1)).astype(np.float32),
             "Wc": r.normal(0, 0.5, (3, 8, 1, 1)).astype(np.float32),
             "sb": np.array([1, 4, 64], np.int64), "sc": np.array([1, 3, 64], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "W1"], ["h"], pads=[1, 1, 1, 1], strides=[2, 2], name="stem"),
             helper.make_node("Relu", ["h"], ["hr"], name="stem_relu"),
             helper.make_node("Conv", ["hr", "Wb"], ["b"], name="box"),
             helper.make_node("Relu", ["b"], ["br"], name="box_relu"),
             helper.make_node("Reshape", ["br", "sb"], ["boxes"], name="box_flat"),
             helper.make_node("Conv", ["hr", "Wc"], ["c"], name="cls"),
             helper.make_node("Sigmoid", ["c"], ["cs"], name="cls_sigmoid"),
             helper.make_node("Reshape", ["cs", "sc"], ["scores"], name="cls_flat")]
    parts = ["boxes", "scores"]
    if class_token:
        inits["token"] = np.linspace(-20, 20, 2 * 64, dtype=np.float32).reshape(1, 2, 64)
        parts.append("token")
    nodes.append(helper.make_node("Concat", parts, ["y"], axis=1, name="join"))
    outputs = ("y",)
    if read_again:
        nodes.append(helper.make_node("Relu", ["y"], ["y2"], name="after"))
        outputs = ("y", "y2")
    return infer_outputs(nodes, {"x": [1, 3, 16, 16]}, inits, outputs=outputs)


def compiled_and_diff(model, samples=4):
    compiled = o2g.compile(model, calib=random_dataset(model, 16, 0, 0.0, 1.0))
    return compiled, run_diff(compiled, random_dataset(model, samples, 1, 0.0, 1.0))


def segment(result: dict, output: str, part: str) -> dict:
    return next(s for s in result["outputs"][output]["segments"] if s["input"] == part)


def test_scores_keep_their_scale_and_match_the_golden_exactly():
    model = detector()
    compiled, result = compiled_and_diff(model)
    assert result["verdict"]["passed"], result["verdict"]["failures"]
    assert result["outputs"]["y"]["int8_vs_ort_qdq"]["mismatches"] == 0
    axis, per_index = compiled.quant.axis_scales["y"]
    assert axis == 1 and len(per_index) == 7
    boxes, scores = segment(result, "y", "boxes"), segment(result, "y", "scores")
    assert (boxes["start"], boxes["stop"], scores["start"], scores["stop"]) == (0, 4, 4, 7)
    assert per_index[:4] == (boxes["scale"],) * 4 and per_index[4:] == (scores["scale"],) * 3
    assert 0.5 / 127 < scores["scale"] <= 1 / 127 and boxes["scale"] > 50 * scores["scale"]
    assert scores["sqnr_db"] > 30, scores
    assert not [w for w in compiled.warnings if "joins ranges" in w]
    # The one model output tensor in the plan carries the same scales; the emulator dequantizes with them.
    out = compiled.plan.tensors[compiled.plan.outputs[0]]
    assert out.scale_axis == 1 and out.axis_scales == per_index and out.scale == max(per_index)
    sample = random_dataset(model, 1, 7, 0.0, 1.0).sample(0)
    q = compiled.run_int8(sample)["y"]
    np.testing.assert_array_equal(compiled.run(sample)["y"],
                                  q.astype(np.float32) * np.asarray(per_index, np.float32).reshape(1, -1, 1))


def test_one_scale_for_both_rounds_the_scores_away():
    """The negative control: without per-segment scales the same model's scores drop to (near) 0 dB."""
    model = detector()
    with mock.patch.object(quantize, "segmented_concats", lambda *args: []):
        compiled, result = compiled_and_diff(model)
    assert not compiled.quant.axis_scales and result["verdict"]["passed"]
    scores = segment(result, "y", "scores")
    assert scores["scale"] > 1.0 and scores["sqnr_db"] < 3, scores


def test_constant_operand_gets_its_own_scale():
    model = detector(class_token=True)
    compiled, result = compiled_and_diff(model, samples=2)
    assert result["verdict"]["passed"] and result["outputs"]["y"]["int8_vs_ort_qdq"]["mismatches"] == 0
    token = segment(result, "y", "token")
    assert (token["start"], token["stop"]) == (7, 9)
    assert token["scale"] == pytest.approx(20 / 127, rel=1e-6)
    assert token["sqnr_db"] > 40  # a constant is only rounded, at its own scale


def test_a_concat_read_by_another_node_keeps_one_scale():
    """A second reader would misread per-index scales: only a concat that nothing else reads is split."""
    model = detector(read_again=True)
    compiled, result = compiled_and_diff(model, samples=2)
    assert compiled.quant.axis_scales == {} and result["verdict"]["passed"]
    assert segment(result, "y", "scores")["scale"] == segment(result, "y", "boxes")["scale"]
    # ... and the compile says so: the scores keep about one of 127 levels
    [warning] = [w for w in compiled.warnings if w.startswith("Concat 'join' joins ranges")]
    levels = float(warning.split("keeps about ")[1].split(" ")[0])
    assert 0.2 < levels < 2


def test_equal_scales_stay_one_scale():
    """A concat whose parts come out at one scale (here one tensor twice) keeps the plain per-tensor output."""
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Concat", ["c", "c"], ["y"], axis=1, name="join")]
    model = infer_outputs(nodes, {"x": [1, 3, 8, 8]}, {"W": rng(8).normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)})
    compiled, result = compiled_and_diff(model, samples=1)
    out = compiled.plan.tensors[compiled.plan.outputs[0]]
    assert compiled.quant.axis_scales == {} and out.scale_axis is None and out.axis_scales == ()
    assert result["verdict"]["passed"] and len(result["outputs"]["y"]["segments"]) == 2


def convs_in_place():
    """Two convs whose outputs Gemmini writes in place into the concatenated NCHW model output (transposed to
    ONNX order at the end): the concat step is gone, and the scales must survive the transpose."""
    r = rng(6)
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1], name="wide"),
             helper.make_node("Conv", ["x", "W2"], ["c2"], name="narrow"),
             helper.make_node("Concat", ["c1", "c2"], ["y"], axis=1, name="join")]
    inits = {"W1": r.normal(0, 3.0, (4, 3, 3, 3)).astype(np.float32),
             "W2": r.normal(0, 0.05, (5, 3, 1, 1)).astype(np.float32)}
    return infer_outputs(nodes, {"x": [1, 3, 6, 6]}, inits)


@pytest.mark.parametrize("make", [lambda: detector(class_token=True), convs_in_place], ids=["copied", "in_place"])
def test_c_program_computes_the_emulator_bytes_and_exports_the_scales(tmp_path, make):
    if shutil.which("make") is None or shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("needs make and a C compiler")
    model = make()
    compiled = o2g.compile(model, calib=random_dataset(model, 8, 0, 0.0, 1.0))
    if make is convs_in_place:
        assert not [s for s in compiled.plan.steps if getattr(s, "op", "") == "concat"]
    c_dir = write_c(compiled.plan, tmp_path / "c", *selftest_case(compiled.plan, None), "test_segments")
    header = (c_dir / "model.h").read_text()
    source = (c_dir / "model.c").read_text()
    assert re.search(r"extern const int \w+_output_scale_axis\[", header)
    count = len(compiled.quant.axis_scales["y"][1])
    table = re.search(rf"_output0_axis_scales\[{count}\] = \{{(.*?)\}};", source, re.S).group(1)
    values = [float.fromhex(v.strip().rstrip("f")) for v in table.split(",") if v.strip()]
    np.testing.assert_array_equal(np.float32(values), np.float32(compiled.quant.axis_scales["y"][1]))
    assert re.search(r"_output_scale_axis\[\w+\] = \{\s*1,\s*\}", source)
    hostc.build(c_dir, ("model",))
    data = random_dataset(model, 3, 5, 0.0, 1.0)
    for i in range(data.num_samples):
        sample = data.sample(i)
        got, want = hostc.run(c_dir, compiled.plan, sample), Emulator(compiled.plan).run(sample)
        for tid in compiled.plan.outputs:
            np.testing.assert_array_equal(got[tid], want[tid].reshape(got[tid].shape))


def test_cli_reports_each_part(tmp_path):
    model = detector()
    path = tmp_path / "det.onnx"
    path.write_bytes(model.SerializeToString())
    data = tmp_path / "data.npz"
    np.savez(data, x=random_dataset(model, 8, 0, 0.0, 1.0).inputs["x"])
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "onnx2gemmini.cli", str(path), "--calib", str(data), "-o", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    report = json.loads((out / "report.json").read_text())
    [entry] = report["model"]["outputs"]
    assert entry["axis_scales"]["axis"] == 1 and len(entry["axis_scales"]["scales"]) == 7
    assert entry["scale"] == max(entry["axis_scales"]["scales"])
    diff = subprocess.run([sys.executable, "-m", "onnx2gemmini.cli", "diff", str(path), "--calib", str(data),
                           "--data", str(data)], capture_output=True, text=True)
    assert diff.returncode == 0, diff.stderr
    lines = [line for line in diff.stdout.splitlines() if "on axis 1 from" in line]
    assert len(lines) == 2 and "[4:7]" in lines[1] and "scores" in lines[1]


def test_yolov8_export_head_keeps_its_scores():
    """A YOLOv8-style detector exported as ultralytics does (scripts/zoo.py): decoded boxes in pixels joined
    with the class scores. With one scale the scores are all rounded to zero (0 dB); kept apart, they are not."""
    if os.environ.get("CI") != "true" and importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch (test extra)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import zoo
    arch = next(a for a in zoo.detectors() if a.name == "yolov8_decoded")
    with tempfile.TemporaryDirectory() as tmp:
        path = zoo.export(arch, Path(tmp) / "model.onnx")
        calib, data = (Dataset({"x": zoo.calibration(arch, n, seed)}, None, "synthetic") for n, seed in ((4, 0), (2, 1)))
        compiled = o2g.compile(path, calib=calib)
        result = run_diff(compiled, data)
        with mock.patch.object(quantize, "segmented_concats", lambda *args: []):
            shared = run_diff(o2g.compile(path, calib=calib), data)
    assert result["verdict"]["passed"], result["verdict"]["failures"][:3]
    [(name, out)] = result["outputs"].items()
    boxes, scores = out["segments"]
    assert (boxes["stop"], scores["stop"]) == (4, 8) and boxes["scale"] > 100 * scores["scale"]
    assert scores["sqnr_db"] > 30 and shared["outputs"][name]["segments"][1]["sqnr_db"] < 3
