"""numerics.py: the scales, multipliers and roundings every execution shares (spec/gemmini.md §2)."""
import numpy as np
import pytest

from onnx2gemmini.ort_session import session as ort_session
from onnx2gemmini import numerics


def test_multiplier_is_float32_arithmetic():
    s_in, s_w, s_out = 0.1, 0.003, 0.07
    expected = np.float32(np.float32(np.float32(s_in) * np.float32(s_w)) / np.float32(s_out))
    assert numerics.multiplier(s_in, s_w, s_out) == float(expected)


def test_quantize_is_quantizelinear():
    assert numerics.quantize(np.array([0.25, 0.75, -0.25, 1000.0], np.float32), 0.5).tolist() == [0, 2, 0, 127]
    assert numerics.quantize(np.array([-3.0, 3.0], np.float32), 1.0, lo=0).tolist() == [0, 3]
    assert numerics.quantize_value(-1000.0, 0.5) == -128


def test_quantize_special_values_match_onnxruntime():
    """NaN, infinities, ties and saturation quantize as onnxruntime's QuantizeLinear does (the golden)."""
    from onnx import TensorProto, helper

    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.5, 1.5, -2.5, 300.0, -300.0, -0.0], np.float32)
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [x.size])],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [1.0]), helper.make_tensor("z", TensorProto.INT8, [], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort_session(model)
    expected = session.run(None, {"x": x})[0]
    assert numerics.quantize(x, 1.0).tolist() == expected.tolist()
    assert numerics.quantize(x, 1.0, lo=0).tolist() == np.maximum(expected, 0).tolist()


def test_requantize_goes_through_float32_like_dq_then_q():
    x = np.array([3, -3, 127], np.int8)
    assert numerics.requantize(x, 0.5, 1.0).tolist() == [2, -2, 64]   # 1.5 -> 2, -1.5 -> -2, 63.5 -> 64
    assert numerics.requantize(x, 0.5, 0.5) is x


def test_symmetric_weights_never_use_minus_128():
    assert numerics.symmetric_int8(np.array([-2.0, 2.0]), 1 / 64).tolist() == [-127, 127]


def test_bias_saturates_to_int32():
    assert numerics.quantize_bias(np.array([1e12, -1e12, 2.5]), 1.0).tolist() == [2**31 - 1, -2**31, 2]


def test_acc_scale_uses_float32_product():
    # 16777217 is not a float32: int32 -> float32 rounds it to 16777216 first (spec §2.4)
    assert numerics.acc_scale(np.array([16777217], np.int32), 2.0 ** -17).tolist() == [127]
    assert numerics.acc_scale(np.array([300], np.int32), 1.0).tolist() == [127]
    assert numerics.acc_scale(np.array([-300], np.int32), 1.0).tolist() == [-128]
    assert numerics.acc_scale(np.array([-5], np.int32), 1.0, relu=True).tolist() == [0]


def test_acc_scale_examples_from_the_spec():
    acc = np.array([1000, 1016, -1000, -1016, 1008, -1008], np.int32)
    assert numerics.acc_scale(acc, 0.0625).tolist() == [62, 64, -62, -64, 63, -63]


def test_mvin_scale_saturates():
    x = np.array([100, -100, 3], np.int8)
    assert numerics.mvin_scale(x, 2.0).tolist() == [127, -128, 6]
    assert numerics.mvin_scale(x, 0.5).tolist() == [50, -50, 2]  # 1.5 -> 2 (even)


def test_wrap_int32_is_twos_complement():
    assert numerics.wrap_int32(np.array([2**31, -2**31 - 1], np.int64)).tolist() == [-2**31, 2**31 - 1]


def test_all_zero_tensor_gets_a_usable_scale():
    assert numerics.scale_for(0.0) == pytest.approx(1 / 127)
    assert numerics.scale_for(float("nan")) == pytest.approx(1 / 127)


@pytest.mark.parametrize("sa,sb,so", [(0.1, 0.05, 0.2), (0.05, 0.1, 0.07), (0.3, 0.3, 0.1)])
def test_resadd_scales_keep_both_inputs_unsaturated(sa, sb, so):
    a, b, c = numerics.resadd_scales(sa, sb, so)
    assert max(a, b) == 1.0 and min(a, b) <= 1.0
    assert c == pytest.approx(max(sa, sb) / so, rel=1e-6)


def test_resadd_error_bounds():
    assert numerics.resadd_tolerance(1.0) == 1 and numerics.resadd_tolerance(4.2) == 3
    assert numerics.resadd_mismatch_rate(1.0, 1.0, 3.0) == 0.0
    assert numerics.resadd_mismatch_rate(0.5, 1.0, 2.0) == 1.0      # odd values rescale to x.5: shift 1/2
    assert numerics.resadd_mismatch_rate(0.5, 1.0, 0.8) == pytest.approx(0.4)
    assert numerics.resadd_mismatch_rate(0.25, 1.0, 1.0) == 0.5     # q = 2 mod 4 -> x.5
    assert numerics.resadd_mismatch_rate(1.0, 0.75, 1.0) == 0.5     # q = 2 -> 1.5


@pytest.mark.parametrize("sa,sb,so,tight", [(0.1, 0.05, 0.2, False), (0.05, 0.1, 0.07, False),
                                            (0.0937, 0.0512, 0.2113, True), (0.3, 0.2107, 0.0993, True),
                                            (0.0213, 0.4871, 0.6029, True)])
def test_resadd_explained_covers_every_difference_from_onnxruntime_and_little_else(sa, sb, so, tight):
    """Over every pair of int8 inputs: where Gemmini's resadd and onnxruntime's QDQ Add differ, the
    per-value explanation says they may; and, where the scales put few sums on exact ties (which onnxruntime's
    float32 arithmetic may round either way, so they are always explained), it says so for few of the pairs
    where they agree."""
    from onnx import TensorProto, helper
    from onnx2gemmini import kernels
    qa, qb = (g.astype(np.int8) for g in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij"))
    qa, qb = qa.reshape(1, -1), qb.reshape(1, -1)
    inits = [helper.make_tensor(n, TensorProto.FLOAT, [], [v]) for n, v in (("sa", sa), ("sb", sb), ("so", so))]
    inits += [helper.make_tensor("z", TensorProto.INT8, [], [0])]
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "z"], ["fa"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "z"], ["fb"]),
             helper.make_node("Add", ["fa", "fb"], ["s"]), helper.make_node("QuantizeLinear", ["s", "so", "z"], ["y"])]
    shape = list(qa.shape)
    graph = helper.make_graph(nodes, "add", [helper.make_tensor_value_info(n, TensorProto.INT8, shape) for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    golden = ort_session(model).run(["y"], {"a": qa, "b": qb})[0].astype(np.int32)
    a_s, b_s, c_s = numerics.resadd_scales(sa, sb, so)
    gemmini = kernels.resadd(qa, qb, a_s, b_s, c_s, False).astype(np.int32)
    may = numerics.resadd_explained(qa, qb, sa, sb, so, a_s, b_s, c_s)
    differ = golden != gemmini
    assert differ.any() and not (differ & ~may).any()
    if tight:
        assert np.count_nonzero(may) <= 1.5 * np.count_nonzero(differ) + 0.01 * differ.size
