"""run/hostc.py: build and run the emitted program; every failure is one readable O2GError."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import onnx2gemmini as o2g
from onnx2gemmini.emit.c import write_c
from onnx2gemmini.errors import O2GError
from onnx2gemmini.run import hostc
from onnx2gemmini.run.selftest import selftest_case

ROOT = Path(__file__).resolve().parents[2]
CC = os.environ.get("CC", "cc")
needs_cc = pytest.mark.skipif(shutil.which("make") is None or shutil.which(CC) is None,
                              reason="needs make and a C compiler")


@pytest.fixture(scope="module")
def digits():
    return o2g.compile(ROOT / "models" / "digits_cnn.onnx", calib=ROOT / "models" / "digits_calib.npz")


@pytest.fixture(scope="module")
def built(digits, tmp_path_factory):
    if shutil.which("make") is None or shutil.which(CC) is None:
        pytest.skip("needs make and a C compiler")
    return hostc.build(write_c(digits.plan, tmp_path_factory.mktemp("hostc") / "c", *selftest_case(digits.plan)))


def sample():
    return {"input": np.load(ROOT / "models" / "digits_eval.npz")["input"][:1]}


def test_run_int8_equals_the_emulator(digits, built):
    got = hostc.run_int8(built, digits.plan, sample())
    want = digits.run_int8(sample())
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_missing_make_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(hostc.shutil, "which", lambda name: None)
    with pytest.raises(hostc.ToolMissing, match="'make' is not installed"):
        hostc.build(tmp_path)


def test_missing_compiler_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(hostc.shutil, "which", lambda name: "/usr/bin/make" if name == "make" else None)
    with pytest.raises(hostc.ToolMissing, match="C compiler 'no-such-cc' not found"):
        hostc.build(tmp_path, make_vars={"CC": "no-such-cc"})


@needs_cc
def test_build_failure_carries_the_compiler_message(digits, tmp_path):
    c_dir = write_c(digits.plan, tmp_path / "c", *selftest_case(digits.plan))
    (c_dir / "model.c").write_text((c_dir / "model.c").read_text() + "\nthis is not C;\n")
    with pytest.raises(hostc.BuildFailed, match="make model failed: .*model.c"):
        hostc.build(c_dir)
    with pytest.raises(hostc.BuildFailed, match="no Makefile"):
        hostc.build(tmp_path)


def test_bad_inputs_and_unbuilt_program(digits, built, tmp_path):
    with pytest.raises(hostc.RunFailed, match="missing model input 'input'"):
        hostc.run(built, digits.plan, {})
    with pytest.raises(hostc.RunFailed, match="has 3 values"):
        hostc.run(built, digits.plan, {"input": np.zeros(3, np.float32)})
    with pytest.raises(hostc.RunFailed, match="not built"):
        hostc.run(tmp_path, digits.plan, sample())


def test_errors_are_o2g_errors_with_exit_code_1():
    for cls in (hostc.ToolMissing, hostc.BuildFailed, hostc.RunFailed):
        assert issubclass(cls, O2GError) and cls.exit_code == 1
