"""Depthwise convs: the estimate that sends them to tiled_conv_dw, and their report figures."""
import dataclasses
import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from onnx2gemmini.config import PRESETS
from onnx2gemmini.plan import ConvDw
from onnx2gemmini.tiling import step_costs
from onnx2gemmini.cpu.cost_table import COSTS
from onnx2gemmini.tiling.dw import (cpu_dw_cycles, cpu_dw_instructions, dw_dram_bytes, gemmini_dw_cycles,
                                    taps_inside, valid_macs)

DW = COSTS["dwconv"]

STEP = ConvDw("dw", batch_size=1, in_row_dim=56, in_col_dim=56, channels=144, out_row_dim=56, out_col_dim=56,
              stride=1, padding=1, kernel_dim=3, input="x", weights="w", bias="b", output="y")


def test_gemmini_runs_depthwise_at_about_one_kernel_row_per_cycle():
    """One weight block per kernel row (its taps packed in a scratchpad row): kernel_dim MACs a cycle."""
    cycles = gemmini_dw_cycles(STEP, PRESETS["default"])
    assert STEP.macs / STEP.kernel_dim <= cycles <= 1.2 * STEP.macs / STEP.kernel_dim
    assert cpu_dw_cycles(STEP, PRESETS["default"]) >= DW["mac"] * valid_macs(STEP) > cycles


def test_cpu_cycles_are_the_cost_tables_instructions_times_the_configs_cpi():
    config = PRESETS["default"]
    instructions = cpu_dw_instructions(STEP)
    assert instructions == pytest.approx(DW["call"] + DW["mac"] * valid_macs(STEP) + DW["elem"] * 56 * 56 * 144
                                         + DW["pixel"] * 56 * 56)
    assert cpu_dw_cycles(STEP, config) == -(-instructions * config.cpu_cpi // 1)
    slow = dataclasses.replace(config, cpu_cpi=2.5)
    assert cpu_dw_cycles(STEP, slow) == pytest.approx(2.5 * instructions, abs=1)


def test_taps_in_the_padding_are_not_counted():
    assert taps_inside(56, 3, 1, 1, 56) == 56 * 3 - 2          # the first and last windows lose one tap
    assert taps_inside(7, 5, 2, 2, 4) == 3 + 5 + 5 + 3             # windows at -2, 0, 2, 4 over 0..6
    assert valid_macs(STEP) == 144 * (56 * 3 - 2) ** 2 < STEP.macs
    unpadded = dataclasses.replace(STEP, padding=0, out_row_dim=54, out_col_dim=54)
    assert valid_macs(unpadded) == unpadded.macs


def test_dram_bytes_count_every_tensor_once():
    assert dw_dram_bytes(STEP) == 56 * 56 * 144 * 2 + 144 * 9 + 4 * 144
    pooled = dataclasses.replace(STEP, pool_size=2, pool_stride=2)
    assert dw_dram_bytes(pooled) == 56 * 56 * 144 + 28 * 28 * 144 + 144 * 9 + 4 * 144


def test_report_figures_are_estimates_against_themselves():
    c = step_costs(STEP, PRESETS["default"])
    assert c["dram_bytes"] == c["baseline_dram_bytes"] and c["est_cycles"] == c["baseline_est_cycles"]
    assert 0 < c["utilization"] < 1 / 64 and c["cpu_est_cycles"] > c["est_cycles"]


def _measure_script():
    path = Path(__file__).resolve().parents[1] / "scripts" / "measure_cpu_kernels.py"
    spec = importlib.util.spec_from_file_location("measure_cpu_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_constants_still_describe_the_runtime_kernel(tmp_path):
    """The cost table's dwconv entry was measured on o2g_dwconv: if the kernel changes, re-run the script."""
    missing = [t for t in ("riscv64-unknown-elf-gcc", "spike", "dtc") if shutil.which(t) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Spike measurement; missing: {', '.join(missing)}")
        pytest.skip(f"needs {', '.join(missing)} (gcc-riscv64-unknown-elf, picolibc-riscv64-unknown-elf, "
                    "device-tree-compiler, pip spike)")
    script = _measure_script()
    rows = script.run(script.build(tmp_path, "riscv64-unknown-elf-"), "spike")
    per_mac, per_output, per_pixel = script.fit(rows)
    hint = "o2g_dwconv (or the toolchain) changed: run python scripts/measure_cpu_kernels.py --write"
    assert per_mac == pytest.approx(DW["mac"], rel=0.02), hint          # the 3-term fit, no per-call constant
    assert per_output == pytest.approx(DW["elem"], rel=0.03), hint
    assert per_pixel == pytest.approx(DW["pixel"], rel=0.1), hint
    for r in rows:
        step = ConvDw("m", in_row_dim=r["h"], in_col_dim=r["h"], channels=r["c"], out_row_dim=r["out"],
                      out_col_dim=r["out"], stride=r["s"], padding=r["k"] // 2, kernel_dim=r["k"])
        assert cpu_dw_instructions(step) == pytest.approx(r["instret"], rel=0.03), (r, hint)
