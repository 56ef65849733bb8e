"""The command line end to end: exit codes, one `error:` line, no traceback, no half-written output."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from tests.helpers import infer_outputs, make_model

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "digits_cnn.onnx"
CALIB = ROOT / "models" / "digits_calib.npz"
EVAL = ROOT / "models" / "digits_eval.npz"


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "onnx2gemmini.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd)


def assert_one_error_line(proc, code, *fragments):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for f in fragments:
        assert f in errors[0], errors[0]


def test_compile_bundled_model(tmp_path):
    out = tmp_path / "out"
    proc = run(MODEL, "--calib", CALIB, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    for key in ("model", "config", "quantization", "layers", "totals", "timing", "memory"):
        assert key in report
    assert report["memory"]["arena_bytes"] <= 1.1 * report["memory"]["lower_bound_bytes"]
    for key in ("path", "sha256", "inputs", "outputs"):
        assert key in report["model"]
    for layer in report["layers"]:
        for key in ("name", "op", "target", "call", "macs", "geometry", "tiles", "baseline_tiles", "dram_bytes",
                    "baseline_dram_bytes", "est_cycles", "utilization", "reason"):
            assert key in layer
        assert layer["target"] in ("gemmini", "cpu")
        assert layer["target"] == "gemmini" or layer["reason"]
    for key in ("macs", "macs_on_gemmini", "ideal_cycles", "est_cycles", "utilization", "dram_bytes",
                "baseline_dram_bytes", "activation_bytes", "weight_bytes"):
        assert key in report["totals"]
    assert (out / "model.qdq.onnx").exists() and (out / "report.md").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left


def test_compile_subcommand_and_json(tmp_path):
    proc = run("compile", MODEL, "--calib", CALIB, "-o", tmp_path / "o", "--json", "--emit", "qdq")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["output"].endswith("o") and "report.json" in doc["artifacts"]


def test_default_output_dir_is_model_stem(tmp_path):
    proc = run(MODEL, "--calib", CALIB, "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "digits_cnn_gemmini" / "report.json").exists()
    assert proc.stdout == ""


def test_non_empty_output_refused_then_forced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    proc = run(MODEL, "--calib", CALIB, "-o", out)
    assert_one_error_line(proc, 2, str(out), "--force")
    assert (out / "keep.txt").exists()
    proc = run(MODEL, "--calib", CALIB, "-o", out, "--force")
    assert proc.returncode == 0 and not (out / "keep.txt").exists()


def test_without_calibration_warns(tmp_path):
    proc = run(MODEL, "-o", tmp_path / "o")
    assert proc.returncode == 0
    assert "warning:" in proc.stderr and "calib" in proc.stderr


@pytest.mark.parametrize("content,fragment", [(None, "no such file"), (b"", "empty file"),
                                              (b"\x08\x07garbage\xff\xff", "not an ONNX model")],
                         ids=["missing", "empty", "malformed"])
def test_bad_model_files(tmp_path, content, fragment):
    path = tmp_path / "bad.onnx"
    if content is not None:
        path.write_bytes(content)
    proc = run(path, "-o", tmp_path / "out")
    assert_one_error_line(proc, 3, fragment, str(path))
    assert not (tmp_path / "out").exists()


def test_all_unsupported_ops_listed_at_once(tmp_path):
    nodes = [helper.make_node("Round", ["x"], ["a"], name="round1"),
             helper.make_node("Hardmax", ["a"], ["b"], name="hardmax1"),
             helper.make_node("Round", ["b"], ["y"], name="round2")]
    path = tmp_path / "m.onnx"
    path.write_bytes(infer_outputs(nodes, {"x": [1, 3, 4, 4]}).SerializeToString())
    proc = run(path, "-o", tmp_path / "out")
    assert_one_error_line(proc, 3, "Hardmax x1", "Round x2", "hardmax1", "round1", "round2")
    assert not (tmp_path / "out").exists()


def test_dynamic_dim_needs_input_shape(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": [1, "C", 4]}, {"y": [1, "C", 4]})
    path = tmp_path / "dyn.onnx"
    path.write_bytes(model.SerializeToString())
    assert_one_error_line(run(path, "-o", tmp_path / "o"), 3, "'x'", "--input-shape")
    proc = run(path, "-o", tmp_path / "o2", "--input-shape", "x=1x5x4")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("args,fragment", [
    (["--input-shape", "x=1xbad"], "--input-shape"),
    (["--input-shape", "nosuch=1x1x8x8"], "no input 'nosuch'"),
    (["--config", "nosuch"], "unknown preset"),
    (["--emit", "c,pdf"], "--emit"),
    (["--calib-method", "magic"], "calib-method"),
    (["--num-calib", "0"], "num-calib"),
], ids=["bad_shape", "unknown_input", "unknown_config", "unknown_emit", "bad_method", "bad_num"])
def test_usage_errors_exit_2(tmp_path, args, fragment):
    proc = run(MODEL, "-o", tmp_path / "o", *args)
    assert_one_error_line(proc, 2, fragment)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("data,fragment", [
    ({"wrong": np.zeros((2, 1, 8, 8), np.float32)}, "no array for model input"),
    ({"input": np.zeros((2, 3, 8, 8), np.float32)}, "shape"),
    ({"input": np.full((2, 1, 8, 8), np.nan, np.float32)}, "NaN"),
    ({"input": np.zeros((2, 1, 8, 8), np.float32), "labels": np.zeros(3, np.int64)}, "labels"),
], ids=["wrong_key", "wrong_shape", "nan", "label_count"])
def test_bad_data_exit_3(tmp_path, data, fragment):
    path = tmp_path / "d.npz"
    np.savez(path, **data)
    assert_one_error_line(run(MODEL, "--calib", path, "-o", tmp_path / "o"), 3, fragment, str(path))
    assert not (tmp_path / "o").exists()


def test_unwritable_output_parent(tmp_path):
    proc = run(MODEL, "--calib", CALIB, "-o", tmp_path / "missing" / "deeper")
    assert_one_error_line(proc, 2, "does not exist")


def test_debug_shows_traceback(tmp_path):
    proc = run(tmp_path / "nope.onnx", "--debug")
    assert proc.returncode == 3 and "Traceback" in proc.stderr and "error:" in proc.stderr


def test_diff_bundled_model_json(tmp_path):
    proc = run("diff", MODEL, "--calib", CALIB, "--data", EVAL, "--json", "--num-samples", "50")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["samples"] == 50
    out = doc["outputs"]["logits"]
    assert set(out["fp32_vs_int8"]) >= {"max_abs", "cosine", "sqnr_db", "top1_agreement"}
    assert set(out["int8_vs_ort_qdq"]) >= {"compared", "mismatches", "max_lsb"}
    assert out["int8_vs_ort_qdq"]["mismatches"] == 0
    assert set(doc["accuracy"]) == {"fp32", "int8"}
    for layer in doc["layers"]:
        assert set(layer) >= {"name", "sqnr_db", "cosine", "max_lsb_vs_ort_qdq"}


def test_diff_human_output_has_verdict():
    proc = run("diff", MODEL, "--calib", CALIB, "--num-samples", "20")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "PASSED"


def test_inspect_writes_nothing(tmp_path):
    proc = run("inspect", MODEL, "--calib", CALIB, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "tiled_conv" in proc.stdout and "estimates" in proc.stdout and list(tmp_path.iterdir()) == []


def test_inspect_several_configs_side_by_side():
    proc = run("inspect", MODEL, "--calib", CALIB, "--config", "default,chip,large-chip", "--json")
    assert proc.returncode == 0, proc.stderr
    configs = json.loads(proc.stdout)["configs"]
    assert [c["config"] for c in configs] == ["default", "chip", "large-chip"]
    assert configs[2]["report"]["config"]["dim"] == 32
    for c in configs:
        t = c["report"]["totals"]
        assert t["dram_bytes"] <= t["baseline_dram_bytes"] and 0 < t["utilization"] <= 1


def test_tiling_auto_keeps_gemmini_heuristic(tmp_path):
    proc = run(MODEL, "--calib", CALIB, "-o", tmp_path / "o", "--tiling", "auto")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    calls = {r["call"] for r in report["layers"] if r["target"] == "gemmini"}
    assert calls == {"tiled_conv_auto", "tiled_matmul_auto"}


def test_ops_lists_registry():
    proc = run("ops")
    assert proc.returncode == 0
    for op in ("Conv", "Gemm", "MatMul", "MaxPool", "GlobalAveragePool", "Softmax", "Add"):
        assert op in proc.stdout
    doc = json.loads(run("ops", "--json").stdout)
    assert all(row["gemmini"] for row in doc["ops"])
