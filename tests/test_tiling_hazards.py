"""The planner never emits a hazardous Gemmini call: the tile search excludes tiles that would read
clobbered scratchpad rows, and with --tiling auto a call whose gemmini.h tiles are hazardous gets explicit
safe tiles, with the reason in the plan and the report. Proven at address level (scratchpad/)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini.config import PRESETS
from onnx2gemmini.emit.report import build_report
from onnx2gemmini.plan import Conv, Plan
from onnx2gemmini.run.emulator import Emulator
from onnx2gemmini.scratchpad import PlanRunner, find_hazards, run
from onnx2gemmini.tiling import apply_tiles, baseline_tiles
from tests.helpers import infer_outputs, random_dataset, rng
from tests.scratchpad.cases import conv_case


def mnist_first_layer():
    """1 -> 32 channels, 28x28, 3x3 pad 1, ReLU, 2x2 max-pool: wrong on Gemmini's functional model with
    gemmini.h's tiles (spec/gemmini.md §3.10)."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    r = rng(0)
    return infer_outputs(nodes, {"x": [1, 1, 28, 28]}, {"W": r.normal(0, 0.3, (32, 1, 3, 3)).astype(np.float32),
                                                       "B": r.normal(0, 0.1, 32).astype(np.float32)})


@pytest.mark.parametrize("tiling", ["search", "auto"])
def test_mnist_first_layer_is_hazard_free_in_both_tiling_modes(tiling):
    model = mnist_first_layer()
    compiled = o2g.compile(model, calib=random_dataset(model), tiling=tiling)
    plan = compiled.plan
    conv = next(s for s in plan.steps if isinstance(s, Conv))
    assert find_hazards(conv, plan.config, baseline_tiles(conv, plan.config))   # gemmini.h's tiles clobber
    assert conv.heuristic_hazard and conv.tiles and not find_hazards(conv, plan.config, conv.tiles)
    row = next(r for r in build_report(compiled, {})["layers"] if r["call"].startswith("tiled_conv"))
    assert "clobbered" in row["reason"] and row["call"] == "tiled_conv"       # explicit tiles, said why
    x = random_dataset(model, 1, 3).sample(0)
    runner = PlanRunner(plan, "spike")
    got, want = runner.run(x), Emulator(plan).run(x)
    assert not runner.hazards and all(np.array_equal(got[t], want[t]) for t in plan.outputs)


def test_auto_keeps_gemmini_h_tiles_where_they_are_safe():
    model = infer_outputs([helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1])], {"x": [1, 16, 12, 12]},
                          {"W": rng(1).normal(0, 0.3, (16, 16, 3, 3)).astype(np.float32)})
    conv = next(s for s in o2g.compile(model, calib=random_dataset(model), tiling="auto").plan.steps
                if isinstance(s, Conv))
    assert conv.tiles is None and not conv.heuristic_hazard


@given(config=st.sampled_from(list(PRESETS.values())), batch=st.integers(1, 2), in_ch=st.integers(1, 4),
       rows=st.integers(8, 64), cols=st.integers(8, 64), out_ch=st.sampled_from([8, 16, 32, 48]),
       kernel=st.integers(1, 7), stride=st.integers(1, 2), pool=st.sampled_from([None, (2, 2, 0), (3, 2, 1)]),
       mode=st.sampled_from(["search", "auto"]), seed=st.integers(0, 2**16))
def test_small_first_layers_are_planned_hazard_free(config, batch, in_ch, rows, cols, out_ch, kernel, stride, pool,
                                                    mode, seed):
    """For every preset: whatever tiles the planner gives a small first-layer conv (few input channels:
    gemmini.h's several-pixels-per-row path) have no hazard, and at address level on Gemmini's functional
    model the call computes the emulator's bytes."""
    padding = kernel // 2
    assume(rows + 2 * padding >= kernel and cols + 2 * padding >= kernel and (not pool or config.has_max_pool))
    step, inputs, consts, ref = conv_case(seed, batch, rows, cols, in_ch, out_ch, kernel, stride, padding, pool)
    plan = Plan("m", "0" * 64, 17, config, {}, {}, (step,), (), ())
    try:
        planned = apply_tiles(plan, mode=mode, hazards=lambda s, t: find_hazards(s, config, t)).steps[0]
    except ValueError:
        return   # no tile fits this config at all: refused, not emitted
    tiles = planned.tiles or baseline_tiles(planned, config)
    assert not find_hazards(planned, config, tiles)
    result = run(planned, inputs, consts, config, tiles)
    assert not result.hazards and np.array_equal(result.output, ref)


def test_a_hazard_without_explicit_tiles_is_refused():
    """A step kind that cannot take explicit tiles cannot avoid a hazardous heuristic: refused, not emitted."""
    step, *_ = conv_case(0, 1, 28, 28, 1, 32, 3, 1, 1, (2, 2, 0))
    step = dataclasses.replace(step, input_dilation=2)   # not tunable
    plan = Plan("m", "0" * 64, 17, PRESETS["default"], {}, {}, (step,), (), ())
    with pytest.raises(ValueError, match="takes no explicit tiles"):
        apply_tiles(plan, mode="auto", hazards=lambda s, t: ["clobber"])
