"""Tiling: gemmini.h's heuristics reproduced (spec §3.1/§3.3 worked tables), chosen tiles always legal
and never costlier than the baseline, and the plan-level API (apply_tiles, plan_costs, report callback)."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onnx2gemmini import cpu
from onnx2gemmini.config import PRESETS, GemminiConfig
from onnx2gemmini.emit.report import layer_rows
from onnx2gemmini.plan import Conv, CpuOp, GlobalAverage, Matmul, Plan, Resadd, Tensor
from onnx2gemmini.tiling import (apply_tiles, baseline_conv_tiles, baseline_matmul_tiles, baseline_tiles,
                                 choose_conv_tiles, choose_matmul_tiles, conv_fits, conv_rows,
                                 attach_costs, matmul_fits, matmul_rows, plan_costs, step_costs)
from onnx2gemmini.tiling.baseline import baseline_global_average_tile, baseline_resadd_tiles
from onnx2gemmini.tiling.capacity import resadd_acc_rows
from onnx2gemmini.tiling.cost import conv_cost, conv_traffic, matmul_cost, matmul_traffic
from onnx2gemmini.tiling.geometry import ConvGeometry, ceil_div, distinct_tile_sizes
from onnx2gemmini.tiling.search import CYCLE_SLACK

# --- strategies (also used by tests/test_cost_model.py and tests/run/test_tiled.py) ----------------

# A deliberately tiny Gemmini (DIM 4, 1024 scratchpad rows, 64 accumulator rows) so that small, quickly
# executed problems still need many tiles.
TINY = GemminiConfig("tiny", dim=4, sp_kib=4, acc_kib=1).validate()
CONFIGS = dict(PRESETS, tiny=TINY)


@st.composite
def conv_geometries(draw, max_dim=12, max_channels=20, max_batch=2, pool=None):
    """A conv gemmini.h accepts: square kernel, padding < kernel, optional fused max-pool <= 3."""
    k = draw(st.integers(1, 4))
    stride = draw(st.integers(1, 3))
    pad = draw(st.integers(0, k - 1))
    rows = draw(st.integers(max(1, k - 2 * pad), max_dim))
    cols = draw(st.integers(max(1, k - 2 * pad), max_dim))
    out_r, out_c = (rows + 2 * pad - k) // stride + 1, (cols + 2 * pad - k) // stride + 1
    pooled = draw(st.booleans()) if pool is None else pool
    psz = pst = ppad = 0
    if pooled:
        psz = draw(st.integers(1, min(3, out_r, out_c)))
        pst = draw(st.integers(1, 3))
        ppad = draw(st.integers(0, psz - 1))
    return ConvGeometry(draw(st.integers(1, max_batch)), rows, cols, draw(st.integers(1, max_channels)),
                        draw(st.integers(1, max_channels)), out_r, out_c, stride, pad, k,
                        pool_size=psz, pool_stride=pst, pool_padding=ppad)


@st.composite
def large_conv_geometries(draw):
    """ResNet/MobileNet-sized convs (never executed, only tiled and costed)."""
    k = draw(st.sampled_from([1, 3, 5, 7]))
    stride = draw(st.sampled_from([1, 2]))
    pad = draw(st.sampled_from(sorted({0, k // 2})))
    size = draw(st.sampled_from([7, 14, 28, 56, 112, 224]))
    out = (size + 2 * pad - k) // stride + 1
    pooled = draw(st.booleans()) and out >= 3
    ch = st.sampled_from([3, 16, 32, 64, 100, 128, 256, 512, 1024, 2048])
    return ConvGeometry(draw(st.sampled_from([1, 2, 4])), size, size, draw(ch), draw(ch), out, out, stride,
                        pad, k, pool_size=3 if pooled else 0, pool_stride=2 if pooled else 0,
                        pool_padding=1 if pooled else 0)


def matmul_dims(max_dim=4096):
    return st.tuples(st.integers(1, max_dim), st.integers(1, max_dim), st.integers(1, max_dim))


@st.composite
def any_conv_tiles(draw, g: ConvGeometry):
    """Any tile within the problem bounds (the executor must be right even for tiles that do not fit)."""
    return tuple(draw(st.integers(1, m)) for m in g.max_tiles)


DEFAULT = PRESETS["default"]
ALL_CONFIGS = pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))


# --- spec §3.1 / §3.3 worked tables (default config) ---------------------------------------------

@pytest.mark.parametrize("dims, tiles, spad, acc", [
    ((4096, 4096, 4096), (5, 5, 51), 8160, 400),
    ((128, 256, 256), (5, 6, 16), 2816, 480),
    ((12544, 64, 147), (8, 4, 10), 1920, 512),
    ((3136, 128, 512), (5, 6, 32), 5632, 480),
    ((4, 1000, 2048), (1, 8, 56), 8064, 128),
], ids=["4096^3", "128x256x256", "im2col-7x7", "3136x128x512", "fc-batch4"])
def test_matmul_baseline_reproduces_spec_table(dims, tiles, spad, acc):
    assert baseline_matmul_tiles(*dims, DEFAULT) == tiles
    assert matmul_rows(tiles, DEFAULT) == (spad, acc)


SPEC_CONVS = {
    "resnet-conv1-pool": (ConvGeometry(4, 224, 224, 3, 64, 112, 112, 2, 3, 7, pool_size=3, pool_stride=2,
                                       pool_padding=1), (2, 2, 20, 16, 7, 7, 3), (3387, 504)),
    "3x3-64-56": (ConvGeometry(4, 56, 56, 64, 64, 56, 56, 1, 1, 3), (4, 8, 16, 16, 3, 3, 64), (3456, 512)),
    "3x3-512-7": (ConvGeometry(4, 7, 7, 512, 512, 7, 7, 1, 1, 3), (4, 7, 7, 32, 3, 3, 208), (7956, 392)),
}


@pytest.mark.parametrize("name", list(SPEC_CONVS))
def test_conv_baseline_reproduces_spec_table(name):
    geometry, tiles, rows = SPEC_CONVS[name]
    assert baseline_conv_tiles(geometry, DEFAULT) == tiles
    assert conv_rows(tiles, geometry, DEFAULT) == rows


def test_downsample_conv_counts_every_other_input_row():
    g = ConvGeometry(1, 56, 56, 256, 512, 28, 28, stride=2, padding=0, kernel_dim=1)
    assert g.downsample
    odd = dataclasses.replace(g, in_row_dim=55, in_col_dim=55)
    tiles = (1, 4, 28, 16, 1, 1, 64)
    assert not odd.downsample
    # irows = orows*2 + 1 - 1 = 8 -> 4 with downsample; icols 56 -> 28
    assert conv_rows(tiles, g, DEFAULT)[0] == 4 * 4 * 28 + 1 * 64
    assert conv_rows(tiles, odd, DEFAULT)[0] == 4 * 8 * 56 + 1 * 64


def test_no_fitting_tile_is_an_error_not_a_zero_tile():
    cramped = GemminiConfig("cramped", dim=4, sp_kib=1, acc_kib=1).validate()
    g = ConvGeometry(1, 4, 4, 1, 1, 2, 2, stride=3, kernel_dim=1, pool_size=2, pool_stride=3)
    with pytest.raises(ValueError, match="no conv tile fits config 'cramped'"):
        baseline_conv_tiles(g, cramped)
    with pytest.raises(ValueError, match="no conv tile fits"):
        choose_conv_tiles(g, cramped)


def test_resadd_and_global_average_baselines():
    assert baseline_resadd_tiles(3136, 256, DEFAULT) == (49, 96)       # halved 6x, then J shrunk by DIM
    assert resadd_acc_rows(49, 96, DEFAULT) <= DEFAULT.acc_rows // 2
    assert baseline_global_average_tile(2048, DEFAULT) == 2048


def test_distinct_tile_sizes_are_every_ceil_quotient():
    for total in range(1, 300):
        assert distinct_tile_sizes(total) == sorted({ceil_div(total, n) for n in range(1, total + 1)},
                                                    reverse=True)


# --- properties over geometries and every preset -------------------------------------------------

@ALL_CONFIGS
@given(dims=matmul_dims())
def test_matmul_choice_fits_and_never_moves_more_than_baseline(config, dims):
    base = baseline_matmul_tiles(*dims, config)
    ours = choose_matmul_tiles(*dims, config)
    assert matmul_fits(base, config, dims)
    assert matmul_fits(ours, config, dims)
    assert matmul_traffic(*dims, ours, config)["total"] <= matmul_traffic(*dims, base, config)["total"]
    ours_cycles, base_cycles = (matmul_cost(*dims, t, config)["est_cycles"] for t in (ours, base))
    assert ours_cycles <= base_cycles * (1 + CYCLE_SLACK)
    if matmul_traffic(*dims, ours, config)["total"] == matmul_traffic(*dims, base, config)["total"]:
        assert ours_cycles <= base_cycles


def _check_conv_choice(g, config):
    base = baseline_conv_tiles(g, config)
    ours = choose_conv_tiles(g, config)
    assert conv_fits(base, g, config)
    assert conv_fits(ours, g, config)
    assert all(1 <= t <= m for t, m in zip(ours, g.max_tiles))
    assert conv_traffic(g, ours)["total"] <= conv_traffic(g, base)["total"]
    assert conv_cost(g, ours, config)["est_cycles"] <= conv_cost(g, base, config)["est_cycles"] * (1 + CYCLE_SLACK)
    assert choose_conv_tiles(g, config) == ours   # deterministic


@ALL_CONFIGS
@given(g=large_conv_geometries())
def test_conv_choice_fits_and_never_moves_more_than_baseline(config, g):
    _check_conv_choice(g, config)


@ALL_CONFIGS
@given(g=conv_geometries(max_dim=40, max_channels=80, max_batch=3))
def test_conv_choice_on_odd_small_geometries(config, g):
    _check_conv_choice(g, config)


def test_search_beats_baseline_on_a_resnet_3x3():
    g = ConvGeometry(1, 56, 56, 64, 64, 56, 56, 1, 1, 3)
    ours, base = choose_conv_tiles(g, DEFAULT), baseline_conv_tiles(g, DEFAULT)
    assert conv_traffic(g, ours)["total"] < 0.7 * conv_traffic(g, base)["total"]


# --- plan level ----------------------------------------------------------------------------------

def _plan(config=DEFAULT) -> Plan:
    steps = (
        Conv("conv", batch_size=1, in_row_dim=56, in_col_dim=56, in_channels=64, out_channels=64,
             out_row_dim=56, out_col_dim=56, stride=1, padding=1, kernel_dim=3, input="x", weights="w",
             bias="b", output="y"),
        Matmul("fc", I=196, J=1024, K=256, A="y", B="w2", D="b2", C="z"),
        Matmul("fixed", I=64, J=64, K=64, A="z", B="w3", C="u", tiles={"tile_I": 1, "tile_J": 1, "tile_K": 1}),
        Resadd("add", I=3136, J=256, A="u", B="y", C="v"),
        GlobalAverage("gap", input="v", output="p", batches=1, channels=2048, dim=7),
        CpuOp("soft", inputs=("p",), outputs=("q",), params=cpu.Softmax(-1, 1.0, 1.0), reason="float op"),
    )
    tensors = {t: Tensor(t, t, (1, 2048)) for t in ("p", "q")}   # what the CPU step's cost reads
    return Plan("m", "0" * 64, 17, config, tensors, {}, steps, (), ())


def test_apply_tiles_sets_chosen_tiles_and_keeps_explicit_ones():
    plan = _plan()
    tiled = apply_tiles(plan, DEFAULT)
    conv, fc, fixed = tiled.steps[:3]
    assert set(conv.tiles) == {"batches", "porows", "pocols", "pochs", "krows", "kcols", "kchs"}
    assert tuple(conv.tiles.values()) == choose_conv_tiles(ConvGeometry.of(conv), DEFAULT)
    assert tuple(fc.tiles.values()) == choose_matmul_tiles(196, 1024, 256, DEFAULT)
    assert fixed.tiles == {"tile_I": 1, "tile_J": 1, "tile_K": 1}
    assert tiled.steps[3:] == plan.steps[3:]
    assert plan.steps[0].tiles is None                      # the input plan is untouched (frozen)
    assert tiled.to_dict()["steps"][0]["tiles"] == conv.tiles


def test_plan_costs_cover_every_gemmini_step():
    plan = apply_tiles(_plan())
    costs = plan_costs(plan)
    assert costs[-1]["est_cycles"] > 0 and costs[-1]["dram_bytes"] is None   # a CPU step: instructions x CPI
    keys = {"tiles", "baseline_tiles", "dram_bytes", "baseline_dram_bytes", "est_cycles",
            "baseline_est_cycles", "utilization"}
    for step, c in zip(plan.steps[:-1], costs[:-1]):
        assert keys <= set(c), step.node
        assert c["baseline_tiles"] == baseline_tiles(step, DEFAULT)
    assert costs[0]["dram_bytes"] < costs[0]["baseline_dram_bytes"]
    assert costs[3]["dram_bytes"] == costs[3]["baseline_dram_bytes"] == 3 * 3136 * 256
    assert costs[4]["utilization"] == 0.0                  # no MACs on the array


def test_untiled_step_costs_are_the_baseline():
    c = step_costs(_plan().steps[0], DEFAULT)
    assert c["tiles"] == c["baseline_tiles"]
    assert c["dram_bytes"] == c["baseline_dram_bytes"]


def test_attached_costs_feed_report_rows():
    plan = attach_costs(apply_tiles(_plan()))
    rows = layer_rows(plan, {})
    assert rows[0]["baseline_tiles"] and rows[0]["dram_bytes"] < rows[0]["baseline_dram_bytes"]
    assert rows[0]["tiles"] == plan.steps[0].tiles
    assert rows[-1]["dram_bytes"] is None and rows[-1]["target"] == "cpu"
