"""ConvTranspose: CPU zero insertion (exact) + an ordinary Gemmini conv, vs onnxruntime's float ConvTranspose.

onnxruntime does not fuse DQ->ConvTranspose->Q into an integer kernel, so the golden sums in float32:
the stated tolerance is 1 LSB (the int32 sums themselves are exact)."""
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini.ort_session import session as ort_session
from onnx2gemmini.compare import run_diff
from onnx2gemmini.graph import NodeView, from_onnx
from onnx2gemmini.load import load
from onnx2gemmini.ops.conv_transpose import ConvTransposeHandler
from onnx2gemmini.plan import Conv, Matmul
from tests.helpers import assert_matches_ort, infer_outputs, random_dataset, rng


def conv_transpose_model(c=3, oc=4, h=5, w=5, k=(3, 3), bias=True, after_conv=False, seed=0, n=1, **attrs):
    """x [n, c, h, w] -> ConvTranspose (oc outputs; weights [c][oc/group][k]) -> y."""
    r = rng(seed)
    inits = {"W": r.normal(0, 0.3, (c, oc // attrs.get("group", 1)) + tuple(k)).astype(np.float32)}
    inputs, nodes, src = ["W"], [], "x"
    if bias:
        inits["B"] = r.normal(0, 0.2, oc).astype(np.float32)
        inputs.append("B")
    if after_conv:
        inits["W0"] = r.normal(0, 0.3, (c, c, 3, 3)).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["x", "W0"], ["c"], pads=[1, 1, 1, 1]))
        src = "c"
    nodes.append(helper.make_node("ConvTranspose", [src, *inputs], ["y"], name="deconv", **attrs))
    return infer_outputs(nodes, {"x": [n, c, h, w]}, inits)


# Input 5x5, kernel 3 unless stated: the natural output side is 4*stride + 3 (+ output_padding).
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
    # auto_pad SAME_*: output side input x stride; the odd half of the total padding at the end for UPPER
    "same_upper": dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    "same_lower": dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    "same_upper_k4_s3x2": dict(auto_pad="SAME_UPPER", k=(4, 4), strides=[3, 2]),
    "same_lower_dilated": dict(auto_pad="SAME_LOWER", dilations=[2, 2], strides=[2, 2]),
    "same_upper_stride_beyond_kernel": dict(auto_pad="SAME_UPPER", k=(2, 2), strides=[3, 3]),  # no padding
    # output_shape: pads are derived (the given ones ignored), the odd half at the beginning unless SAME_UPPER;
    # up to stride-1 beyond the unpadded size, zeros at the end (onnxruntime, and ONNX's own test data)
    "output_shape": dict(output_shape=[10, 9], strides=[2, 2]),
    "output_shape_ignores_pads": dict(output_shape=[13, 10], strides=[3, 2], pads=[1, 1, 1, 1]),
    "output_shape_output_padding": dict(output_shape=[14, 13], strides=[3, 3], output_padding=[1, 2]),
    "output_shape_same_upper": dict(output_shape=[9, 10], strides=[2, 2], auto_pad="SAME_UPPER"),
    "output_shape_zeros_at_the_end": dict(output_shape=[12, 13], strides=[2, 3]),
    "output_shape_zeros_at_the_end_output_padding": dict(output_shape=[17, 12], strides=[3, 2],
                                                         output_padding=[1, 1]),
    "output_shape_natural_kernel_shape": dict(output_shape=[16, 12], kernel_shape=[3, 3], strides=[3, 2],
                                              output_padding=[1, 1]),
    # groups: one Gemmini conv per group
    "group2": dict(c=4, oc=6, group=2, strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    "group3_dilated_im2col": dict(c=6, oc=3, group=3, dilations=[2, 2], strides=[2, 1]),
    "group_depthwise": dict(c=4, oc=4, group=4, strides=[2, 2]),
    "group2_batch2_same_lower": dict(c=4, oc=4, group=2, n=2, strides=[2, 2], auto_pad="SAME_LOWER"),
    "group2_output_shape_no_bias": dict(c=2, oc=4, group=2, bias=False, output_shape=[11, 10], strides=[2, 2]),
}
MODEL_ARGS = ("k", "bias", "c", "oc", "n")


def case_model(case, after_conv=False):
    attrs = dict(CASES[case])
    kwargs = {k: attrs.pop(k) for k in MODEL_ARGS if k in attrs}
    return conv_transpose_model(after_conv=after_conv, **kwargs, **attrs)


def gemmini_calls(compiled):
    return [s for s in compiled.plan.steps if s.node == "deconv" and isinstance(s, (Conv, Matmul))]


@pytest.mark.parametrize("after_conv", [False, True], ids=["input", "after_conv"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_conv_transpose(case, after_conv):
    compiled, result = assert_matches_ort(case_model(case, after_conv))
    assert len(gemmini_calls(compiled)) == CASES[case].get("group", 1), "the sums run on Gemmini, per group"
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
    assume((min(h, w) - 1) * s + (k - 1) * d + 1 + extra - 2 * p >= 1)
    model = conv_transpose_model(c=c, oc=oc, h=h, w=w, k=(k, k), seed=seed, strides=[s, s], pads=[p] * 4,
                                 dilations=[d, d], output_padding=[extra, extra])
    assert_matches_ort(model, samples=2, seed=seed)


@given(groups=st.integers(1, 3), cg=st.integers(1, 3), ocg=st.integers(1, 3), h=st.integers(1, 5),
       w=st.integers(1, 5), k=st.integers(1, 4), s=st.lists(st.integers(1, 3), min_size=2, max_size=2),
       d=st.integers(1, 2), extra=st.lists(st.integers(0, 2), min_size=2, max_size=2),
       mode=st.sampled_from(["output_shape", "SAME_UPPER", "SAME_LOWER"]),
       crop=st.lists(st.integers(-2, 3), min_size=2, max_size=2), seed=st.integers(0, 1000))
def test_conv_transpose_random_groups_and_derived_pads(groups, cg, ocg, h, w, k, s, d, extra, mode, crop, seed):
    """Derived padding (output_shape, SAME_*) with groups; what onnxruntime refuses, or where it and ONNX's
    shape inference disagree on the output size, is refused."""
    extra = [min(e, si - 1) for e, si in zip(extra, s)]  # onnxruntime: output_padding < stride
    unpadded = [(n - 1) * s[i] + (k - 1) * d + 1 for i, n in enumerate((h, w))]
    if mode == "output_shape":
        target = [unpadded[i] + extra[i] - crop[i] for i in range(2)]
        refusal = "a stride or more beyond" if any(t - u >= si for t, u, si in zip(target, unpadded, s)) else None
        # onnx's shape inference gives no spatial dims for an output_shape below the input's
        assume(min(target) >= 1 and target[0] >= h and target[1] >= w)
        attrs = {"output_shape": target}
    else:
        target = [h * s[0], w * s[1]]
        # onnxruntime: min(natural, target); shape inference: min(natural, target + output_padding)
        disagree = any(e and u + e > t for e, u, t in zip(extra, unpadded, target))
        refusal, attrs = "shape inference" if disagree else None, {"auto_pad": mode}
    model = conv_transpose_model(c=groups * cg, oc=groups * ocg, h=h, w=w, k=(k, k), seed=seed, strides=s,
                                 dilations=[d, d], output_padding=extra, group=groups, **attrs)
    if refusal:
        with pytest.raises(o2g.O2GError, match=refusal):
            o2g.compile(model)
        return
    compiled, _ = assert_matches_ort(model, samples=2, seed=seed)
    assert len(gemmini_calls(compiled)) == groups


def conv_transpose_1d():
    w = rng(0).normal(0, 0.3, (2, 3, 3)).astype(np.float32)
    return infer_outputs([helper.make_node("ConvTranspose", ["x", "W"], ["y"], name="deconv")], {"x": [1, 2, 5]},
                         {"W": w})


@pytest.mark.parametrize("build,reason", [
    (lambda: conv_transpose_model(strides=[2, 2], output_shape=[13, 11]), r"a stride or more beyond .*\[11, 11\]"),
    (lambda: conv_transpose_model(strides=[2, 2], output_padding=[1, 0], auto_pad="SAME_UPPER"),
     "shape inference 1x4x11x10"),
    (conv_transpose_1d, "only 2-D transposed convolutions")],
    ids=["output_shape_too_big", "same_output_padding", "1d"])
def test_refused_forms(build, reason):
    with pytest.raises(o2g.O2GError, match=reason):
        o2g.compile(build())


def float_conv_transpose(w, x, **attrs):
    node = helper.make_node("ConvTranspose", ["x", "W"], ["y"], **attrs)
    model = infer_outputs([node], {"x": list(x.shape)}, {"W": w})
    return ort_session(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("case", ["stride2_output_padding", "asym_pads_strides", "dilation2", "big_pads_crop",
                                  "same_lower", "output_shape", "group2", "group3_dilated_im2col"])
def test_bias_correction_shift_is_the_mean_output_error(case):
    """output_shift == the mean over output positions of ConvTranspose(x, weight error), for an input that
    sits at its channel means (so the shift a bias can cancel), grouped weights included."""
    model = case_model(case)
    graph = from_onnx(load(model).model)
    node = NodeView(next(n for n in graph.nodes if n.op_type == "ConvTranspose"), graph)
    w = node.const(node.input("W"))
    error = rng(1).normal(0, 0.01, w.shape)
    mean = rng(2).normal(0, 1, node.shape(node.input("X"))[1])
    x = np.broadcast_to(mean[None, :, None, None], node.shape(node.input("X"))).astype(np.float32)
    attrs = {k: v for k, v in node.attrs.items() if k != "output_shape" or v}
    expected = float_conv_transpose(error.astype(np.float32), x, **attrs).mean(axis=(0, 2, 3))
    got = ConvTransposeHandler().output_shift(node, error, {"axis1": mean})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("case", ["stride2", "group2"])
def test_bias_correction_lowers_the_error(case):
    """Inputs with non-zero channel means (0..1): the corrected bias brings the int8 output closer to fp32,
    and the result stays within tolerance of onnxruntime's QDQ run of the same quantization."""
    model, sqnr = case_model(case), {}
    for on in (False, True):
        compiled = o2g.compile(model, calib=random_dataset(model, 16, 0, 0.0, 1.0), bias_correction=on)
        result = run_diff(compiled, random_dataset(model, 16, 1, 0.0, 1.0))
        assert result["verdict"]["passed"], result["verdict"]
        sqnr[on] = result["outputs"]["y"]["fp32_vs_int8"]["sqnr_db"]
    assert sqnr[True] > sqnr[False]
