"""Weight-scale groups: one scale per run of output channels, each run its own Gemmini call writing its
channels in place; bit-exact with onnxruntime running the per-channel QDQ golden."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import onnx2gemmini as o2g
from onnx2gemmini.quant.quantize import group_scales, quantize_weights, scale_for
from tests.emit.c_models import MODELS
from tests.helpers import assert_matches_ort, random_dataset
from tests.ops.test_conv import conv_model, grouped_model

CASES = {
    "conv3x3": lambda: conv_model(c=8, oc=40),
    "conv1x1_matmul": lambda: conv_model(k=(1, 1), pads=(0,) * 4, c=24, oc=20),
    "grouped_conv": lambda: grouped_model(),
    "gemm_transB": lambda: MODELS["gemm_transB"](),
    "matmul_3d": lambda: MODELS["matmul_bias_3d"](),
    "im2col_pool": lambda: MODELS["conv_im2col_pool"](),
}


@pytest.mark.parametrize("weight_scales", ["groups", "channel"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_grouped_weight_scales_are_exact(case, weight_scales):
    compiled, result = assert_matches_ort(CASES[case](), weight_scales=weight_scales)
    assert result["verdict"]["exact_model"]
    for name, wq in compiled.quant.weights.items():
        calls = [s for s in compiled.plan.steps if s.node == name and s.kind in ("conv", "matmul")]
        runs = {(a, b) for a, b, _ in wq.groups()}
        assert len(calls) >= len(runs)  # a grouped conv's runs split further at its group bounds
        if len(runs) > 1 and case != "im2col_pool":  # written in place, no concat
            assert all(compiled.plan.tensors[s.C if s.kind == "matmul" else s.output].slice_of for s in calls)


def test_groups_follow_the_array_width():
    model = conv_model(c=8, oc=40)
    compiled = o2g.compile(model, calib=random_dataset(model, 2, 0), weight_scales="groups")
    wq = next(iter(compiled.quant.weights.values()))
    dim = compiled.config.dim
    assert [(a, b) for a, b, _ in wq.groups()] == [(0, dim), (dim, 2 * dim), (2 * dim, 40)]
    assert len([s for s in compiled.plan.steps if s.kind == "conv"]) == 3


@pytest.mark.parametrize("weight_scales", ["tensor", "sorted"])
def test_one_scale_is_one_call(weight_scales):
    """Per tensor; and by default (sorted) where the channel ranges are close, as in this random conv."""
    model = conv_model(c=8, oc=40)
    compiled = o2g.compile(model, calib=random_dataset(model, 2, 0), weight_scales=weight_scales)
    assert len([s for s in compiled.plan.steps if s.kind == "conv"]) == 1
    assert all(wq.channel_scale is None for wq in compiled.quant.weights.values())


@given(oc=st.integers(1, 40), size=st.integers(1, 20), seed=st.integers(0, 1000))
def test_group_scales_cover_their_channels(oc, size, seed):
    w = np.random.default_rng(seed).normal(0, 1, (oc, 3, 2, 2)).astype(np.float32) * \
        np.random.default_rng(seed + 1).uniform(0.01, 10, (oc, 1, 1, 1)).astype(np.float32)
    scales = group_scales(w, 0, size)
    for start in range(0, oc, size):
        run = scales[start:start + size]
        assert np.all(run == run[0])  # one scale per run
        assert run[0] == np.float32(scale_for(float(np.abs(w[start:start + size]).max())))
    wq = quantize_weights(w, np.ones(oc, np.float32), 0.05, axis=0, group=size)
    assert np.abs(wq.q).max() <= 127
    # every weight within half a step of its channel's scale
    cs = wq.groups()
    for a, b, s in cs:
        err = np.abs(wq.q[a:b].astype(np.float64) * np.float32(s) - w[a:b])
        assert err.max() <= np.float32(s) * 0.5 + 1e-6


@pytest.mark.parametrize("weight_scales", ["groups", "channel"])
@pytest.mark.parametrize("case", ["depthwise", "depthwise_pool"])
def test_depthwise_runs_are_exact(case, weight_scales):
    """tiled_conv_dw has no channel strides: each run of channels is a copy, a depthwise call, a concat."""
    kwargs = {"depthwise": dict(c=24, oc=24, group=24), "depthwise_pool": dict(c=24, oc=24, group=24, pool=True)}
    compiled, result = assert_matches_ort(grouped_model(**kwargs[case]), weight_scales=weight_scales)
    assert result["verdict"]["exact_model"]
    wq = next(iter(compiled.quant.weights.values()))
    runs = len(wq.groups())
    assert runs == (2 if weight_scales == "groups" else 24)
    ops = [getattr(s, "op", s.kind) for s in compiled.plan.steps]
    assert ops.count("conv_dw") == runs and ops.count("remap") == runs and ops.count("concat") == 1


def test_depthwise_with_a_channel_multiplier_keeps_one_scale():
    model = grouped_model(c=8, oc=16, group=8)
    compiled = o2g.compile(model, calib=random_dataset(model, 2, 0), weight_scales="channel")
    assert all(wq.channel_scale is None for wq in compiled.quant.weights.values())
