"""fold_shapes: shape computations become the constants onnxruntime computes, Ifs on them take their branch,
and the models then compile and match onnxruntime."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx2gemmini.ort_session import session as ort_session
from onnx2gemmini import fold_shapes
from onnx2gemmini.load import load
from tests.helpers import assert_matches_ort, rng


def ints(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def same_padding_model(side: int = 7) -> onnx.ModelProto:
    """timm's dynamic "same" padding: pads computed from the input's size, then a Reshape whose target is
    computed from the padded conv's output shape."""
    w = rng(0).normal(0, 0.3, (8, 4, 2, 2)).astype(np.float32)
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["h"], axis=0),
        helper.make_node("Mod", ["h", "two_s"], ["rem"]),                 # pad the odd side up to even
        helper.make_node("Concat", ["zeros6", "rem", "rem"], ["pads_i"], axis=0),
        helper.make_node("Cast", ["pads_i"], ["pads"], to=TensorProto.INT64),
        helper.make_node("Pad", ["x", "pads"], ["xp"]),
        helper.make_node("Conv", ["xp", "w"], ["c"], strides=[2, 2]),
        helper.make_node("Shape", ["c"], ["cs"]),
        helper.make_node("Slice", ["cs", "zero1", "two1"], ["nc"]),
        helper.make_node("Concat", ["nc", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["c", "target"], ["y"]),
    ]
    out = (side + side % 2) // 2
    inits = [ints("two", 2), ints("two_s", [2]), ints("zeros6", [0] * 6), ints("zero1", [0]), ints("two1", [2]),
             ints("minus1", [-1]), numpy_helper.from_array(w, "w")]
    graph = helper.make_graph(nodes, "same_pad", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                [1, 4, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, out * out])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def if_on_shape_model(side: int) -> onnx.ModelProto:
    """An If whose condition compares the input's size with 100: then Relu, else Neg (before a Conv)."""
    branch = lambda op, name: helper.make_graph(  # noqa: E731
        [helper.make_node(op, ["x"], [f"{name}_out"])], name, [],
        [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)])
    w = rng(1).normal(0, 0.3, (4, 4, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Greater", ["n", "hundred"], ["big"]),
             helper.make_node("If", ["big"], ["picked"], then_branch=branch("Relu", "then"),
                              else_branch=branch("Neg", "else")),
             helper.make_node("Conv", ["picked", "w"], ["y"])]
    graph = helper.make_graph(nodes, "if_shape", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                [1, 4, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, side, side])],
                              [ints("hundred", 100), numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_same_padding_folds_to_constants_and_matches_onnxruntime():
    model = same_padding_model()
    folded = onnx.ModelProto.FromString(model.SerializeToString())
    assert fold_shapes.fold(folded) == 2  # the pads and the Reshape target
    ops = [n.op_type for n in folded.graph.node]
    assert ops == ["Pad", "Conv", "Reshape"]
    consts = {t.name: numpy_helper.to_array(t).tolist() for t in folded.graph.initializer}
    assert consts == {"pads": [0, 0, 0, 0, 0, 0, 1, 1], "target": [1, 8, -1], "w": consts["w"]}
    x = rng(2).uniform(-1, 1, (1, 4, 7, 7)).astype(np.float32)
    run = lambda m: ort_session(m).run(None, {"x": x})[0]  # noqa: E731
    np.testing.assert_array_equal(run(folded), run(model))
    loaded = load(model).model  # static throughout (onnxsim may merge the Pad into the Conv)
    assert "Shape" not in [n.op_type for n in loaded.graph.node]
    assert [d.dim_value for d in loaded.graph.output[0].type.tensor_type.shape.dim] == [1, 8, 16]
    assert_matches_ort(model)


def test_if_on_a_shape_takes_the_branch_onnxruntime_takes():
    for side, op in ((4, "Neg"), (8, "Relu")):  # 64 values: else; 256: then
        model = if_on_shape_model(side)
        folded = onnx.ModelProto.FromString(model.SerializeToString())
        assert fold_shapes.fold(folded) == 2  # the condition, then the If
        assert [n.op_type for n in folded.graph.node] == [op, "Identity", "Conv"]
        x = rng(3).uniform(-1, 1, (1, 4, side, side)).astype(np.float32)
        run = lambda m: ort_session(m).run(None, {"x": x})[0]  # noqa: E731
        np.testing.assert_array_equal(run(folded), run(model))
        assert_matches_ort(model)


def test_models_without_shape_computations_are_left_alone():
    model = if_on_shape_model(4)
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"  # not fixed: nothing to compute
    before = model.SerializeToString()
    assert fold_shapes.fold(model) == 0 and model.SerializeToString() == before
    plain = same_padding_model()
    del plain.graph.node[:]
    plain.graph.node.extend([helper.make_node("Shape", ["x"], ["y"])])  # a graph output from shapes alone
    assert fold_shapes.fold(plain) == 0
