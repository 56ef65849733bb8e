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
from onnx2gemmini.tiling.dw import (CPU_INSTRUCTIONS_PER_MAC, CPU_INSTRUCTIONS_PER_OUTPUT,
                                    CPU_INSTRUCTIONS_PER_PIXEL, cpu_dw_cycles, dw_dram_bytes, gemmini_dw_cycles,
                                    taps_inside, valid_macs)

STEP = ConvDw("dw", batch_size=1, in_row_dim=56, in_col_dim=56, channels=144, out_row_dim=56, out_col_dim=56,
              stride=1, padding=1, kernel_dim=3, input="x", weights="w", bias="b", output="y")


def test_gemmini_runs_depthwise_at_about_one_kernel_row_per_cycle():
    """One weight block per kernel row (its taps packed in a scratchpad row): kernel_dim MACs a cycle."""
    cycles = gemmini_dw_cycles(STEP, PRESETS["default"])
    assert STEP.macs / STEP.kernel_dim <= cycles <= 1.2 * STEP.macs / STEP.kernel_dim
    assert cpu_dw_cycles(STEP) >= CPU_INSTRUCTIONS_PER_MAC * valid_macs(STEP) > cycles


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
    """The constants were measured on o2g_dwconv: if the kernel changes, re-run the script."""
    missing = [t for t in ("riscv64-unknown-elf-gcc", "spike", "dtc") if shutil.which(t) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Spike measurement; missing: {', '.join(missing)}")
        pytest.skip(f"needs {', '.join(missing)} (gcc-riscv64-unknown-elf, picolibc-riscv64-unknown-elf, "
                    "device-tree-compiler, pip spike)")
    script = _measure_script()
    rows = script.run(script.build(tmp_path, "riscv64-unknown-elf-"), "spike")
    per_mac, per_output, per_pixel = script.fit(rows)
    hint = "o2g_dwconv (or the toolchain) changed: run python scripts/measure_cpu_kernels.py and update onnx2gemmini/tiling/dw.py"
    assert per_mac == pytest.approx(CPU_INSTRUCTIONS_PER_MAC, rel=0.02), hint
    assert per_output == pytest.approx(CPU_INSTRUCTIONS_PER_OUTPUT, rel=0.02), hint
    assert per_pixel == pytest.approx(CPU_INSTRUCTIONS_PER_PIXEL, rel=0.02), hint
    for r in rows:
        step = ConvDw("m", in_row_dim=r["h"], in_col_dim=r["h"], channels=r["c"], out_row_dim=r["out"],
                      out_col_dim=r["out"], stride=r["s"], padding=r["k"] // 2, kernel_dim=r["k"])
        assert cpu_dw_cycles(step) == pytest.approx(r["instret"], rel=0.03), (r, hint)
