"""Negative controls: every check of the project must fail on a plan that computes the wrong thing.

A corrupted weight, multiplier, stride or tile is put into a compiled plan; `diff` (library and CLI), the C
self-test (end to end and step by step) and the MLIR step checks (interpreted and lowered natively) must all
report it, naming the step where they can.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import onnx2gemmini as o2g
from onnx2gemmini import cli, compiler
from onnx2gemmini.compare import run_diff
from onnx2gemmini.data import load_data
from onnx2gemmini.emit.c import write_c
from onnx2gemmini.plan import Conv, Matmul
from onnx2gemmini.run import hostc
from onnx2gemmini.run.selftest import selftest_case

ROOT = Path(__file__).resolve().parents[1]
MODEL, CALIB, EVAL = (ROOT / "models" / n for n in ("digits_cnn.onnx", "digits_calib.npz", "digits_eval.npz"))
CC = os.environ.get("CC", "cc")


@pytest.fixture(scope="module")
def digits():
    return o2g.compile(MODEL, calib=CALIB)


def first(plan, kind):
    return next(i for i, s in enumerate(plan.steps) if isinstance(s, kind))


def corrupt_weight(plan):
    """One weight of the first conv changed by 64."""
    step = plan.steps[first(plan, Conv)]
    w = plan.constants[step.weights].copy()
    w.reshape(-1)[5] = np.int8(int(w.reshape(-1)[5]) + 64 - 256 * (w.reshape(-1)[5] > 63))
    return dataclasses.replace(plan, constants={**plan.constants, step.weights: w}), first(plan, Conv)


def corrupt_multiplier(plan):
    """The first conv's output multiplier 3% too large."""
    i = first(plan, Conv)
    steps = list(plan.steps)
    steps[i] = dataclasses.replace(steps[i], scale=steps[i].scale * 1.03)
    return dataclasses.replace(plan, steps=tuple(steps)), i


def corrupt_stride(plan):
    """The first conv reads its input pixels one element further apart than they are."""
    i = first(plan, Conv)
    steps = list(plan.steps)
    steps[i] = dataclasses.replace(steps[i], in_stride=steps[i].in_stride + 1)
    return dataclasses.replace(plan, steps=tuple(steps)), i


CORRUPTIONS = {"weight": corrupt_weight, "multiplier": corrupt_multiplier}


# --- diff ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("what", list(CORRUPTIONS))
def test_diff_fails_and_names_the_layer(digits, what):
    plan, i = CORRUPTIONS[what](digits.plan)
    result = run_diff(dataclasses.replace(digits, plan=plan), load_data(EVAL, digits.graph.inputs).head(20))
    assert not result["verdict"]["passed"]
    assert any(plan.steps[i].node in f for f in result["verdict"]["failures"]), result["verdict"]


def test_cli_diff_exits_1(monkeypatch, capsys):
    real = compiler.build_plan
    monkeypatch.setattr(compiler, "build_plan", lambda *a, **k: corrupt_weight(real(*a, **k))[0])
    code = cli.main(["diff", str(MODEL), "--calib", str(CALIB), "--data", str(EVAL), "--num-samples", "20", "-q"])
    assert code == 1 and capsys.readouterr().err.startswith("error: diff: layer ")


# --- the C self-test ----------------------------------------------------------------------------------

needs_c = pytest.mark.skipif(shutil.which("make") is None or shutil.which(CC) is None,
                             reason="needs make and a C compiler")


def selftest(plan, good_plan, tmp_path, check_layers: bool) -> subprocess.CompletedProcess:
    """The self-test of the corrupted `plan`, holding the correct plan's expected values."""
    c_dir = write_c(plan, tmp_path / "c", *selftest_case(good_plan))
    hostc.build(c_dir, ("model-selftest",), make_vars={"CHECK_LAYERS": "1" if check_layers else "0"})
    return subprocess.run(["./model-selftest"], cwd=c_dir, capture_output=True, text=True, timeout=120)


@needs_c
@pytest.mark.parametrize("check_layers", [False, True], ids=["outputs", "every_layer"])
@pytest.mark.parametrize("what", ["weight", "multiplier", "stride"])
def test_host_selftest_prints_fail(digits, tmp_path, what, check_layers):
    plan, i = {**CORRUPTIONS, "stride": corrupt_stride}[what](digits.plan)
    proc = selftest(plan, digits.plan, tmp_path, check_layers)
    assert proc.returncode == 1 and "\nFAIL: " in proc.stdout, proc.stdout[-800:]
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED after layer")]
    if check_layers:  # every step runs on the emulator's inputs: only the corrupted one fails
        assert len(failed) == 1 and failed[0].startswith(f"FAILED after layer {i} "), failed
    # the FAIL line counts the model's output values only, whichever tensors were checked
    outputs = sum(int(np.prod(digits.plan.tensors[t].shape)) for t in digits.plan.outputs)
    verdict = re.search(r"^FAIL: (\d+) of (\d+) output values differ \((\d+) of (\d+) checked tensors", proc.stdout,
                        re.M)
    assert verdict and int(verdict[2]) == outputs and int(verdict[1]) <= outputs, proc.stdout[-800:]
    assert int(verdict[3]) == len(failed) and int(verdict[4]) > (len(digits.plan.steps) - 2 if check_layers else 0)


@needs_c
def test_host_selftest_refuses_a_tile_that_does_not_fit(digits, tmp_path):
    i = first(digits.plan, Matmul)
    steps = list(digits.plan.steps)
    steps[i] = dataclasses.replace(steps[i], tiles={"tile_I": 64, "tile_J": 64, "tile_K": 64})
    proc = selftest(dataclasses.replace(digits.plan, steps=tuple(steps)), digits.plan, tmp_path, False)
    assert proc.returncode != 0 and "PASS" not in proc.stdout


# --- the MLIR step checks -----------------------------------------------------------------------------

@pytest.mark.parametrize("what", list(CORRUPTIONS))
def test_mlir_step_checks_name_the_corrupted_step(digits, what):
    pytest.importorskip("torch_mlir", reason="the MLIR tests need the torch-mlir wheel (test extra)")
    from onnx2gemmini.emit.mlir import emit_mlir, step_checks
    from onnx2gemmini.run.selftest import expected_values
    from onnx2gemmini.slices import densify
    from tests.emit.mlir_interp import Interpreter, parse

    plan, i = CORRUPTIONS[what](digits.plan)
    sample, _ = selftest_case(digits.plan)
    checks = step_checks(digits.plan)
    want = expected_values(densify(digits.plan), sample)
    failed = []

    def check(k, value):
        if not np.array_equal(value.reshape(-1), want[checks[k].tensor].reshape(-1)):
            failed.append(checks[k].step)
        value[...] = want[checks[k].tensor].reshape(value.shape)
    Interpreter(parse(emit_mlir(plan, check_steps=True)), densify(plan), check).run(
        [sample[plan.tensors[t].onnx_name] for t in plan.inputs])
    assert failed == [i]


@needs_c
@pytest.mark.parametrize("what", list(CORRUPTIONS))
def test_lowered_mlir_step_checks_name_the_corrupted_step(digits, what, tmp_path):
    pytest.importorskip("torch_mlir", reason="the MLIR tests need the torch-mlir wheel (test extra)")
    from onnx2gemmini.emit.mlir import emit_mlir, step_checks
    from onnx2gemmini.run.selftest import expected_values
    from onnx2gemmini.slices import densify
    from tests.emit import mlir_jit

    plan, i = CORRUPTIONS[what](digits.plan)
    sample, _ = selftest_case(digits.plan)
    checks = step_checks(digits.plan)
    want = expected_values(densify(digits.plan), sample)
    lib = mlir_jit.build_runtime(tmp_path)
    [(_, results)] = mlir_jit.run_isolated(emit_mlir(plan, check_steps=True), lib,
                                           [plan.tensors[t].shape for t in plan.outputs],
                                           [[sample[plan.tensors[t].onnx_name] for t in plan.inputs]],
                                           expected=[[want[c.tensor] for c in checks]])
    assert [c.step for c, (differing, _, _) in zip(checks, results) if differing] == [i]
