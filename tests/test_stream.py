"""Streaming models (`--state OUT=IN`): a recurrent state that is a model input and output compiles on every
path; calibration sees the states the float model carries along the stream; diff carries the int8 program's
own stream (each step checked bit for bit) and judges it against the original model's own fp32 stream."""
import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest

import onnx2gemmini as o2g
from onnx2gemmini import stream
from onnx2gemmini.data import Dataset
from onnx2gemmini.errors import UsageError
from onnx2gemmini.metrics import sqnr_db
from onnx2gemmini.ort_session import session
from onnx2gemmini.run import hostc
from tests.stream_models import HIDDEN, chunks, streaming_model
from tests.test_cli import assert_one_error_line, run

CELLS = ("LSTM", "GRU")


def layers(cell: str) -> int:
    return 2 if cell == "LSTM" else 1


def original_stream(model: onnx.ModelProto, x: np.ndarray, reset: bool = False) -> list[dict]:
    """The original model over the stream in onnxruntime, its state carried by hand (or reset each step)."""
    sess = session(model)
    state = np.zeros(model.graph.input[1].type.tensor_type.shape.dim[0].dim_value * HIDDEN, np.float32)
    state = state.reshape(-1, 1, HIDDEN)
    out = []
    for chunk in x:
        prob, state_n = sess.run(["prob", "stateN"], {"x": chunk, "state": state, "sr": np.array(16000, np.int64)})
        out.append({"prob": prob, "stateN": state_n})
        if not reset:
            state = state_n
    return out


@pytest.fixture(scope="module", params=CELLS)
def compiled(request):
    cell = request.param
    model = streaming_model(cell)
    return cell, model, o2g.compile(model, calib={"x": chunks(96)}, input_values={"sr": 16000},
                                    states={"stateN": "state"})


def test_the_state_scale_comes_from_the_stream(compiled):
    """Calibration runs the float model along the calibration stream: the state input's scale fits the
    states the stream carries, not the zeros (or noise) a data file would hold."""
    cell, model, c = compiled
    states = np.stack([s["stateN"] for s in original_stream(model, chunks(96))])
    largest = float(np.abs(states).max())
    assert largest / 127 * 0.25 <= c.quant.scales["state"] <= largest / 127 * 1.001
    assert c.states == (("stateN", "state"),)


def test_diff_carries_both_streams(compiled):
    """Each step's int8 state is the emulator's own from the step before (so the golden checks every step
    on the int8 stream's inputs and passes bit for bit), and fidelity is judged against the original model's
    own fp32 stream: the figure equals an independent computation of the two streams."""
    cell, model, c = compiled
    x = chunks(120, seed=3)
    result = o2g.diff(c, data={"x": x}, min_sqnr="none", min_top1="none")  # random weights: no claim
    assert result["verdict"]["passed"], result["verdict"]
    assert result["stream"]["steps"] == 120
    assert result["stream"]["judged_against"] == "the original model's own fp32 stream"
    assert result["fidelity"]["stateN"]["kind"] == "state" and not result["fidelity"]["stateN"]["floor"]
    ours = stream.filled(Dataset({"x": x}, None, "x"), c.run, c.states, {"state": (layers(cell), 1, HIDDEN)})[1]
    theirs = original_stream(model, x)
    for name in ("prob", "stateN"):
        expected = sqnr_db(np.concatenate([np.ravel(t[name]) for t in theirs]).astype(np.float64),
                           np.concatenate([np.ravel(o[name]) for o in ours]).astype(np.float64))
        assert result["fidelity"][name]["vs_original"]["sqnr_db"] == pytest.approx(expected, abs=1e-9)
        assert result["outputs"][name]["fp32_vs_original"]["sqnr_db"] > 100  # same inputs: the rewrite is exact
    assert result["fidelity"]["prob"]["vs_original"]["sqnr_db"] > 20


def test_carrying_the_state_matters(compiled):
    """Negative control: the same stream with the state reset at every step gives other outputs, far
    beyond the int8 error, so a diff that did not carry the state could not pass as one that did."""
    cell, model, c = compiled
    x = chunks(120, seed=4)
    carried, reset = original_stream(model, x), original_stream(model, x, reset=True)
    ours = stream.filled(Dataset({"x": x}, None, "x"), c.run, c.states, {"state": (layers(cell), 1, HIDDEN)})[1]
    prob = lambda steps: np.concatenate([np.ravel(s["prob"]) for s in steps]).astype(np.float64)  # noqa: E731
    reset_error = np.mean(np.abs(prob(carried) - prob(reset)))
    assert reset_error > 4 * np.mean(np.abs(prob(carried) - prob(ours))) and reset_error > 0.1


def test_a_stream_without_its_data_is_made_from_zeros_then_carried():
    """Without --calib a streaming compile still carries the state along its random stream."""
    c = o2g.compile(streaming_model("GRU"), input_values={"sr": 16000}, states=["stateN=state"])
    assert c.quant.scales["state"] > 0
    states = c.calib_head.inputs["state"]
    assert not states[0].any() and states[1:].any()  # zeros at the first step, then the carried states


@pytest.mark.parametrize("spec, fragments", [
    ("nope=state", ["no output 'nope'", "outputs: prob, stateN"]),
    ("stateN=nope", ["no input 'nope'"]),
    ("prob=state", ["output shape 1x1 differs from the input's 1x1x16"]),
    ("stateN=sr", ["frozen by --input-value"]),
    ("stateN", ["expected OUTPUT=INPUT"]),
])
def test_bad_state_declarations_are_one_usage_error(tmp_path, spec, fragments):
    path = tmp_path / "m.onnx"
    onnx.save(streaming_model("GRU"), str(path))
    proc = run(path, "--input-value", "sr=16000", "--state", spec, "-o", tmp_path / "out")
    assert_one_error_line(proc, 2, "--state", *fragments)
    assert not (tmp_path / "out").exists()


def test_an_integer_input_cannot_be_a_state():
    with pytest.raises(UsageError, match="holds int64; a state is float"):
        stream.check((("stateN", "ids"),), {"ids": ((1, 1, 16), np.dtype(np.int64))}, {"stateN": (1, 1, 16)})
    with pytest.raises(UsageError, match="given twice"):
        stream.parse(["stateN=state", "prob=state"])


def c_selftest(c_dir, check_layers: bool) -> subprocess.CompletedProcess:
    hostc.build(c_dir, ("model-selftest",), make_vars={"CHECK_LAYERS": "1"} if check_layers else None)
    return subprocess.run(["./model-selftest"], cwd=c_dir, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(shutil.which("make") is None or shutil.which(os.environ.get("CC", "cc")) is None,
                    reason="the C program needs make and a C compiler")
def test_the_c_program_streams(compiled, tmp_path):
    """model.h's stream API carries the state between calls: the self-test runs the first steps of the
    calibration stream through it, requires the state it carried into the checked step to be the emulator's
    bit for bit, then checks that step (and every layer with CHECK_LAYERS=1). Negative control: a carry one
    part in 10^4 off fails."""
    cell, model, c = compiled
    c.write(tmp_path / "out", emit="c")
    c_dir = tmp_path / "out" / "c"
    header = (c_dir / "model.h").read_text()
    for declaration in ("_NUM_STATES 1", "_stream_reset(void);", "_stream_step(void);", "_state_inputs["):
        assert declaration in header
    for check_layers in (False, True):
        proc = c_selftest(c_dir, check_layers)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"carried the state through {stream.SELFTEST_WARMUP} steps: exact" in proc.stdout
        assert "PASS (exact)" in proc.stdout
    source = (c_dir / "model.c").read_text()
    carry = "[j] * scale;"
    assert source.count(carry) == 1
    (c_dir / "model.c").write_text(source.replace(carry, "[j] * scale * 1.0001f;"))
    proc = c_selftest(c_dir, False)
    assert proc.returncode == 1 and "FAIL: the state input state carried through" in proc.stdout, proc.stdout


def test_the_mlir_program_streams(compiled, tmp_path):
    """The MLIR program's self-test carries the state the same way (the module lowered with upstream MLIR and
    the host tile ops, as tests/emit/test_mlir_program.py runs it)."""
    pytest.importorskip("torch_mlir", reason="the MLIR program tests need the torch-mlir wheel (test extra)")
    from tests.emit import mlir_jit
    from onnx2gemmini.emit.mlir import emit_mlir, step_checks
    from onnx2gemmini.emit.mlir_program import mlir_program_files
    from onnx2gemmini.run.selftest import selftest_case
    from onnx2gemmini.slices import densify
    if not mlir_jit.have_cc():
        pytest.skip("no C compiler")
    cell, model, c = compiled
    plan, dense = c.plan, densify(c.plan)
    wanted = {ch.tensor for ch in step_checks(plan)} | set(dense.outputs) | set(plan.outputs)
    sample, expected = selftest_case(dense, c.selftest_sample, wanted)
    out = tmp_path / "mlir"
    out.mkdir()
    for name, data in mlir_program_files(plan, sample, expected, "", c.selftest_stream).items():
        (out / name).write_bytes(data)
    (tmp_path / "model.mlir").write_text(emit_mlir(plan))
    (tmp_path / "rt").mkdir()
    lib = mlir_jit.build_runtime(tmp_path / "rt")
    for check_layers, source in ((False, "../model.mlir"), (True, "model_checked.mlir")):
        exe = mlir_jit.build_selftest((out / source).read_text(), lib, out, check_layers)
        proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"carried the state through {stream.SELFTEST_WARMUP} steps: exact" in proc.stdout
        assert "PASS (exact)" in proc.stdout
