"""CPU steps in the cost model: every kernel has a measured cost, reports add it to Gemmini's cycles at the
config's CPI, and (with Spike) the table still says what the runtime's kernels retire."""
import dataclasses
import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

import onnx2gemmini as o2g
from onnx2gemmini.config import PRESETS, load_config
from onnx2gemmini.cpu import KERNELS, CpuKernel, costs
from onnx2gemmini.cpu.cost_table import COSTS
from onnx2gemmini.errors import UsageError
from onnx2gemmini.plan import CpuOp
from onnx2gemmini.tiling import attach_costs

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "models" / "digits_cnn.onnx"


def test_every_cpu_kernel_states_a_cost():
    for op, cls in KERNELS.items():
        assert cls.cost_parts is not CpuKernel.cost_parts or cls.instructions is not CpuKernel.instructions, op


def test_every_path_the_term_functions_name_is_in_the_table():
    keys = {costs.quantize_terms(10)[0], costs.quantize_nhwc_terms(1, 3, 4, 4)[0], costs.lut_terms(5)[0],
            costs.transpose_terms((1, 4, 4, 8), (0, 3, 1, 2))[0], costs.transpose_terms((2, 3, 4), (1, 0, 2))[0],
            costs.gather_terms(1, 1, 3)[0], costs.gather_terms(1, 8, 3)[0],
            costs.remap_terms((1, 4, 4), (1, 4, 2), [0, 0, 1, 2, 3, 0, 1])[0],
            costs.remap_terms((1, 4, 4), (1, 4, 4), [0, 0, 1, 2, 3, 3, 2, 1, 0])[0],
            costs.dwconv_terms(1, 8, 8, 16, 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (8, 8))[0],
            costs.softmax_terms(1, 10, 1)[0], costs.softmax_terms(1, 10, 4)[0], costs.layernorm_terms(4, 8)[0],
            costs.lrn_terms(1, 8, 4, 3)[0], costs.affine_terms(400, 8, 1)[0], costs.affine_terms(1, 8, 4)[0],
            costs.resize_terms("linear", (1, 2, 2, 1), (1, 4, 4, 1))[0],
            costs.resize_terms("cubic", (1, 2, 2, 1), (1, 4, 4, 1))[0],
            costs.recurrent_terms("lstm", 2, 1, 4, 1)[0], costs.recurrent_terms("gru", 2, 1, 4, 1)[0]}
    keys |= {costs.clip_terms(n, lo, hi)[0] for n in (10, 100) for lo, hi in
             ((0, 127), (0, 6), (3, 127), (3, 60), (-128, 127), (-20, 100))}
    keys |= {costs.concat_terms(o, 4, 1, 8, same)[0] for o in (2, 200) for same in (True, False)}
    keys |= {costs.window_terms(op, 1, 8, (3, 3), (4, 4))[0] for op in ("im2col", "maxpool", "avgpool")}
    keys |= {costs.reduce_terms(k, 2, 8, inner)[0] for k in ("sum", "mean", "max", "min", "l2") for inner in (1, 4)}
    for fn in ("add", "sub", "mul", "div", "max", "min", "prelu"):
        for a_shape, b_shape in (((4, 8), (4, 8)), ((4, 8), (1, 8)), ((4, 8), (4, 1)), ((4, 1), (1, 8)),
                                 ((2, 600), (2, 1))):
            out = tuple(max(x, y) for x, y in zip(a_shape, b_shape))
            for a_float in (False, True):
                for b_float in (False, True):
                    sa, sb = (costs_strides(s, out) for s in (a_shape, b_shape))
                    keys |= {k for k, _ in costs.binary_terms(fn, out, sa, sb, a_float, b_float, True)}
    missing = sorted(k for k in keys if k not in COSTS)
    assert not missing, f"no measured cost for {missing}: python scripts/measure_cpu_kernels.py --write"
    assert all(c >= 0 for coef in COSTS.values() for c in coef.values())


def costs_strides(shape, out):
    from onnx2gemmini.cpu.float_ops import broadcast_strides
    return broadcast_strides(shape, out)


def test_binary_follows_the_c_loops():
    """A squeeze-excite multiply walks rows of C channels against a per-channel operand; a run of 512 int8
    values against one value is a table per row; a fused ReLU adds the clip pass."""
    [(key, terms)] = costs.binary_terms("mul", (1, 14, 14, 64), (12544, 896, 64, 1), (0, 0, 0, 1), False, False, False)
    assert key == "binary_mul_QQ" and terms == {"call": 1, "elem": 12544, "row": 196}
    [(key, terms)] = costs.binary_terms("mul", (1, 2, 600), (1200, 600, 1), (2, 1, 0), False, True, False)
    assert key == "binary_table" and terms["row"] == 2
    parts = costs.binary_terms("add", (4, 8), (8, 1), (8, 1), False, False, True)
    assert [k for k, _ in parts] == ["binary_add_QQ", "clip_swar"]


def test_cycles_are_instructions_times_cpi_at_least_one():
    assert costs.cycles(0.2, 1.21) == 1
    assert costs.cycles(1000, 1.21) == 1210
    assert costs.instructions("lut", {"call": 1, "elem": 100}) == pytest.approx(
        COSTS["lut"]["call"] + 100 * COSTS["lut"]["elem"])


def test_cpi_is_a_config_field():
    assert PRESETS["default"].cpu_cpi == 1.21
    assert all(c.cpu_cpi == 1.21 for c in PRESETS.values())
    with pytest.raises(UsageError, match="cpu_cpi"):
        dataclasses.replace(PRESETS["default"], cpu_cpi=0.0).validate()


def test_cpi_from_a_json_config_accepts_an_integer(tmp_path):
    path = tmp_path / "slow.json"
    path.write_text(json.dumps({"cpu_cpi": 2}))
    assert load_config(path).cpu_cpi == 2.0
    path.write_text(json.dumps({"cpu_cpi": "fast"}))
    with pytest.raises(UsageError, match="cpu_cpi"):
        load_config(path)


@pytest.fixture(scope="module")
def digits():
    return o2g.compile(str(DIGITS), calib=str(ROOT / "models" / "digits_calib.npz"))


def test_report_adds_the_cpu_steps_to_gemminis_cycles(digits):
    from onnx2gemmini.emit.report import build_report, report_markdown
    report = build_report(digits, digits.timing)
    rows, t = report["layers"], report["totals"]
    cpu = [r for r in rows if r["target"] == "cpu"]
    assert cpu and all(r["est_cycles"] > 0 for r in cpu)
    assert t["est_cpu_cycles"] == sum(r["est_cycles"] for r in cpu)
    assert t["est_gemmini_cycles"] == sum(r["est_cycles"] for r in rows if r["target"] == "gemmini")
    assert t["est_cycles"] == t["est_gemmini_cycles"] + t["est_cpu_cycles"]
    assert t["utilization"] == pytest.approx(t["ideal_cycles"] / t["est_cycles"])
    assert t["gemmini_utilization"] == pytest.approx(t["ideal_cycles"] / t["est_gemmini_cycles"])
    assert t["cpu_cpi"] == 1.21
    assert "the CPU steps" in report_markdown(report)


def test_cpu_cycles_scale_with_the_configs_cpi(digits):
    plan = digits.plan
    slow = attach_costs(dataclasses.replace(plan, config=dataclasses.replace(plan.config, cpu_cpi=3.0)))
    for step, ours, theirs in zip(plan.steps, plan.costs, slow.costs):
        if isinstance(step, CpuOp):
            assert ours["cpu_instructions"] == theirs["cpu_instructions"] > 0
            assert theirs["est_cycles"] == pytest.approx(3.0 * ours["cpu_instructions"], abs=3)
        else:
            assert ours == theirs


def _script(name):
    path = ROOT / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _needs_spike():
    missing = [t for t in ("riscv64-unknown-elf-gcc", "spike", "dtc") if shutil.which(t) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Spike measurement; missing: {', '.join(missing)}")
        pytest.skip(f"needs {', '.join(missing)} (gcc-riscv64-unknown-elf, picolibc-riscv64-unknown-elf, "
                    "device-tree-compiler, pip spike)")


KEYS = ("quantize", "lut", "binary_mul_QQ", "binary_table", "layernorm", "softmax", "concat_table", "transpose_copy",
        "clip_swar", "lstm")


def test_the_table_is_what_spike_measures(tmp_path):
    """A few kernels re-measured on Spike: the table's estimate of every measured call within 10%, and a re-fit
    within 2% of each per-element (row, mac) coefficient (or 1 instruction) and within 15% or 40 instructions
    of the per-call one (the driver's own argument set-up around each call moves with the other calls
    built into it). A runtime change that moves a cost fails here: python scripts/measure_cpu_kernels.py --write."""
    _needs_spike()
    script = _script("measure_cpu_kernels")
    measured = script.measure_table(tmp_path, "spike", "riscv64-unknown-elf-", keys=set(KEYS))
    assert {m[0] for m in measured} == set(KEYS)
    hint = "the runtime's kernels changed: python scripts/measure_cpu_kernels.py --write"
    for key, name, n, est, err in script.table_errors(measured, COSTS):
        assert abs(err) <= 0.10, (key, name, n, est, hint)
    fitted = script.fit_table(measured)
    for key in KEYS:
        for term, value in COSTS[key].items():
            rel, absolute = (0.15, 40.0) if term == "call" else (0.02, 1.0)
            assert fitted[key][term] == pytest.approx(value, rel=rel, abs=absolute), (key, term, hint)
