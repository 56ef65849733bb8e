"""Conv: direct tiled_conv, 1x1 matmul and im2col paths, with fused ReLU / Clip / max-pool."""
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from onnx import helper

from tests.helpers import assert_matches_ort, infer_outputs, rng


def conv_model(n=1, c=3, h=9, w=9, oc=8, k=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1),
               bias=True, post=(), seed=0, auto_pad=None):
    r = rng(seed)
    inits = {"W": r.normal(0, 0.3, (oc, c) + tuple(k)).astype(np.float32)}
    inputs = ["x", "W"]
    if bias:
        inits["B"] = r.normal(0, 0.2, oc).astype(np.float32)
        inputs.append("B")
    attrs = {"kernel_shape": list(k), "strides": list(strides), "dilations": list(dilations)}
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = list(pads)
    nodes = [helper.make_node("Conv", inputs, ["c"], name="conv", **attrs)]
    last = "c"
    for i, op in enumerate(post):
        out = f"p{i}"
        if op == "relu":
            nodes.append(helper.make_node("Relu", [last], [out], name=f"relu{i}"))
        elif op == "relu6":
            inits["lo"], inits["hi"] = np.float32(0), np.float32(6)
            nodes.append(helper.make_node("Clip", [last, "lo", "hi"], [out], name=f"clip{i}"))
        elif op.startswith("maxpool"):
            size, stride, pad = (int(v) for v in op[len("maxpool"):].split("_"))
            nodes.append(helper.make_node("MaxPool", [last], [out], name=f"pool{i}", kernel_shape=[size, size],
                                          strides=[stride, stride], pads=[pad] * 4))
        last = out
    nodes[-1].output[0] = "y"
    return infer_outputs(nodes, {"x": [n, c, h, w]}, inits)


def steps_of(compiled):
    return [(s.kind, getattr(s, "op", "")) for s in compiled.plan.steps]


CASES = {
    "3x3_s1_p1": dict(),
    "3x3_s2_p1": dict(strides=(2, 2)),
    "5x5_s1_p2_relu": dict(k=(5, 5), pads=(2, 2, 2, 2), post=("relu",)),
    "7x7_s2_p3_relu_pool3_2_1": dict(h=20, w=20, k=(7, 7), strides=(2, 2), pads=(3,) * 4,
                                     post=("relu", "maxpool3_2_1")),
    "3x3_nobias": dict(bias=False),
    "3x3_relu6": dict(post=("relu6",)),
    "3x3_relu_pool2": dict(h=8, w=8, post=("relu", "maxpool2_2_0")),
    "3x3_pool2_no_relu": dict(h=8, w=8, post=("maxpool2_2_0",)),
    "3x3_pool3_pad1_no_relu": dict(h=8, w=8, post=("maxpool3_2_1",)),
    "1x1": dict(k=(1, 1), pads=(0,) * 4, oc=20, c=24),
    "1x1_s2": dict(k=(1, 1), pads=(0,) * 4, strides=(2, 2), h=10, w=10),
    "1x3_nonsquare": dict(k=(1, 3), pads=(0, 1, 0, 1)),
    "3x3_asym_pads": dict(pads=(0, 1, 1, 2)),
    "3x3_stride_2x1": dict(strides=(2, 1)),
    "3x3_dilation2": dict(dilations=(2, 2), pads=(2,) * 4, h=11, w=11),
    "3x3_same_upper_s2": dict(auto_pad="SAME_UPPER", strides=(2, 2), h=8, w=8),
    "nonsquare_map": dict(h=7, w=12),
    "batch2": dict(n=2),
    "wide_k": dict(c=160, oc=40, h=5, w=5),
    "first_layer_1ch": dict(c=1, h=12, w=12),
    "im2col_relu_pool": dict(k=(3, 1), pads=(1, 0, 1, 0), h=8, w=8, post=("relu", "maxpool2_2_0")),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_conv_matches_onnxruntime(case):
    assert_matches_ort(conv_model(**CASES[case]))


def test_direct_conv_fuses_relu_and_pool():
    compiled, _ = assert_matches_ort(conv_model(h=8, w=8, post=("relu", "maxpool2_2_0")))
    conv = [s for s in compiled.plan.steps if s.kind == "conv"]
    assert len(conv) == 1 and conv[0].act == 1 and conv[0].pool_size == 2 and conv[0].pool_stride == 2
    assert [getattr(s, "op", s.kind) for s in compiled.plan.steps] == ["quantize", "conv", "transpose"]


def test_padded_pool_without_relu_is_not_fused():
    compiled, _ = assert_matches_ort(conv_model(h=8, w=8, post=("maxpool3_2_1",)))
    assert ("cpu", "maxpool") in steps_of(compiled)


def test_pointwise_conv_is_a_matmul():
    compiled, _ = assert_matches_ort(conv_model(k=(1, 1), pads=(0,) * 4))
    assert "matmul" in [s.kind for s in compiled.plan.steps]
    assert "conv" not in [s.kind for s in compiled.plan.steps]


def test_nonsquare_kernel_goes_through_im2col_with_reason():
    compiled, _ = assert_matches_ort(conv_model(k=(1, 3), pads=(0, 1, 0, 1)))
    im2col = [s for s in compiled.plan.steps if getattr(s, "op", "") == "im2col"]
    assert im2col and "non-square kernel" in im2col[0].reason


def test_relu6_uses_scale_6_over_127():
    compiled, _ = assert_matches_ort(conv_model(post=("relu6",)))
    conv = next(s for s in compiled.plan.steps if s.kind == "conv")
    assert compiled.plan.tensors[conv.output].scale == pytest.approx(6 / 127, rel=1e-6)
    assert conv.act == 1


@given(c=st.integers(1, 20), oc=st.integers(1, 24), h=st.integers(3, 12), w=st.integers(3, 12),
       k=st.sampled_from([1, 2, 3, 5]), s=st.integers(1, 3), p=st.integers(0, 2),
       relu=st.booleans(), seed=st.integers(0, 1000))
def test_conv_random_geometry(c, oc, h, w, k, s, p, relu, seed):
    p = min(p, k - 1)
    assume(h + 2 * p >= k and w + 2 * p >= k)
    assert_matches_ort(conv_model(c=c, oc=oc, h=h, w=w, k=(k, k), strides=(s, s), pads=(p,) * 4,
                                  post=("relu",) if relu else (), seed=seed), samples=2, seed=seed)


def grouped_model(c=8, oc=8, group=2, k=3, relu=True, pool=False, dil=1, seed=0):
    r = rng(seed)
    inits = {"W": r.normal(0, 0.3, (oc, c // group, k, k)).astype(np.float32),
             "B": r.normal(0, 0.2, oc).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[k, k], pads=[k // 2] * 4, group=group,
                              dilations=[dil, dil])]
    last = "c"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["r"]))
        last = "r"
    if pool:
        nodes.append(helper.make_node("MaxPool", [last], ["p"], kernel_shape=[2, 2], strides=[2, 2]))
        last = "p"
    nodes[-1].output[0] = "y"
    return infer_outputs(nodes, {"x": [1, c, 6, 6]}, inits)


GROUPED = {"group2": dict(), "group4_1x1": dict(group=4, k=1), "group2_pool": dict(pool=True),
           "group2_dilated_im2col": dict(dil=2),
           "depthwise": dict(group=8), "depthwise_pool": dict(group=8, pool=True),
           "depthwise_5x5": dict(group=8, k=5), "depthwise_multiplier2": dict(group=8, oc=16),
           "depthwise_no_relu": dict(group=8, relu=False)}


@pytest.mark.parametrize("case", list(GROUPED), ids=list(GROUPED))
def test_grouped_and_depthwise_convs_are_exact(case):
    compiled, result = assert_matches_ort(grouped_model(**GROUPED[case]))
    assert result["verdict"]["exact_model"]
    ops = [getattr(s, "op", s.kind) for s in compiled.plan.steps]
    if GROUPED[case].get("group") == 8:
        # multiplier 1 runs on tiled_conv_dw; a channel multiplier only on the CPU, saying why
        on_cpu = GROUPED[case].get("oc", 8) != 8
        assert ("dwconv" in ops) == on_cpu and ("conv_dw" in ops) != on_cpu
        if on_cpu:
            assert "channel multiplier 2" in next(s.reason for s in compiled.plan.steps if getattr(s, "op", "") == "dwconv")
    elif GROUPED[case].get("dil", 1) == 1:
        # each group's Gemmini call reads and writes its channel slice in place: no copies at all
        group = GROUPED[case].get("group", 2)
        gemmini = [s for s in compiled.plan.steps if s.target == "gemmini"]
        assert len(gemmini) == group and "remap" not in ops and "concat" not in ops
        for step in gemmini:
            strides = (step.stride_A, step.stride_C) if step.kind == "matmul" else (step.in_stride, step.out_stride)
            assert strides == (8, 8)
    else:  # CPU im2col reads dense copies; the matmuls after it still write their output slices in place
        assert ops.count("remap") == 2 and "concat" not in ops
        assert [s.stride_C for s in compiled.plan.steps if s.kind == "matmul"] == [8, 8]
