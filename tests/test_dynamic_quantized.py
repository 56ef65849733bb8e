"""Dynamically quantized models (onnxruntime's quantize_dynamic, e.g. ddddocr's common_old.onnx): load turns
ConvInteger / MatMulInteger / DynamicQuantizeLSTM back into the float ops they stand for, with the weights
dequantized. Checked exactly against onnxruntime on the float model whose weights are the dequantized ones
(computed here from the quantized model's own initializers), and what the rewrite cannot express is refused
naming the node."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

import onnx2gemmini as o2g
from onnx2gemmini.ort_session import session as ort_session
from onnx2gemmini import dynamic_quant
from onnx2gemmini.compare import run_diff
from onnx2gemmini.data import Dataset
from onnx2gemmini.errors import ModelError, UnsupportedError
from onnx2gemmini.load import load
from onnx2gemmini.metrics import sqnr_db

H = 8          # LSTM hidden size
X_SHAPE = (1, 1, 8, 12)
DYNAMIC_OPS = {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM"}


def float_model() -> onnx.ModelProto:
    """A CRNN in small: Conv (+ bias Add) -> ReLU -> columns as a sequence -> bidirectional LSTM -> MatMul + Add."""
    r = np.random.default_rng(0)
    weights = {"cw": r.normal(0, 0.5, (4, 1, 3, 3)), "cb": r.normal(0, 0.1, (1, 4, 1, 1)),
               "seq_shape": np.array([0, 0, -1], np.int64), "out_shape": np.array([0, 0, -1], np.int64),
               "W": r.normal(0, 0.3, (2, 4 * H, 32)), "R": r.normal(0, 0.3, (2, 4 * H, H)),
               "B": r.normal(0, 0.1, (2, 8 * H)), "mw": r.normal(0, 0.4, (2 * H, 5)), "mb": r.normal(0, 0.1, 5)}
    nodes = [helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "cb"], ["cb_out"]),
             helper.make_node("Relu", ["cb_out"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[3, 0, 1, 2]),       # [12, 1, 4, 8]
             helper.make_node("Reshape", ["t", "seq_shape"], ["seq"]),              # [12, 1, 32]
             helper.make_node("LSTM", ["seq", "W", "R", "B"], ["Y"], hidden_size=H, direction="bidirectional"),
             helper.make_node("Transpose", ["Y"], ["yt"], perm=[0, 2, 1, 3]),      # [12, 1, 2, 8]
             helper.make_node("Reshape", ["yt", "out_shape"], ["feat"]),            # [12, 1, 16]
             helper.make_node("MatMul", ["feat", "mw"], ["m"]),
             helper.make_node("Add", ["m", "mb"], ["out"])]
    graph = helper.make_graph(nodes, "crnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [12, 1, 5])],
                              [numpy_helper.from_array(np.asarray(v, v.dtype if v.dtype == np.int64 else np.float32), k)
                               for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def dynamic_model(tmp_path, **options) -> onnx.ModelProto:
    onnx.save(float_model(), tmp_path / "float.onnx")
    quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "dynamic.onnx"), **options)
    return onnx.load(tmp_path / "dynamic.onnx")


def dequantized(q: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    return (q.astype(np.int32) - zero.astype(np.int32)).astype(np.float32) * scale.astype(np.float32)


def reference(quantized: onnx.ModelProto) -> onnx.ModelProto:
    """The float model with each weight replaced by quantize_dynamic's weight, dequantized here."""
    q = {t.name: numpy_helper.to_array(t) for t in quantized.graph.initializer}

    def part(name):
        return q[f"{name}_quantized"], q[f"{name}_scale"], q[f"{name}_zero_point"]

    cw, cs, cz = part("cw")
    mw, ms, mz = part("mw")            # per column: scale and zero point [5] broadcast over the last axis
    values = {"cw": dequantized(cw, cs, cz), "mw": dequantized(mw, ms, mz)}
    for name in ("W", "R"):            # [D, in, 4H], one scale per direction (or per direction and gate row)
        w, s, z = part(name)
        s, z = s.reshape(2, 1, -1), z.reshape(2, 1, -1)
        values[name] = dequantized(w, s, z).transpose(0, 2, 1)
    model = float_model()
    for t in model.graph.initializer:
        if t.name in values:
            t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(values[t.name]), t.name))
    return model


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort_session(model)
    return sess.run(["out"], {"x": x})[0]


def inputs(n=3, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (n,) + X_SHAPE).astype(np.float32)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("weight_type", [QuantType.QUInt8, QuantType.QInt8], ids=["uint8", "int8"])
def test_quantize_dynamic_output_becomes_its_float_model_exactly(tmp_path, per_channel, weight_type):
    quantized = dynamic_model(tmp_path, per_channel=per_channel, weight_type=weight_type)
    ops = {n.op_type for n in quantized.graph.node}
    assert {"ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM"} <= ops
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(quantized)
    assert dynamic_quant.rewrite(rewritten) == 3
    assert not {n.op_type for n in rewritten.graph.node} & DYNAMIC_OPS
    onnx.checker.check_model(rewritten)
    ref = reference(quantized)
    for x in inputs():
        got = run(rewritten, x)
        np.testing.assert_array_equal(got, run(ref, x))
        # and it is what the quantized model approximates: close to onnxruntime on it and on the float original
        assert sqnr_db(run(quantized, x), got) > 25
        assert sqnr_db(run(float_model(), x), got) > 25


def old_style_conv(variant: str = "ok") -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(ConvInteger as older onnxruntime releases wrote it, with its int32 bias Floor(bias / (x_scale * w_scale))
    added before the dequantization — common_old.onnx's layout —, the float Conv it stands for)."""
    r = np.random.default_rng(2)
    wq = r.integers(0, 256, (3, 2, 3, 3)).astype(np.uint8)
    w_zero, w_scale = np.uint8(121), np.float32(0.0123)
    bias = r.normal(0, 0.5, 3).astype(np.float32)
    if variant == "per_channel":  # a scale per output channel, shaped [M, 1, 1] to broadcast over the result
        w_scale, bias = np.array([0.01, 0.02, 0.005], np.float32).reshape(3, 1, 1), bias.reshape(3, 1, 1)
    inits = {"wq": wq, "w_zero": np.array(w_zero), "w_scale": np.array(w_scale), "bias": bias,
             "bias_shape": np.array([1, -1, 1, 1], np.int64), "other_scale": np.array(np.float32(0.02))}
    out_scale = {"rescaled": "other_scale"}.get(variant, "s_out")
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("Mul", ["xs", "w_scale"], ["s_bias"]),
             helper.make_node("Div", ["bias", "s_bias"], ["b_div"]),
             helper.make_node("Floor", ["b_div"], ["b_floor"]),
             helper.make_node("Cast", ["b_floor"], ["b_int"], to=TensorProto.INT32),
             helper.make_node("Reshape", ["b_int", "bias_shape"], ["b_r"]),
             helper.make_node("ConvInteger", ["xq", "wq", "xz", "w_zero"], ["acc"], pads=[1, 1, 1, 1], strides=[2, 1],
                              name="conv"),
             helper.make_node("Add", ["acc", "b_r"], ["acc_b"]),
             helper.make_node("Cast", ["acc_b"], ["acc_f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "w_scale"], ["s_out"]),
             helper.make_node("Mul", ["acc_f", out_scale], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 3, 7])]
    if variant == "int_output":  # the int32 result is also a graph output: no float meaning
        outputs.append(helper.make_tensor_value_info("acc", TensorProto.INT32, [1, 3, 3, 7]))
    if variant == "activation_weights":  # a product of two dynamically quantized activations
        nodes.insert(1, helper.make_node("DynamicQuantizeLinear", ["x2"], ["x2q", "x2s", "x2z"]))
        nodes[7].input[1] = "x2q"
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 7])]
    if variant == "activation_weights":
        graph_inputs.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [3, 2, 3, 3]))
    graph = helper.make_graph(nodes, "old", graph_inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[2, 1])
    ref = helper.make_graph([conv], "ref", graph_inputs[:1], outputs[:1],
                            [numpy_helper.from_array(dequantized(wq, np.reshape(w_scale, (-1, 1, 1, 1)), w_zero), "w"),
                             numpy_helper.from_array(bias.reshape(-1), "b")])
    return model, helper.make_model(ref, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("variant", ["ok", "per_channel"])
def test_older_integer_bias_layout_becomes_conv_with_its_float_bias(variant):
    model, ref = old_style_conv(variant)
    x = np.random.default_rng(3).uniform(-1, 1, (1, 2, 5, 7)).astype(np.float32)

    def run_y(m):
        return ort_session(m).run(None, {"x": x})[0]

    expected = run_y(ref)
    assert sqnr_db(expected, run_y(model)) > 25  # the hand-built graph means that Conv
    assert dynamic_quant.rewrite(model) == 1
    assert [n.op_type for n in model.graph.node] == ["Conv"]
    np.testing.assert_array_equal(run_y(model), expected)


@pytest.mark.parametrize("variant, message", [
    ("rescaled", "not multiplied by x_scale \\* a constant weight scale"),
    ("int_output", "not \\(only\\) cast to float"),
    ("activation_weights", "weight 'x2q' is not constant"),
])
def test_what_has_no_float_equivalent_is_refused_naming_the_node(variant, message):
    model, _ = old_style_conv(variant)
    with pytest.raises(UnsupportedError, match=message) as info:
        load(model)
    assert str(info.value).startswith("ConvInteger 'conv': ") and "\n" not in str(info.value)


def test_a_dynamically_quantized_model_compiles_and_passes_diff(tmp_path):
    quantized = dynamic_model(tmp_path)
    assert not {n.op_type for n in load(quantized).model.graph.node} & DYNAMIC_OPS
    compiled = o2g.compile(quantized, calib=inputs(8, seed=4)[:, 0])
    report = run_diff(compiled, Dataset({"x": inputs(4, seed=5)}, None, "test"))
    assert report["verdict"]["passed"], report["verdict"]
    x = inputs(1, seed=6)[0]
    assert sqnr_db(run(quantized, x), compiled.run({"x": x})["out"]) > 15


def test_a_shape_lost_behind_a_custom_op_names_the_op():
    """ONNX infers no shapes through onnxruntime's com.microsoft ops (DynamicQuantizeLSTM was one): the error
    names them, since no --input-shape can help there."""
    node = helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft", name="fancy")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(ModelError, match=r"no static shape .* cannot infer shapes through: com\.microsoft\.Gelu "
                                         r"'fancy'"):
        o2g.compile(model)
