"""ReduceMean/Sum/Max/Min against onnxruntime: the spatial mean on Gemmini, every other reduction on the
exact CPU kernel (also compiled as C and run, against the same NumPy semantics)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper

from onnx2gemmini import cpu
from tests.helpers import assert_matches_ort, infer_outputs


def reduce_model(op, shape, axes=None, keepdims=1, opset=17, axes_as_input=None, after_conv=False):
    """x -> [Conv ->] op -> y; axes as an attribute before opset 18 (ReduceSum: 13), as an input after."""
    as_input = axes_as_input if axes_as_input is not None else opset >= (13 if op == "ReduceSum" else 18)
    nodes, inits, x = [], {}, "x"
    if after_conv:  # the reduction then reads an NHWC tensor written by Gemmini
        c = shape[1]
        w = np.random.default_rng(3).uniform(-0.5, 0.5, (c, c, 1, 1)).astype(np.float32)
        inits["w"] = w
        nodes.append(helper.make_node("Conv", ["x", "w"], ["c"]))
        x = "c"
    attrs = {"keepdims": keepdims}
    inputs = [x]
    if axes is not None and as_input:
        inits["axes"] = np.array(axes, np.int64)
        inputs.append("axes")
    elif axes is not None:
        attrs["axes"] = list(axes)
    nodes.append(helper.make_node(op, inputs, ["y"], **attrs))
    return infer_outputs(nodes, {"x": list(shape)}, inits, opset=opset)


CASES = {
    # id: (op, input shape, axes, keepdims, after_conv)
    "mean_hw_square_keep": ("ReduceMean", (1, 8, 6, 6), (2, 3), 1, True),
    "mean_hw_square_drop": ("ReduceMean", (2, 8, 5, 5), (-2, -1), 0, True),
    "mean_hw_rect": ("ReduceMean", (1, 8, 4, 6), (2, 3), 1, True),
    "mean_last_axis": ("ReduceMean", (2, 7, 24), (-1,), 1, False),
    "mean_channels": ("ReduceMean", (1, 8, 5, 5), (1,), 1, True),
    "mean_all": ("ReduceMean", (3, 4, 5), None, 0, False),
    "sum_hw": ("ReduceSum", (1, 6, 5, 5), (2, 3), 0, True),
    "sum_apart": ("ReduceSum", (2, 3, 4, 5), (1, 3), 1, False),
    "max_channels": ("ReduceMax", (1, 8, 5, 5), (1,), 1, True),
    "max_apart_drop": ("ReduceMax", (2, 3, 4, 5), (0, 2), 0, False),
    "min_last": ("ReduceMin", (4, 9), (1,), 0, False),
    "l2_last_axis": ("ReduceL2", (2, 6, 16), (-1,), 1, False),
    "l2_channels_nhwc": ("ReduceL2", (1, 8, 4, 4), (1,), 1, True),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
@pytest.mark.parametrize("opset", [17, 18])
def test_reduce_matches_onnxruntime(case, opset):
    op, shape, axes, keepdims, after_conv = CASES[case]
    compiled, result = assert_matches_ort(reduce_model(op, shape, axes, keepdims, opset, after_conv=after_conv),
                                          samples=6)
    kinds = {getattr(s, "op", s.kind) for s in compiled.plan.steps}
    spatial_mean = op == "ReduceMean" and axes in ((2, 3), (-2, -1)) and shape[2] == shape[3]
    assert ("global_average" in kinds) == spatial_mean, kinds
    assert ("reduce" in kinds) == (not spatial_mean), kinds
    if op in ("ReduceMax", "ReduceMin"):
        assert result["layers"][-1]["mismatches_vs_ort_qdq"] == 0


def test_noop_with_empty_axes_is_the_input():
    model = infer_outputs([helper.make_node("ReduceMean", ["x"], ["y"], noop_with_empty_axes=1)], {"x": [2, 5]},
                          opset=18)
    compiled, _ = assert_matches_ort(model)
    assert not any(getattr(s, "op", "") == "reduce" for s in compiled.plan.steps)


def test_axes_computed_at_run_time_are_refused():
    import onnx2gemmini as o2g
    model = infer_outputs([helper.make_node("ArgMax", ["x"], ["a"], axis=1, keepdims=0),
                           helper.make_node("ReduceSum", ["x", "a"], ["y"])], {"x": [1, 3]})
    with pytest.raises(o2g.UnsupportedError, match="ReduceSum.*the axes input is not constant"):
        o2g.compile(model)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(("sum", "mean", "max", "min", "l2")), st.lists(st.integers(1, 5), min_size=1, max_size=4),
       st.data())
def test_kernel_agrees_with_numpy_reductions(kind, shape, data):
    """The table's NumPy semantics: the reduction of the dequantized values, quantized (max/min exactly)."""
    start = data.draw(st.integers(0, len(shape) - 1))
    stop = data.draw(st.integers(start + 1, len(shape)))
    x = np.random.default_rng(len(shape)).integers(-128, 128, shape, dtype=np.int8)
    s_in, s_out = 0.05, 0.05 if kind in ("max", "min") else 0.11
    out_shape = tuple(shape[:start]) + tuple(shape[stop:])
    [y] = cpu.Reduce(kind, start, stop, s_in, s_out).run([x], [out_shape])
    axes = tuple(range(start, stop))
    f = x.astype(np.float64) * s_in
    ref = {"sum": f.sum(axes), "mean": f.mean(axes), "max": f.max(axes), "min": f.min(axes),
           "l2": np.sqrt((f * f).sum(axes))}[kind] / s_out
    assert y.shape == out_shape
    assert np.abs(y.astype(np.int32) - np.clip(np.rint(ref), -128, 127)).max(initial=0) <= (kind in ("sum", "mean", "l2"))
