"""Softmax on Gemmini's normalizer (normalizer.py, passes/fuse_softmax.py): the integer arithmetic against the
functional model's values, the host gemmini.h's C transcription, the float softmax, and the whole path
through the compiler, diff and the generated C program."""
from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini import normalizer
from onnx2gemmini.config import PRESETS
from onnx2gemmini.errors import UnsupportedError
from onnx2gemmini.numerics import mvin_scale
from onnx2gemmini.compare import run_diff
from onnx2gemmini.output import write_outputs
from onnx2gemmini.plan import CpuOp, Matmul
from onnx2gemmini.run import hostc
from onnx2gemmini.run.emulator import Emulator
from tests.helpers import compile_and_diff, infer_outputs, random_dataset, rng

HOST_HEADER_DIR = Path(o2g.__file__).parent / "runtime" / "host"
IBERT = dataclasses.replace(PRESETS["ibert"], name="ibert-softmax", normalizer_softmax=True)


# --- the integer arithmetic ------------------------------------------------------------------------

def test_constants_and_exps_are_the_functional_models():
    """gemmini-rocc-tests' softmax test scale (bert_scale 0.05) gives qb 27, qc 383, qln2 13, qln2_inv 5041,
    and libgemmini's apply_iexp maps these q to these values (the shift count taken mod 32 past z = 31): the
    values gemmini.cc's apply_iexp, compiled for x86-64, returns for them."""
    k = normalizer.softmax_constants(0.05)
    assert (k.qb, k.qc, k.qln2, k.qln2_inv) == (27, 383, 13, 5041)
    q = np.array([0, -13, -100, -416, -420, -440, -850])
    assert normalizer.iexp(q, k).tolist() == [1112, 579, 5, 0, 912, 319, 433]


def test_without_the_mvin_factor_a_row_sum_wraps():
    """At an attention product's real scale (8e-5) one row of 128 equal scores sums past 2^31: the guard
    refuses it, and the wrapped sum really gives a wrong softmax; the chosen factor makes it fit."""
    s, j, k = 8.26e-5, 128, 32
    assert not normalizer.softmax_fits(s, j, k * 128 * 128)
    flat = np.zeros((1, j), np.int64)
    assert normalizer.softmax_rows(flat, s, 1.0).max() != round(127 / j)  # exact: 1 everywhere
    bert, factor = normalizer.softmax_call(s, j, k)
    assert factor < 1 and normalizer.softmax_fits(bert, j, k * 128 * 128)
    assert (normalizer.softmax_rows(flat, bert, 1.0) == round(127 / j)).all()


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(2, 300), st.floats(5e-5, 2e-3), st.floats(0.05, 1.0), st.integers(0, 2**31 - 1))
def test_within_the_stated_lsb_of_an_exact_softmax(rows, j, scale, spread, seed):
    """Every probability within softmax_lsb(S) of 127 * softmax(S * acc) rounded, for accumulators of a K = 32
    product whose rows span up to the range fits_scores accepts (`spread` of it)."""
    bert, _ = normalizer.softmax_call(scale, j, 32)
    half = spread * normalizer.score_range(bert) / (2 * normalizer.SCORE_HEADROOM) / bert
    acc = np.random.default_rng(seed).integers(-int(half), int(half) + 1, (rows, j))
    assert normalizer.fits_scores(bert, float(np.abs(acc).max()) * bert)
    ours = normalizer.softmax_rows(acc, bert, 1.0).astype(np.int64)
    x = acc * np.float64(np.float32(bert))
    exact = np.exp(x - x.max(-1, keepdims=True))
    exact = np.rint(127 * exact / exact.sum(-1, keepdims=True))
    assert np.abs(ours - exact).max() <= normalizer.softmax_lsb(bert)


def test_past_the_score_range_an_exp_wraps():
    """Why fits_scores exists: a value 32 ln 2 below its row's largest gets libgemmini's wrapped shift."""
    bert, _ = normalizer.softmax_call(5e-4, 16, 32)
    far = int(1.05 * normalizer.score_range(bert) / bert)
    row = np.array([[0, -far] + [-far // 3] * 14])
    assert normalizer.softmax_rows(row, bert, 1.0)[0, 1] > 10  # exact: 0
    assert not normalizer.fits_scores(bert, far * bert / 2)


def test_a_coarse_scale_is_refused():
    """At the rocc test's 0.05 I-BERT's exp is 46% off (q steps of 0.05 around a 13-step ln 2)."""
    assert normalizer.exp_error(0.05) > normalizer.MAX_EXP_ERROR
    assert normalizer.softmax_call(0.05, 64, 16) is None
    assert normalizer.exp_error(5e-4) < 0.005


HOST_PROGRAM = r"""
#include "gemmini.h"
int main(void) {
    static elem_t A[%(I)d * %(K)d] = {%(A)s}, B[%(K)d * %(J)d] = {%(B)s}, C[%(I)d * %(J)d];
    tiled_matmul_auto(%(I)d, %(J)d, %(K)d, A, B, NULL, C, %(K)d, %(J)d, %(J)d, %(J)d, %(fa)s, %(fb)s,
                      MVIN_SCALE_IDENTITY, SOFTMAX, %(scale)s, %(bert)s, false, false, false, false, false, 0, WS);
    for (int i = 0; i < %(I)d * %(J)d; i++) printf("%%d\n", C[i]);
    return 0;
}
"""


@pytest.mark.parametrize("shape,amp,bert,scale,factor", [
    ((9, 66, 30), 3, 0.05, 1.0, 1.0), ((7, 128, 32), 127, 6e-4, 1.0, 1.0), ((5, 40, 64), 127, 2e-3, 1.0, 0.42),
    ((4, 150, 16), 100, 1e-3, 0.5, 0.7)])
def test_the_host_gemmini_h_computes_the_same(tmp_path, shape, amp, bert, scale, factor):
    """The C transcription in runtime/host/gemmini.h (what the tests' native programs run) against this one."""
    from onnx2gemmini.emit.c_kernels import c_float
    i, j, k = shape
    r = np.random.default_rng(i * j)
    a, b = r.integers(-amp, amp + 1, (i, k)), r.integers(-amp, amp + 1, (k, j))
    source = HOST_PROGRAM % {"I": i, "J": j, "K": k, "A": ",".join(map(str, a.ravel())),
                             "B": ",".join(map(str, b.ravel())), "fa": c_float(factor), "fb": c_float(factor),
                             "scale": c_float(scale), "bert": c_float(bert)}
    (tmp_path / "t.c").write_text(source)
    subprocess.run(["cc", "-O2", "-I", str(HOST_HEADER_DIR), "t.c", "-o", "t", "-lm"], cwd=tmp_path,
                   check=True)
    got = np.array(subprocess.run(["./t"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split(),
                   int).reshape(i, j)
    acc = mvin_scale(a, factor).astype(np.int64) @ mvin_scale(b, factor).astype(np.int64)
    np.testing.assert_array_equal(got, normalizer.softmax_rows(acc, float(np.float32(bert)), scale))


# --- through the compiler ----------------------------------------------------------------------------

def attention(masked=False, scaled=True, wide=1.0, opset=17, biased=False):
    """x [2, 24, 16] -> q, k projections -> softmax(q k^T [/ 4] [+ a constant per batch, Swin's relative
    position bias]) x -> y: two batches, two softmax calls; `wide` multiplies the query weights (and so the
    scores' span)."""
    r = rng(21)
    inits = {"wq": wide * r.normal(0, 0.3, (16, 16)).astype(np.float32),
             "wk": r.normal(0, 0.3, (16, 16)).astype(np.float32), "d": np.float32(4.0)}
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"], name="scores")]
    last = "scores"
    if scaled:
        nodes.append(helper.make_node("Div", ["scores", "d"], ["scaled"], name="scale"))
        last = "scaled"
    if biased:
        inits["relative"] = r.normal(0, 1.0, (2, 24, 24)).astype(np.float32)
        nodes.append(helper.make_node("Add", [last, "relative"], ["biased"], name="bias"))
        last = "biased"
    if masked:
        inits["mask"] = np.where(np.tri(24, dtype=bool), 0, -1e9).astype(np.float32)
        nodes.append(helper.make_node("Add", [last, "mask"], ["masked"]))
        last = "masked"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1, name="softmax"),
              helper.make_node("MatMul", ["p", "x"], ["y"])]
    return infer_outputs(nodes, {"x": [2, 24, 16]}, inits, opset=opset)


def softmax_steps(compiled):
    return [s for s in compiled.plan.steps if isinstance(s, Matmul) and s.act == normalizer.SOFTMAX]


@pytest.mark.parametrize("scaled", [True, False])
def test_attention_softmax_runs_on_the_normalizer_and_passes_diff(scaled):
    compiled, result = compile_and_diff(attention(scaled=scaled), samples=6, config=IBERT)
    steps = softmax_steps(compiled)
    assert len(steps) == 2 and not any(isinstance(s, CpuOp) and "Softmax" in type(s.params).__name__
                                       for s in compiled.plan.steps)
    assert all(s.tiles["tile_J"] == 2 for s in steps)  # 24 columns: the whole row in one tile
    layer = next(r for r in result["layers"] if r["name"] == "scores")
    assert 0 < layer["tolerance_lsb"] <= 3 and layer["max_lsb_vs_ort_qdq"] <= layer["tolerance_lsb"]
    assert result["verdict"]["passed"], result["verdict"]


def test_a_constant_added_to_the_scores_becomes_the_int32_bias():
    """Swin's relative position bias: one D per batch in whole units of bert_scale, not repeated."""
    compiled, result = compile_and_diff(attention(biased=True), samples=6, config=IBERT)
    steps = softmax_steps(compiled)
    assert len(steps) == 2 and all(s.D and not s.repeating_bias for s in steps) and steps[0].D != steps[1].D
    bias = compiled.graph.initializers["relative"]
    d = compiled.plan.constants[steps[1].D].astype(np.float64) * np.float32(steps[1].bert_scale)
    assert np.abs(d - bias[1]).max() <= steps[1].bert_scale / 2 * 1.001
    layer = next(r for r in result["layers"] if r["name"] == "scores")
    assert layer["max_lsb_vs_ort_qdq"] <= layer["tolerance_lsb"] <= 3 and result["verdict"]["passed"]


def test_an_opset_11_softmax_arrives_flattened_and_is_fused():
    """Before opset 13 a softmax over the last of 3 axes is read as Flatten -> Softmax -> Reshape."""
    compiled, result = compile_and_diff(attention(opset=11), samples=6, config=IBERT)
    assert len(softmax_steps(compiled)) == 2 and result["verdict"]["passed"], result["verdict"]


def test_scores_too_wide_stay_on_the_cpu_and_the_compile_says_why():
    """Scores spanning more than the normalizer's exp reaches (32 ln 2, less headroom): the CPU form, and a
    warning naming the softmax."""
    compiled, result = compile_and_diff(attention(wide=12.0), samples=6, config=IBERT)
    assert not softmax_steps(compiled) and result["verdict"]["passed"]
    assert any("softmax 'softmax' stays on the CPU: its scores span" in w for w in compiled.warnings)


@pytest.mark.parametrize("biased,off", [(False, 0.95), (True, 1.02), (True, 1.03)])
def test_a_wrong_constant_fails_diff(biased, off):
    """Negative control: bert_scale 5% low (2% or 3% high with a bias) is a softmax of slightly different scores.
    The plain case stays within the largest difference allowed (1 LSB of 2) and is caught by the share of values
    that may differ (softmax_mismatch_rate: 590 differ, 416 allowed, measured). The tolerance is the golden's,
    from the quantization table: judged at the broken step's own bert_scale (I-BERT's exp within 3.07% of exp
    at 1.03x, 0.59% at the right one) the 3% error passed with 762 values differing, 2,448 allowed."""
    model = attention(biased=biased)
    compiled = o2g.compile(model, calib=random_dataset(model, 6, 0), config=IBERT)
    intact = run_diff(compiled, random_dataset(model, 6, 1))
    assert intact["verdict"]["passed"]
    steps = [dataclasses.replace(s, bert_scale=s.bert_scale * off) if s in softmax_steps(compiled) else s
             for s in compiled.plan.steps]
    broken = dataclasses.replace(compiled, plan=dataclasses.replace(compiled.plan, steps=steps))
    result = run_diff(broken, random_dataset(model, 6, 1))
    assert not result["verdict"]["passed"]
    allowed = [(layer["tolerance_lsb"], layer["allowed_mismatches"]) for layer in intact["layers"]]
    assert [(layer["tolerance_lsb"], layer["allowed_mismatches"]) for layer in result["layers"]] == allowed


def test_the_golden_reads_the_operands_at_the_plans_mvin_factor():
    """The pass, the lowering and the golden derive the mvin factor from one function (with the bias)."""
    from onnx import numpy_helper
    from onnx2gemmini.golden import build_qdq
    compiled = o2g.compile(attention(biased=True), calib=random_dataset(attention(), 6, 0), config=IBERT)
    factor = softmax_steps(compiled)[0].A_scale_factor
    inits = {t.name: numpy_helper.to_array(t) for t in build_qdq(compiled.graph, compiled.quant).graph.initializer}
    assert factor < 1 and float(inits["scores__mvin_factor"]) == np.float32(factor)


def test_off_by_default_and_never_with_a_mask():
    compiled, _ = compile_and_diff(attention(), samples=4, config="ibert")
    assert not softmax_steps(compiled)  # the ibert preset keeps the CPU form unless asked
    compiled, result = compile_and_diff(attention(masked=True), samples=4, config=IBERT)
    assert not softmax_steps(compiled) and result["verdict"]["passed"]
    compiled, _ = compile_and_diff(attention(), samples=4, config=dataclasses.replace(IBERT, has_normalizations=False))
    assert not softmax_steps(compiled)


@pytest.mark.parametrize("biased", [False, True])
def test_the_c_program_matches_the_emulator(tmp_path, biased):
    """The generated C, built natively against the host gemmini.h, prints PASS (exact) with CHECK_LAYERS=1 and
    clears the SOFTMAX read-out after each call (Gemmini's functional model keeps it otherwise)."""
    model = attention(biased=biased)
    compiled = o2g.compile(model, calib=random_dataset(model, 6, 0), config=IBERT)
    write_outputs(compiled, tmp_path / "out", emit=("c",))
    c_dir = tmp_path / "out" / "c"
    source = (c_dir / "model.c").read_text()
    assert source.count("SOFTMAX, 0x1p+0f") == 2 == source.count("clears the SOFTMAX read-out")
    hostc.build(c_dir, ("model-selftest",), make_vars={"CHECK_LAYERS": "1"})
    text = subprocess.run(["./model-selftest"], cwd=c_dir, capture_output=True, text=True, timeout=300).stdout
    assert "PASS (exact)" in text, text[-1500:]


def test_the_report_says_which_steps_run_on_the_normalizer():
    from onnx2gemmini.emit.report import layer_rows
    compiled = o2g.compile(attention(), calib=random_dataset(attention(), 4, 0), config=IBERT)
    rows = layer_rows(compiled.plan, {n.name: n.op_type for n in compiled.graph.nodes})
    noted = [r for r in rows if "the softmax on Gemmini's normalizer" in r["reason"]]
    assert len(noted) == 2 and all(r["target"] == "gemmini" and r["name"] == "scores" for r in noted)


def test_the_cost_model_counts_the_statistics_passes():
    """Two more accumulator passes per row (MAX, SUM_EXP): 2 I ceil(J / DIM) estimated cycles on top."""
    from onnx2gemmini.tiling import cost
    compiled = o2g.compile(attention(), calib=random_dataset(attention(), 4, 0), config=IBERT)
    step = softmax_steps(compiled)[0]
    plain = dataclasses.replace(step, act=0, bert_scale=0.0)
    extra = cost(step, step.tiles, compiled.config)["est_cycles"] - cost(plain, step.tiles, compiled.config)["est_cycles"]
    assert extra == 2 * step.I * -(-step.J // compiled.config.dim)


def test_the_emulator_runs_it_from_the_accumulators():
    """The emulator's step equals softmax_rows of the int32 product of the mvin-scaled operands."""
    compiled = o2g.compile(attention(), calib=random_dataset(attention(), 4, 0), config=IBERT)
    step = softmax_steps(compiled)[0]
    emu = Emulator(compiled.plan)
    buffers = emu.run({"x": rng(3).normal(size=(2, 24, 16)).astype(np.float32)}, keep=True)
    a = mvin_scale(emu.get(buffers, step.A).reshape(step.I, step.K), step.A_scale_factor).astype(np.int64)
    b = mvin_scale(emu.get(buffers, step.B).reshape(step.K, step.J), step.B_scale_factor).astype(np.int64)
    want = normalizer.softmax_rows(a @ b, step.bert_scale, step.scale)
    np.testing.assert_array_equal(emu.get(buffers, step.C).reshape(step.I, step.J), want)
