"""Depthwise convs: the estimate that sends them to tiled_conv_dw, and their report figures."""
import dataclasses

from onnx2gemmini.config import PRESETS
from onnx2gemmini.plan import ConvDw
from onnx2gemmini.tiling import step_costs
from onnx2gemmini.tiling_dw import CPU_CYCLES_PER_MAC, cpu_dw_cycles, dw_dram_bytes, gemmini_dw_cycles

STEP = ConvDw("dw", batch_size=1, in_row_dim=56, in_col_dim=56, channels=144, out_row_dim=56, out_col_dim=56,
              stride=1, padding=1, kernel_dim=3, input="x", weights="w", bias="b", output="y")


def test_gemmini_runs_depthwise_at_about_one_mac_per_cycle():
    cycles = gemmini_dw_cycles(STEP, PRESETS["default"])
    assert STEP.macs <= cycles <= 1.2 * STEP.macs
    assert cpu_dw_cycles(STEP) >= CPU_CYCLES_PER_MAC * STEP.macs > cycles


def test_dram_bytes_count_every_tensor_once():
    assert dw_dram_bytes(STEP) == 56 * 56 * 144 * 2 + 144 * 9 + 4 * 144
    pooled = dataclasses.replace(STEP, pool_size=2, pool_stride=2)
    assert dw_dram_bytes(pooled) == 56 * 56 * 144 + 28 * 28 * 144 + 144 * 9 + 4 * 144


def test_report_figures_are_estimates_against_themselves():
    c = step_costs(STEP, PRESETS["default"])
    assert c["dram_bytes"] == c["baseline_dram_bytes"] and c["est_cycles"] == c["baseline_est_cycles"]
    assert 0 < c["utilization"] < 0.01 and c["cpu_est_cycles"] > c["est_cycles"]
