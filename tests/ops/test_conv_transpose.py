"""ConvTranspose: CPU zero insertion (exact) + an ordinary Gemmini conv, vs onnxruntime's float ConvTranspose.

onnxruntime does not fuse DQ->ConvTranspose->Q into an integer kernel, so the golden sums in float32:
the stated tolerance is 1 LSB (the int32 sums themselves are exact)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini.plan import Conv, Matmul
from tests.helpers import assert_matches_ort, infer_outputs, rng


def conv_transpose_model(c=3, oc=4, h=5, w=5, k=(3, 3), bias=True, after_conv=False, seed=0, **attrs):
    r = rng(seed)
    inits = {"W": r.normal(0, 0.3, (c, oc) + tuple(k)).astype(np.float32)}
    inputs, nodes, src = ["W"], [], "x"
    if bias:
        inits["B"] = r.normal(0, 0.2, oc).astype(np.float32)
        inputs.append("B")
    if after_conv:
        inits["W0"] = r.normal(0, 0.3, (c, c, 3, 3)).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["x", "W0"], ["c"], pads=[1, 1, 1, 1]))
        src = "c"
    nodes.append(helper.make_node("ConvTranspose", [src, *inputs], ["y"], name="deconv", **attrs))
    return infer_outputs(nodes, {"x": [1, c, h, w]}, inits)


CASES = {
    "default": {},
    "stride2": dict(strides=[2, 2]),
    "stride2_pads": dict(strides=[2, 2], pads=[1, 1, 1, 1]),
    "stride2_output_padding": dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    "asym_pads_strides": dict(strides=[3, 2], pads=[0, 2, 1, 0], output_padding=[2, 1]),
    "dilation2": dict(dilations=[2, 2], strides=[2, 2]),
    "big_pads_crop": dict(pads=[3, 3, 2, 4], strides=[2, 2], k=(5, 5)),
    "kernel_4x2": dict(k=(4, 2), strides=[2, 1]),
    "no_bias": dict(bias=False, strides=[2, 2]),
    "valid": dict(auto_pad="VALID", strides=[2, 2]),
}


@pytest.mark.parametrize("after_conv", [False, True], ids=["input", "after_conv"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_conv_transpose(case, after_conv):
    attrs = dict(CASES[case])
    kwargs = {k: attrs.pop(k) for k in ("k", "bias") if k in attrs}
    compiled, result = assert_matches_ort(conv_transpose_model(after_conv=after_conv, **kwargs, **attrs))
    steps = [s for s in compiled.plan.steps if s.node == "deconv"]
    assert any(isinstance(s, (Conv, Matmul)) for s in steps), "the sums run on Gemmini"
    layer = next(l for l in result["layers"] if l["name"] == "deconv")
    assert layer["tolerance_lsb"] == 1


def test_stride1_unpadded_is_one_tiled_conv():
    compiled, _ = assert_matches_ort(conv_transpose_model())
    assert [type(s).__name__ for s in compiled.plan.steps if s.node == "deconv"] == ["CpuOp", "Conv"]


@given(c=st.integers(1, 8), oc=st.integers(1, 8), h=st.integers(1, 6), w=st.integers(1, 6),
       k=st.integers(1, 4), s=st.integers(1, 3), p=st.integers(0, 2), d=st.integers(1, 2),
       extra=st.integers(0, 2), seed=st.integers(0, 1000))
def test_conv_transpose_random_geometry(c, oc, h, w, k, s, p, d, extra, seed):
    extra = min(extra, s - 1)  # onnxruntime: output_padding < stride
    if (h - 1) * s + (k - 1) * d + 1 + extra - 2 * p < 1 or (w - 1) * s + (k - 1) * d + 1 + extra - 2 * p < 1:
        return
    model = conv_transpose_model(c=c, oc=oc, h=h, w=w, k=(k, k), seed=seed, strides=[s, s], pads=[p] * 4,
                                 dilations=[d, d], output_padding=[extra, extra])
    assert_matches_ort(model, samples=2, seed=seed)


@pytest.mark.parametrize("attrs,reason", [(dict(group=3), "group"), (dict(auto_pad="SAME_UPPER"), "auto_pad"),
                                          (dict(output_shape=[11, 11]), "output_shape")],
                         ids=["group", "same_upper", "output_shape"])
def test_refused_forms(attrs, reason):
    model = conv_transpose_model(c=3, oc=3, strides=[2, 2], **attrs) if "group" not in attrs else \
        conv_transpose_model(c=3, oc=1, **attrs)
    with pytest.raises(o2g.O2GError, match=reason):
        o2g.compile(model)
