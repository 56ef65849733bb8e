"""OUT/mlir/: the self-checking program of the MLIR path (emit/mlir_program.py, runtime/o2g_mlir_selftest.c).

On Gemmini it is built by Buddy-MLIR's tools (its Makefile); here the same emitted files run natively: the
module lowered with upstream MLIR and the host tile ops (mlir_jit), linked with the emitted self-test, data
and runtime copies. The self-test must pass on the emulator's values and fail, naming the step, when one
expected value is changed (negative controls)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

pytest.importorskip("torch_mlir", reason="the MLIR tests need the torch-mlir wheel (test extra)")

from tests.emit import mlir_jit  # noqa: E402
from tests.emit.test_mlir import compiled_case  # noqa: E402
from onnx2gemmini.emit.mlir import emit_mlir, lower_gemmini_options, step_checks  # noqa: E402
from onnx2gemmini.emit.mlir_program import mlir_program_files  # noqa: E402
from onnx2gemmini.run.selftest import default_sample, selftest_case  # noqa: E402
from onnx2gemmini.slices import densify  # noqa: E402

# exact Gemmini and CPU steps, several inputs and outputs, float32 outputs, libm kernels (the default build
# then needs the hooks), a multi-row matmul with a repeating bias, channel slices densified into copies,
# integer inputs (token ids and an attention mask)
CASES = ["matmul_bias_3d", "two_inputs_three_outputs", "float_outputs", "layernorm", "softmax", "concat_in_place",
         "conv_relu_pool", "attention_mask_input_causal"]


@pytest.fixture(scope="module")
def host_runtime(tmp_path_factory):
    if not mlir_jit.have_cc():
        pytest.skip("no C compiler")
    return mlir_jit.build_runtime(tmp_path_factory.mktemp("mlir_runtime"))


def program(name, tmp_path):
    """OUT/mlir/ of case `name` written under tmp_path (with ../model.mlir), and its plan."""
    _, compiled = compiled_case(name)
    plan = compiled.plan
    sample, expected = selftest_case(densify(plan), default_sample(plan))
    out = tmp_path / "mlir"
    out.mkdir()
    for file, data in mlir_program_files(plan, sample, expected).items():
        (out / file).write_bytes(data)
    (tmp_path / "model.mlir").write_text(emit_mlir(plan))
    return plan, out


def default_source(out) -> str:
    """The module the Makefile builds without CHECK_LAYERS."""
    line = re.search(r"^MLIR_SOURCE = \$\(if \$\(filter 1,\$\(CHECK_LAYERS\)\),model_checked\.mlir,(\S+)\)$",
                     (out / "Makefile").read_text(), re.M)
    assert line, "the Makefile's MLIR_SOURCE line"
    return line.group(1)


def run(out, lib, check_layers: bool) -> subprocess.CompletedProcess:
    source = "model_checked.mlir" if check_layers else default_source(out)
    exe = mlir_jit.build_selftest((out / source).read_text(), lib, out, check_layers)
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", CASES, ids=CASES)
def test_the_self_test_passes_on_the_emulators_values(name, host_runtime, tmp_path):
    plan, out = program(name, tmp_path)
    libm = any(c.tolerance.lsb for c in step_checks(plan))
    assert default_source(out) == ("model_checked.mlir" if libm else "../model.mlir")
    for check_layers in (False, True):
        result = run(out, host_runtime, check_layers)
        assert result.returncode == 0, result.stdout + result.stderr
        assert re.search(r"^PASS \((exact|within \d+ LSB: \d+ of \d+ values)\)$", result.stdout, re.M), result.stdout
        assert "FAILED" not in result.stdout


def test_a_changed_output_value_fails(host_runtime, tmp_path):
    """Negative control: one expected value of the second output off by one, in both tables (the default build
    compares the outputs with selftest_data.bin's when @forward returns; with CHECK_LAYERS=1 the hook after
    their step compares them with selftest_layers.bin's): both builds fail."""
    plan, out = program("two_inputs_three_outputs", tmp_path)
    inc = (out / "selftest_model.inc").read_text()
    symbol = re.search(r"extern const int8_t (\w+_expect_output_1)\[(\d+)\];", inc)
    offset = int(re.search(rf"\.globl {symbol.group(1)}\n.*?\.incbin \"selftest_data.bin\", (\d+),",
                           (out / "selftest_data.S").read_text(), re.S).group(1))
    data = bytearray((out / "selftest_data.bin").read_bytes())
    data[offset + 3] = (data[offset + 3] + 1) % 256
    (out / "selftest_data.bin").write_bytes(bytes(data))
    # with CHECK_LAYERS=1 the hook after the output's step checks it against the layer table: the same value
    # changed there (the hook whose output index is 1)
    checked = inc[inc.index("#if O2G_CHECK_LAYERS"):inc.index("#else", inc.index("#if O2G_CHECK_LAYERS"))]
    k = int(re.search(r"^    \{(\d+), .*, 1\},$", checked, re.M).group(1))
    table = (out / "selftest_layers.S").read_text()
    offset = int(re.search(rf"_layer_expect_{k}:\n\t\.incbin \"selftest_layers.bin\", (\d+),", table).group(1))
    layers = bytearray((out / "selftest_layers.bin").read_bytes())
    layers[offset + 3] = (layers[offset + 3] + 1) % 256
    (out / "selftest_layers.bin").write_bytes(bytes(layers))
    total = sum(int(np.prod(plan.tensors[t].shape)) for t in plan.outputs)
    result = run(out, host_runtime, False)
    assert result.returncode == 1, result.stdout
    assert re.search(rf"^FAIL: 1 of {total} output values differ", result.stdout, re.M), result.stdout
    # the hook puts the (changed) expected values in place, so a later step reading that output differs too
    result = run(out, host_runtime, True)
    assert result.returncode == 1, result.stdout
    first = re.search(r"^FAILED after layer \d+ \S+: tensor (\S+): 1 of \d+ values differ", result.stdout, re.M)
    assert first and first.group(1) == plan.tensors[plan.outputs[1]].onnx_name, result.stdout
    assert re.search(rf"^FAIL: \d+ of {total} output values differ", result.stdout, re.M), result.stdout


def test_check_layers_names_the_step_that_differs(host_runtime, tmp_path):
    """Negative control: one value of a middle step's expected output changed; CHECK_LAYERS=1 names that step
    first."""
    plan, out = program("conv_relu_pool", tmp_path)
    hooks = step_checks(plan)
    k = 0 if len(hooks) < 2 else len(hooks) // 2
    step_of = hooks[k].step
    table = (out / "selftest_layers.S").read_text()
    offset = int(re.search(rf"_layer_expect_{k}:\n\t\.incbin \"selftest_layers.bin\", (\d+),", table).group(1))
    data = bytearray((out / "selftest_layers.bin").read_bytes())
    data[offset] = (data[offset] + 64) % 256
    (out / "selftest_layers.bin").write_bytes(bytes(data))
    result = run(out, host_runtime, True)
    assert result.returncode == 1, result.stdout
    failed = re.findall(r"^FAILED after layer (\d+) ", result.stdout, re.M)
    assert failed and failed[0] == str(step_of), result.stdout  # (the changed value then travels on)
    assert re.search(r"^FAIL: \d+ of \d+ output values differ", result.stdout, re.M)


def test_makefile_names_what_is_missing(tmp_path):
    """The Makefile's tool and gemmini-rocc-tests checks: one error line each, before anything is built."""
    if shutil.which("make") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("make is required when CI=true")
        pytest.skip("make not installed")
    plan, out = program("matmul_bias_3d", tmp_path)
    text = (out / "Makefile").read_text()
    assert f'LOWER_GEMMINI ?= {lower_gemmini_options(plan.config)}' in text
    missing = subprocess.run(["make", "-C", str(out), "model.o", "BUDDY_OPT=/nonexistent/buddy-opt"],
                             capture_output=True, text=True)
    assert missing.returncode != 0
    assert "error: BUDDY_OPT=/nonexistent/buddy-opt not found" in missing.stdout + missing.stderr
    no_gemmini = subprocess.run(["make", "-C", str(out), "check-gemmini"], capture_output=True, text=True)
    assert no_gemmini.returncode != 0
    assert "error: set GEMMINI=<gemmini-rocc-tests directory>" in no_gemmini.stdout + no_gemmini.stderr
    assert not (out / "model.o").exists() and not (out / "model-baremetal").exists()


def test_the_heap_holds_every_buffer_of_a_call(tmp_path):
    """o2g_heap.c frees only at the end of a call: HEAP_BYTES covers every buffer @forward allocates."""
    plan, out = program("concat_in_place", tmp_path)
    heap = int(re.search(r"^HEAP_BYTES \?= (\d+)$", (out / "Makefile").read_text(), re.M).group(1))
    module = (tmp_path / "model.mlir").read_text()
    sizes = {"i8": 1, "i32": 4, "f32": 4}
    allocated = 0
    for dims, elem in re.findall(r"memref\.alloc\(\) \{alignment = 64 : i64\} : memref<((?:\d+x)+)(i8|i32|f32)>",
                                 module):
        allocated += int(np.prod([int(d) for d in dims.rstrip("x").split("x")])) * sizes[elem] + 128
    assert allocated > 0 and heap >= allocated


@pytest.mark.parametrize("name", ["softmax", "concat_in_place"])
def test_layer_checks_past_their_limit_keep_the_first_steps_and_still_pass(name, host_runtime, tmp_path):
    """Every step's expected values past `layer_check_bytes` (SAM's would be 17 GiB): model_checked.mlir hooks
    the first steps whose values fit and, after them, only the default checks (the libm kernels' outputs, each
    resynchronized); its self-test passes as before, with and without CHECK_LAYERS."""
    from onnx2gemmini import limits
    plan = compiled_case(name)[1].plan
    every = step_checks(plan, bounded=False)
    dense = densify(plan)
    first = dense.tensors[every[0].tensor]
    budget = int(np.prod(first.shape)) * np.dtype(first.dtype).itemsize  # the first step's values only
    with limits.applied({"layer_check_bytes": budget}):
        bounded = step_checks(plan)
        _, out = program(name, tmp_path)
        text = (out / "model_checked.mlir").read_text()
        title = (out / "selftest_layers.S").read_text()
    assert len(bounded) < len(every) and bounded[0] == every[0]
    assert [c for c in bounded[1:] if c.step > every[0].step] == \
        [c for c in every if c.step > every[0].step and (c.tolerance.lsb or c.tensor in dense.outputs)]
    assert text.count("@o2g_rt_check(") == len(bounded) + 1  # the calls and the declaration
    assert "layer_check_bytes limit" in title
    for check_layers in (False, True):
        result = run(out, host_runtime, check_layers)
        assert result.returncode == 0 and re.search(r"^PASS \(", result.stdout, re.M), result.stdout + result.stderr


def test_wide_channel_copies_run_on_views_with_short_indexes(host_runtime, tmp_path, monkeypatch):
    """A read-only channel slice is copied by a Remap that lists every position it copies; a wide one (SAM's
    attention heads: 16.7M positions, GBs as Python ints) runs between views splitting the last axis, and
    lists far fewer. The module computes the same: the self-test passes, with and without CHECK_LAYERS."""
    from onnx2gemmini import slices
    from onnx2gemmini.cpu import Remap
    from onnx2gemmini.run.emulator import Emulator
    plan = compiled_case("attention_mask_input_causal")[1].plan
    long = [s for s in slices.densify(plan).steps if isinstance(getattr(s, "params", None), Remap)]
    monkeypatch.setattr(slices, "COMPACT_INDEX", 4)
    dense = slices.densify(plan)
    short = [s for s in dense.steps if isinstance(getattr(s, "params", None), Remap)]
    assert len(short) == len(long) > 0
    assert all(dense.tensors[s.outputs[0]].view_of for s in short)
    assert sum(len(s.params.index) for s in short) < sum(len(s.params.index) for s in long)
    sample = default_sample(plan)
    want, got = Emulator(plan).run(sample), Emulator(dense).run(sample)
    for tid in plan.outputs:
        np.testing.assert_array_equal(got[tid], want[tid])
    _, out = program("attention_mask_input_causal", tmp_path)
    for check_layers in (False, True):
        result = run(out, host_runtime, check_layers)
        assert result.returncode == 0 and re.search(r"^PASS \(", result.stdout, re.M), result.stdout + result.stderr
