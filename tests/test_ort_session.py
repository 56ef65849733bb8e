"""onnxruntime as an exact golden on every CPU: one module makes every session, with the setting that keeps
its int8 kernels exact; a probe that meets the real failure (int16 pair saturation on x86 without VNNI);
and the same checks on an emulated CPU without VNNI (qemu-user), where the failure really happens.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import onnx2gemmini as o2g
from onnx2gemmini import cli, compare, ort_session
from onnx2gemmini.compare import run_diff
from onnx2gemmini.data import load_data
from tests.test_negative_controls import corrupt_weight

ROOT = Path(__file__).resolve().parents[1]
MODEL, CALIB, EVAL = (ROOT / "models" / n for n in ("digits_cnn.onnx", "digits_calib.npz", "digits_eval.npz"))
QDQ_INT8 = ("session.qdqisint8allowed", "1")  # spelled out here, not read from the module under test


def test_probe_is_exact_on_this_cpu():
    """An ordinary test, on every CPU: the golden's own sessions compute the saturating cases exactly."""
    found = ort_session.probe()
    assert found.exact, found
    assert set(found.compared) == {"Conv", "MatMul", "Gemm", "MatMulInteger"} and min(found.compared.values()) > 0


def test_probe_cases_overflow_int16_pairs():
    """The probe meets the failure only if u8 x s8 pair sums pass 32,767: inputs at the rails (after
    onnxruntime's +128 shift of int8 QDQ inputs, or as uint8 0/255) against weights of magnitude 127."""
    for op, case in ort_session.probe_cases().items():
        w = next(numpy_helper.to_array(t) for t in case.model.graph.initializer if t.name in ("wq", "w"))
        (x,) = case.feeds.values()
        rails = {0, 255} if x.dtype == np.uint8 else {-128.0, 127.0}
        assert set(np.unique(x)) == rails and set(np.unique(np.abs(w))) == {127}, op
        if case.scale is not None:
            assert 0 < np.count_nonzero(np.abs(case.expected) < 127), op  # most results inside int8


# ------------------------------------------------------------------------------ every session, one maker

SOURCE_DIRS = ("onnx2gemmini", "scripts", "tests")


def session_constructors(path: Path) -> list[str]:
    """`file:line` of every direct onnxruntime InferenceSession/SessionOptions construction in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("InferenceSession", "SessionOptions"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_session_is_made_outside_ort_session():
    owner = ROOT / "onnx2gemmini" / "ort_session.py"
    stray = [hit for d in SOURCE_DIRS for path in sorted((ROOT / d).rglob("*.py")) if path != owner
             for hit in session_constructors(path)]
    assert not stray, f"onnxruntime sessions made outside onnx2gemmini/ort_session.py: {stray}"


def test_the_scan_finds_a_stray_session(tmp_path):
    """Negative control of the scan above."""
    stray = ROOT / "tests" / "_stray_session_probe.py"
    try:
        stray.write_text("import onnxruntime as ort\nopts = ort.SessionOptions()\n"
                         "s = ort.InferenceSession(b'', opts)\n")
        assert session_constructors(stray) == [f"tests/{stray.name}:2", f"tests/{stray.name}:3"]
    finally:
        stray.unlink()


@contextlib.contextmanager
def recorded_sessions(monkeypatch):
    """Every InferenceSession made while the block runs, whoever makes it."""
    made = []

    class Recording(ort.InferenceSession):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(ort, "InferenceSession", Recording)
    yield made


def inexact(sessions) -> int:
    """How many of the sessions lack the setting."""
    return sum(not ort_session.has_entries(s.get_session_options(), dict([QDQ_INT8])) for s in sessions)


def _golden_users(out: Path):
    """diff with per-layer sub-models and sensitivity, and the diff of a pre-quantized (QDQ) model."""
    compiled = o2g.compile(MODEL, calib=CALIB, num_calib=16)
    result = o2g.diff(compiled, data=EVAL, num_samples=4, sensitivity=True, workers=1)
    qdq = compiled.write(out, emit=("qdq",)) / "model.qdq.onnx"
    o2g.diff(qdq, data=EVAL, num_samples=2, workers=1)
    return result


def test_every_golden_session_is_exact(monkeypatch, tmp_path):
    with recorded_sessions(monkeypatch) as made:
        result = _golden_users(tmp_path / "out")
    assert len(made) > 10 and inexact(made) == 0
    assert result["golden"]["exact"] and result["golden"]["unverified_layers"] == []


def test_a_session_without_the_setting_is_caught(monkeypatch, tmp_path):
    """Negative control: with the setting dropped in the one place that sets it, the check above fails."""
    monkeypatch.setattr(ort_session, "EXACT_ENTRIES", {})
    with recorded_sessions(monkeypatch) as made:
        _golden_users(tmp_path / "out")
    assert inexact(made) == len(made) > 10


# ----------------------------------------------------------------- a CPU whose golden cannot be made exact

def test_layers_of_an_inexact_family_are_unverified_not_failed(monkeypatch, capsys):
    """When the probe finds a kernel family inexact, diff names it and leaves those layers unverified; it
    neither fails a correct compile nor hides a wrong layer of another family."""
    compiled = o2g.compile(MODEL, calib=CALIB, num_calib=16)
    data = load_data(EVAL, compiled.graph.inputs).head(4)
    plan, _ = corrupt_weight(compiled.plan)  # the first conv computes the wrong thing
    wrong = dataclasses.replace(compiled, plan=plan)
    assert not run_diff(wrong, data)["verdict"]["passed"]
    monkeypatch.setattr(compare, "probe", lambda: ort_session.Probe("test CPU", {"Conv": 3, "Gemm": 0},
                                                                    {"Conv": 9, "Gemm": 9}))
    result = run_diff(wrong, data)
    convs = [l["name"] for l in result["layers"] if l["op"] == "Conv"]
    assert convs and result["golden"] == {"exact": False, "cpu": "test CPU", "unverified_layers": convs,
                                          "inexact_ops": ["Conv"]}
    assert result["verdict"]["passed"] and result["verdict"]["first_divergent_layer"] not in convs
    assert "golden unavailable on this CPU for Conv" in cli.format_diff(result)
    gemm_unverified = ort_session.Probe("test CPU", {"Gemm": 3}, {"Gemm": 9})
    monkeypatch.setattr(compare, "probe", lambda: gemm_unverified)
    assert not run_diff(wrong, data)["verdict"]["passed"]  # the conv is still checked


# ------------------------------------------------------------------ an emulated CPU without VNNI (qemu-user)

QEMU = shutil.which("qemu-x86_64")
NO_VNNI = "Haswell"  # AVX2, no AVX512 and no VNNI: onnxruntime's u8s8 kernels saturate int16 pair sums
needs_qemu = pytest.mark.skipif(
    platform.machine() != "x86_64" or (QEMU is None and os.environ.get("CI") != "true"),
    reason="qemu-user (apt-get install qemu-user) emulates an x86 CPU without VNNI")


def on_cpu_without_vnni(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run this Python with `args` on an emulated Haswell (no VNNI), whatever the host's CPU."""
    assert QEMU, "qemu-x86_64 not found (apt-get install qemu-user)"
    run = subprocess.run([QEMU, "-cpu", NO_VNNI, sys.executable, *args], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT)
    run.stderr = "\n".join(line for line in run.stderr.splitlines() if "TCG doesn't support" not in line)
    return run


PROBE = ("import json; from onnx2gemmini.ort_session import run_probe; "
         "print(json.dumps([run_probe().mismatches, run_probe({}).mismatches]))")


@needs_qemu
def test_golden_is_exact_on_a_cpu_without_vnni():
    """The golden's settings make the probe exact there; onnxruntime's default session does not (the
    negative control that shows the emulated CPU really takes the saturating path)."""
    import json
    run = on_cpu_without_vnni("-c", PROBE)
    assert run.returncode == 0, run.stderr
    golden, default = json.loads(run.stdout.splitlines()[-1])
    assert golden == {"Conv": 0, "MatMul": 0, "Gemm": 0, "MatMulInteger": 0}
    assert all(default[op] > 0 for op in golden), default


@needs_qemu
def test_bundled_diff_passes_on_a_cpu_without_vnni():
    """The README's diff, on an emulated CPU without VNNI: 0 mismatches in every layer and output."""
    run = on_cpu_without_vnni("-m", "onnx2gemmini.cli", "diff", str(MODEL), "--calib", str(CALIB), "--data",
                              str(EVAL), "--num-samples", "24", "--workers", "1")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "int8 vs onnxruntime QDQ: 0 mismatches in 240 values, max 0 LSB" in run.stdout
    assert run.stdout.rstrip().endswith("PASSED")


@needs_qemu
@pytest.mark.parametrize("build", ["deberta_style", "transformers5_style_causal"])
def test_masked_transformer_diff_passes_on_a_cpu_without_vnni(build, tmp_path):
    """Token ids, attention masks fused into the softmaxes (query-and-key, causal) and DeBERTa's row mask: the
    golden's float softmax runs onnxruntime's AVX2 kernels there, and `diff` still passes with the exact
    layers exact."""
    import numpy as np
    import onnx
    from tests.helpers import random_dataset
    from tests.test_input_mask import deberta_style, transformers5_style
    model = deberta_style() if build == "deberta_style" else transformers5_style(causal=True)
    onnx.save(model, tmp_path / "m.onnx")
    for split, seed in (("calib", 0), ("data", 1)):
        np.savez(tmp_path / f"{split}.npz", **random_dataset(model, 4, seed).inputs)
    run = on_cpu_without_vnni("-m", "onnx2gemmini.cli", "diff", str(tmp_path / "m.onnx"), "--calib",
                              str(tmp_path / "calib.npz"), "--data", str(tmp_path / "data.npz"), "--workers", "1")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.rstrip().endswith("PASSED")
