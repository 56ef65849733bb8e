"""--keep-float (ops/keep_float.py, cpu/float_layers.py): named Conv/ConvTranspose/Gemm/MatMul layers run in float
on the CPU with float32 weights. They pass diff against the QDQ golden (which keeps their weights float too),
gain accuracy where int8 weights lose it (an outlier weight), show up as CPU steps with their reason and cost,
compile to C that computes the emulator's bytes, and a wrong name or op is one usage error."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini import cpu
from onnx2gemmini.compare import run_diff
from onnx2gemmini.fidelity import NO_FLOORS
from onnx2gemmini.emit.c import write_c
from onnx2gemmini.emit.report import build_report, report_markdown
from onnx2gemmini.errors import UsageError
from onnx2gemmini.golden import build_qdq
from onnx2gemmini.numerics import quantize
from onnx2gemmini.plan import CpuOp
from onnx2gemmini.run import hostc
from onnx2gemmini.run.emulator import Emulator
from onnx2gemmini.run.selftest import selftest_case
from onnx2gemmini.sensitivity import sensitivity
from tests.helpers import infer_outputs, random_dataset, rng

ROOT = Path(__file__).resolve().parents[1]


def outlier_model(outlier: float = 16.0):
    """x -> conv (one weight 80 sigma out) -> ReLU -> conv -> ReLU -> flatten -> Gemm (one weight 80 sigma out) -> y:
    one int8 weight scale per layer makes every other weight of those layers coarse (K = 288 and 512 products
    per output, so the outlier's own output does not dominate the output range as much)."""
    r = rng(11)
    w1 = r.normal(0, 0.2, (16, 32, 3, 3)).astype(np.float32)
    w1[3, 5, 1, 1] = outlier
    w2 = r.normal(0, 0.1, (8, 16, 3, 3)).astype(np.float32)
    fc = r.normal(0, 0.05, (10, 8 * 8 * 8)).astype(np.float32)
    fc[7, 20] = outlier / 4
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "W2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Flatten", ["r2"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "FC", "FB"], ["y"], name="fc", transB=1)]
    inits = {"W1": w1, "B1": r.normal(0, 0.1, 16).astype(np.float32), "W2": w2, "FC": fc,
             "FB": r.normal(0, 0.1, 10).astype(np.float32)}
    return infer_outputs(nodes, {"x": [1, 32, 8, 8]}, inits)


def matmul_model():
    """A 3-D MatMul with a bias Add (fused into it), then a plain one: both with constant 2-D weights."""
    r = rng(12)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="proj"),
             helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
             helper.make_node("Relu", ["a"], ["h"], name="act"),
             helper.make_node("MatMul", ["h", "W2"], ["y"], name="out")]
    inits = {"W": r.normal(0, 0.3, (12, 20)).astype(np.float32), "b": r.normal(0, 0.1, 20).astype(np.float32),
             "W2": r.normal(0, 0.2, (20, 6)).astype(np.float32)}
    return infer_outputs(nodes, {"x": [2, 5, 12]}, inits)


def compiled_and_diff(model, keep=None, samples=6, **options):
    compiled = o2g.compile(model, calib=random_dataset(model, 8, 0), keep_float=keep, **options)
    return compiled, run_diff(compiled, random_dataset(model, samples, 1), floors=NO_FLOORS)


def layer(result: dict, name: str) -> dict:
    return next(row for row in result["layers"] if row["name"] == name)


def float_steps(compiled, node: str) -> list[CpuOp]:
    return [s for s in compiled.plan.steps if s.node == node and isinstance(s, CpuOp) and s.op == "float_conv"]


# --- what a kept layer is ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kept", [["conv1"], ["conv2"], ["fc"], ["conv1", "conv2", "fc"]], ids="+".join)
def test_kept_layers_pass_diff_as_cpu_steps_with_float_weights(kept):
    compiled, result = compiled_and_diff(outlier_model(), kept)
    assert result["verdict"]["passed"], result["verdict"]
    for name in kept:
        [step] = float_steps(compiled, name)
        assert step.target == "cpu" and "kept float by --keep-float" in step.reason
        assert not [s for s in compiled.plan.steps if s.node == name and s.target == "gemmini"]
        weights = [compiled.plan.constants[t] for t in step.inputs[1:]]
        assert weights and all(w.dtype == np.float32 for w in weights)
        assert name not in compiled.quant.weights and name in compiled.quant.float_layers
        assert layer(result, name)["compared"] > 0  # diff still checks the layer, against its float golden
    for name in {"conv1", "conv2", "fc"} - set(kept):
        assert name in compiled.quant.weights and not float_steps(compiled, name)


def test_golden_keeps_the_weights_float_and_reads_the_int8_input():
    """The kept conv reads DQ(Q(x)) and its own float initializers; its output is quantized at its scale."""
    compiled = o2g.compile(outlier_model(), calib=random_dataset(outlier_model(), 4, 0), keep_float="conv1")
    qdq = build_qdq(compiled.graph, compiled.quant)
    conv = next(n for n in qdq.graph.node if n.name == "conv1")
    node = next(n for n in compiled.graph.nodes if n.name == "conv1")  # its weights after equalization
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in qdq.graph.initializer}
    assert list(conv.input[1:]) == node.inputs[1:]
    for name in node.inputs[1:]:
        np.testing.assert_array_equal(inits[name], compiled.graph.initializers[name])
    producer = {o: n for n in qdq.graph.node for o in n.output}
    source = producer[conv.input[0]]  # Max(x, x): keeps onnxruntime from quantizing the float weights itself
    assert source.op_type == "Max" and producer[source.input[0]].op_type == "DequantizeLinear"
    assert any(n.op_type == "QuantizeLinear" and n.input[1] == "r1__scale" for n in qdq.graph.node)
    assert not any(n.name.startswith("conv1__W") for n in qdq.graph.node)


def test_matmul_with_a_fused_bias_and_a_plain_matmul_kept_float():
    model = matmul_model()
    compiled = o2g.compile(model, calib=random_dataset(model, 6, 0))
    names = [n.name for n in compiled.graph.nodes if n.op_type in ("MatMul", "Gemm")]
    compiled, result = compiled_and_diff(model, names)
    assert result["verdict"]["passed"], result["verdict"]
    for name in names:
        assert float_steps(compiled, name), name
    biased = [s for name in names for s in float_steps(compiled, name) if len(s.inputs) == 3]
    assert biased  # the bias Add went into a kept layer: a float32 bias input
    assert not [s for s in compiled.plan.steps if s.target == "gemmini"]


@pytest.mark.parametrize("attrs", [dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
                                   dict(group=2, dilations=[2, 1])], ids=["stride2", "grouped_dilated"])
def test_conv_transpose_kept_float(attrs):
    from tests.ops.test_conv_transpose import conv_transpose_model
    model = conv_transpose_model(c=4, oc=6, **attrs)
    compiled, result = compiled_and_diff(model, ["deconv"])
    assert result["verdict"]["passed"], result["verdict"]
    assert [s.op for s in compiled.plan.steps if s.node == "deconv"] == ["remap", "float_conv"]


def test_fused_relu_and_max_pool_stay_with_the_kept_conv():
    """The ReLU is applied by the float conv's quantization, the fused max-pool as the int8 CPU pool after it."""
    from tests.ops.test_conv import conv_model
    model = conv_model(h=12, w=12, post=("relu", "maxpool3_2_1"))
    compiled, result = compiled_and_diff(model, ["conv"])
    assert result["verdict"]["passed"], result["verdict"]
    ops = [(s.op, s.params.relu if s.op == "float_conv" else None) for s in compiled.plan.steps if s.node == "conv"]
    assert ops == [("float_conv", True), ("maxpool", None)]


def test_equalization_and_bias_correction_leave_the_kept_layer_float():
    """conv1 -> ReLU -> conv2 is an equalization pair; bias correction needs int8 weights: neither touches the
    kept conv's float weights, and the other conv is still corrected."""
    model = outlier_model()
    kept, result = compiled_and_diff(model, ["conv2"], equalize=True, bias_correction=True)
    assert result["verdict"]["passed"], result["verdict"]
    plain = o2g.compile(model, calib=random_dataset(model, 8, 0), equalize=True, bias_correction=False)
    assert not np.array_equal(kept.quant.weights["conv1"].bias, plain.quant.weights["conv1"].bias)
    [step] = float_steps(kept, "conv2")
    node = next(n for n in kept.graph.nodes if n.name == "conv2")
    assert node.inputs[1] != "W2"  # equalized with conv1 (the float function is the same)
    np.testing.assert_array_equal(kept.plan.constants[step.inputs[1]],
                                  kept.graph.initializers[node.inputs[1]].transpose(2, 3, 1, 0))


# --- why: accuracy, and what it costs -----------------------------------------------------------------------

@pytest.mark.parametrize("name, after_it", [("conv1", "conv2"), ("fc", "fc")])
def test_keeping_the_outlier_layer_float_raises_its_sqnr(name, after_it):
    """Its int8 weights share a scale with an 80-sigma outlier; in float only its activations are quantized:
    its own SQNR against fp32 (diff's per-layer figure) rises, and so does the next layer's (or the output's)."""
    model = outlier_model()
    _, quantized = compiled_and_diff(model)
    _, kept = compiled_and_diff(model, [name])
    before, after = layer(quantized, name)["sqnr_db"], layer(kept, name)["sqnr_db"]
    assert after > before + 6.0, (before, after)
    assert layer(kept, after_it)["sqnr_db"] > layer(quantized, after_it)["sqnr_db"] + 3.0
    assert kept["outputs"]["y"]["fp32_vs_int8"]["sqnr_db"] >= quantized["outputs"]["y"]["fp32_vs_int8"]["sqnr_db"]


def test_sensitivity_ranks_the_outlier_layer_and_runs_with_kept_layers():
    model = outlier_model()
    compiled = o2g.compile(model, calib=random_dataset(model, 8, 0))
    ranking = sensitivity(compiled, random_dataset(model, 6, 1))
    assert ranking[0]["name"] in ("conv1", "fc")
    kept = o2g.compile(model, calib=random_dataset(model, 8, 0), keep_float=[ranking[0]["name"]])
    again = {r["name"]: r for r in sensitivity(kept, random_dataset(model, 6, 1))}
    assert again[ranking[0]["name"]]["sqnr_db_cost"] < ranking[0]["sqnr_db_cost"]


def test_report_lists_the_kept_layers_and_their_cpu_cost():
    model = outlier_model()
    plain = o2g.compile(model, calib=random_dataset(model, 4, 0))
    compiled = o2g.compile(model, calib=random_dataset(model, 4, 0), keep_float=["conv2", "fc"])
    report, before = build_report(compiled, compiled.timing), build_report(plain, plain.timing)
    kept = report["kept_float"]
    assert [r["name"] for r in kept["layers"]] == ["conv2", "fc"]
    conv2 = next(s for s in plain.plan.steps if s.node == "conv2")
    assert kept["layers"][0]["macs"] == conv2.macs and kept["layers"][1]["macs"] == 10 * 512
    assert all(r["est_cycles"] > r["macs"] for r in kept["layers"])  # several instructions per float MAC
    assert kept["weight_bytes"] == 4 * (8 * 16 * 9 + 10 * 512 + 10)  # float32 weights and bias
    t, t0 = report["totals"], before["totals"]
    assert t["macs"] == t0["macs"] and t["macs_on_gemmini"] == t0["macs_on_gemmini"] - kept["macs"]
    rows = [r for r in report["layers"] if r["name"] in ("conv2", "fc") and r["call"] == "cpu:float_conv"]
    assert len(rows) == 2 and all(r["target"] == "cpu" and r["est_cycles"] for r in rows)
    assert any("kept float by --keep-float" in line for line in report["cpu_steps"])
    assert "## Layers kept float (--keep-float)" in report_markdown(report)
    assert before["kept_float"] == {"layers": [], "macs": 0, "est_cycles": 0, "weight_bytes": 0}


def test_instruction_estimate_grows_with_the_work():
    """FloatConv.instructions: more MACs, outputs or depthwise taps cost more; padding taps cost nothing."""
    def site(x_shape, w_shape, y_shape):
        op = lambda tid, s, dt: cpu.Operand(tid, s, dt, s[-1])  # noqa: E731
        return cpu.CallSite((op("x", x_shape, "int8"), op("w", w_shape, "float32")), (op("y", y_shape, "int8"),))
    conv = cpu.FloatConv(cpu.Window((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (8, 8)), 1, 0.1, 0.1)
    dense = conv.instructions(site((1, 8, 8, 16), (3, 3, 16, 32), (1, 8, 8, 32)))
    assert conv.macs(site((1, 8, 8, 16), (3, 3, 16, 32), (1, 8, 8, 32))) == 64 * 32 * 9 * 16
    assert conv.instructions(site((1, 8, 8, 16), (3, 3, 16, 64), (1, 8, 8, 64))) > 1.9 * dense
    inside = 4.75 * (8 * 8 * 9 - 4 * 8 * 3 + 4) * 16 * 32  # taps in the padding are skipped
    assert dense == pytest.approx(inside + 64 * 32 * 29.69 + 64 * 529.63)


def test_instruction_constants_still_describe_the_runtime_kernel(tmp_path):
    """The cost constants were fitted on o2g_float_conv on Spike: a changed kernel must re-run the fit
    (python scripts/bench_spike.py --float-conv) and update cpu/float_layers.py."""
    missing = [t for t in ("riscv64-unknown-elf-gcc", "spike", "dtc") if shutil.which(t) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Spike measurement; missing: {', '.join(missing)}")
        pytest.skip(f"needs {', '.join(missing)}")
    from tests.runtime.test_cpu_kernels import B
    geometries = [B.FLOAT_CONV_FIT[i] for i in (1, 3, 5, 7, 9, 12)]  # dense, 1x1, strided, depthwise, matmuls
    op = lambda tid, s, dt: cpu.Operand(tid, s, dt, s[-1])  # noqa: E731
    for g, (case, instret) in zip(geometries, B.float_conv_counts(tmp_path, "spike", "riscv64-unknown-elf-",
                                                                  geometries)):
        n, h, w, c, oc, k, s, p, groups = g
        out = ((h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)
        params = cpu.FloatConv(cpu.Window((k, k), (s, s), (p,) * 4, (1, 1), out), groups, 0.02, 0.02)
        site = cpu.CallSite((op("x", (n, h, w, c), "int8"), op("w", (k, k, c // groups, oc), "float32")),
                            (op("y", (n, *out, oc), "int8"),))
        assert case.expected.size == n * out[0] * out[1] * oc
        assert params.instructions(site) == pytest.approx(instret, rel=0.35 if n * out[0] * out[1] == 1 else 0.08), \
            (case.name, instret, "re-run python scripts/bench_spike.py --float-conv, update cpu/float_layers.py")


def test_numpy_kernel_is_a_float_conv_of_the_dequantized_input():
    """cpu.FloatConv.run against an independent float64 conv (explicit windows, one einsum per tap and group),
    with strides, asymmetric padding, dilation, 2 groups, a bias and ReLU; quantized at the output scale."""
    r = rng(3)
    x = r.integers(-128, 128, (2, 7, 6, 6)).astype(np.int8)
    w = (r.standard_normal((3, 2, 3, 8)) * 0.2).astype(np.float32)  # [KH][KW][C/groups][OC], 2 groups
    b = (r.standard_normal(8) * 0.1).astype(np.float32)
    win = cpu.Window((3, 2), (2, 1), (1, 0, 1, 1), (1, 2), (4, 5))
    [got] = cpu.FloatConv(win, 2, 0.03, 0.05, True).run([x, w, b], [(2, 4, 5, 8)])
    xf = np.pad((x.astype(np.float32) * np.float32(0.03)).astype(np.float64), ((0, 0), (1, 1), (0, 1), (0, 0)))
    ref = np.zeros((2, 4, 5, 8))
    for kh in range(3):
        for kw in range(2):
            patch = xf[:, kh:kh + 7:2, 2 * kw:2 * kw + 5, :]  # rows oh*2 + kh, cols ow + 2*kw
            for g in range(2):
                ref[..., 4 * g:4 * g + 4] += np.einsum("nhwi,io->nhwo", patch[..., 3 * g:3 * g + 3],
                                                       w[kh, kw, :, 4 * g:4 * g + 4].astype(np.float64))
    want = quantize((ref + b).astype(np.float32), 0.05, 0)
    np.testing.assert_array_equal(got, want)
    assert got.min() == 0 and got.max() > 0  # the ReLU clipped some


def test_c_program_computes_the_emulator_bytes(tmp_path):
    """The emitted C (host build of the gemmini API, o2g_float_conv) against the emulator, byte for byte."""
    if shutil.which("make") is None or shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("needs make and a C compiler")
    model = outlier_model()
    compiled = o2g.compile(model, calib=random_dataset(model, 4, 0), keep_float=["conv1", "fc"])
    c_dir = write_c(compiled.plan, tmp_path / "c", *selftest_case(compiled.plan, None), "test_keep_float")
    hostc.build(c_dir, ("model",))
    data = random_dataset(model, 4, 5)
    for i in range(data.num_samples):
        sample = data.sample(i)
        got, want = hostc.run(c_dir, compiled.plan, sample), Emulator(compiled.plan).run(sample)
        for tid in compiled.plan.outputs:
            np.testing.assert_array_equal(got[tid], want[tid].reshape(got[tid].shape))


# --- wrong names and ops: one usage error --------------------------------------------------------------------

def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "onnx2gemmini.cli", *map(str, args)], capture_output=True,
                          text=True)


def assert_one_error_line(proc, code, *fragments):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("keep_float") / "outlier.onnx"
    onnx.save(outlier_model(), path)
    return path


@pytest.mark.parametrize("keep, fragments", [
    ("conv", ["no layer named 'conv'", "did you mean", "'conv1'"]),
    ("relu1", ["'relu1' (Relu) was fused into 'conv1'", "keep 'conv1' float"]),
    ("flatten", ["layer 'flatten' is a Flatten", "only Conv, ConvTranspose, Gemm and MatMul"]),
    ("conv1,,fc", ["empty layer name"]),
], ids=["unknown", "fused_relu", "unsupported_op", "empty"])
@pytest.mark.parametrize("command", ["compile", "diff", "inspect"])
def test_bad_layers_are_one_usage_error_and_write_nothing(model_file, tmp_path, command, keep, fragments):
    out = tmp_path / "out"
    extra = ["-o", out] if command == "compile" else []
    proc = run_cli(command, model_file, "--keep-float", keep, *extra)
    assert_one_error_line(proc, 2, "--keep-float", *fragments)
    assert not out.exists() and proc.stdout == ""


def test_two_activations_matmul_cannot_be_kept():
    model = infer_outputs([helper.make_node("MatMul", ["a", "b"], ["y"], name="bmm")], {"a": [2, 3], "b": [3, 4]})
    with pytest.raises(UsageError, match="'bmm' \\(MatMul\\) multiplies two activations"):
        o2g.compile(model, keep_float=["bmm"])


@pytest.mark.parametrize("value", [123, [1, 2], ["conv1", None]])
def test_keep_float_of_the_wrong_type_is_a_usage_error(value):
    with pytest.raises(UsageError, match="--keep-float"):
        o2g.compile(outlier_model(), keep_float=value)


def test_cli_compile_and_diff_with_kept_layers(model_file, tmp_path):
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=random_dataset(outlier_model(), 8, 0).inputs["x"])
    out = tmp_path / "out"
    proc = run_cli(model_file, "--calib", calib, "-o", out, "--keep-float", "conv1", "--keep-float", "fc")
    assert proc.returncode == 0, proc.stderr
    assert "kept float on the CPU: conv1, fc" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    assert [r["name"] for r in report["kept_float"]["layers"]] == ["conv1", "fc"]
    assert "Layers kept float" in (out / "report.html").read_text()
    proc = run_cli("diff", model_file, "--calib", calib, "--keep-float", "conv1,fc", "--json", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["kept_float"] == ["conv1", "fc"] and result["verdict"]["passed"]
    proc = run_cli("inspect", model_file, "--calib", calib, "--keep-float", "fc")
    assert proc.returncode == 0 and "kept float by --keep-float" in proc.stdout, proc.stderr
