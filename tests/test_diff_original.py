"""diff checks the int8 code against the user's original model too, not only against the rewritten graph both
goldens are built from: a rewrite pass that changes the float function must fail diff."""
import numpy as np

import onnx2gemmini as o2g
from onnx2gemmini import compiler
from onnx2gemmini.compare import REWRITE_MIN_SQNR_DB
from onnx2gemmini.passes import run_passes
from tests.test_cli import CALIB, EVAL, MODEL


def planted_rewrite_bug(graph, config, optional=(), calibrated=None):
    """The passes, then the first conv's weights times 1.5: a wrong rewrite both goldens would inherit."""
    graph, changes = run_passes(graph, config, optional, calibrated)
    conv = next(n for n in graph.nodes if n.op_type == "Conv")
    graph.initializers[conv.inputs[1]] = graph.initializers[conv.inputs[1]] * np.float32(1.5)
    return graph, changes


def test_int8_is_compared_with_the_original_model():
    result = o2g.diff(MODEL, calib=CALIB, num_calib=16, data=EVAL, num_samples=8)
    out = result["outputs"]["logits"]
    assert out["fp32_vs_original"]["sqnr_db"] > REWRITE_MIN_SQNR_DB + 40  # float rounding only
    assert out["fp32_vs_original"]["min_sqnr_db"] == REWRITE_MIN_SQNR_DB
    assert 30 < out["int8_vs_original"]["sqnr_db"] < out["fp32_vs_original"]["sqnr_db"]
    assert result["verdict"]["passed"]


def test_a_planted_rewrite_bug_fails_diff(monkeypatch):
    """Negative control: against the rewritten graph alone the planted bug passes; against the original it
    cannot."""
    monkeypatch.setattr(compiler, "run_passes", planted_rewrite_bug)
    result = o2g.diff(MODEL, calib=CALIB, num_calib=16, data=EVAL, num_samples=8)
    out = result["outputs"]["logits"]
    assert out["fp32_vs_int8"]["sqnr_db"] > 30 and out["int8_vs_ort_qdq"]["mismatches"] == 0  # blind goldens
    assert out["fp32_vs_original"]["sqnr_db"] < 20 and out["int8_vs_original"]["sqnr_db"] < 20
    assert not result["verdict"]["passed"]
    assert any("a rewrite changed what the model computes" in f for f in result["verdict"]["failures"])


def test_a_quantized_original_is_reported_not_bounded(tmp_path):
    """A QDQ model has its own int8 noise against its float form: no bound on that, and the int8 code
    reproduces the user's quantized model exactly."""
    compiled = o2g.compile(MODEL, calib=CALIB, num_calib=16)
    qdq = compiled.write(tmp_path / "out", emit=("qdq",)) / "model.qdq.onnx"
    result = o2g.diff(qdq, data=EVAL, num_samples=4)
    out = result["outputs"]["logits"]
    assert out["fp32_vs_original"]["min_sqnr_db"] is None and out["fp32_vs_original"]["sqnr_db"] < 60
    assert out["int8_vs_original"]["max_abs"] == 0.0
    assert result["verdict"]["passed"]
