"""Small models for the C back end's tests: every plan step kind and every CPU op the emitter prints.

Builders are table-driven (one ONNX node on a model input, or after a conv so it reads NHWC Gemmini
output); the conv, grouped-conv and squeeze-excite builders of the op tests are reused.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tests.helpers import infer_outputs, rng
from tests.ops.test_conv import conv_model, grouped_model
from tests.ops.test_conv_transpose import conv_transpose_model
from tests.ops.test_resize import resize_model
from tests.ops.test_slice_pad import pad_model, slice_model
from tests.ops.test_softmax import masked_model
from tests.test_index_paths import roberta_embeddings
from tests.test_input_mask import deberta_style, transformers5_style
from tests.ops.test_binary import prelu_model
from tests.ops.test_recurrent import rnn_model
from tests.ops.test_activations import se_block
from tests.test_passes import bn_scale_relu
from tests.test_sort_channels import sorted_chain


def single(op, shape=(1, 4, 6, 6), inits=None, extra_inputs=(), **attrs):
    """One `op` node on input x (plus constant inputs `extra_inputs` from `inits`)."""
    node = helper.make_node(op, ["x", *extra_inputs], ["y"], name=op.lower(), **attrs)
    return infer_outputs([node], {"x": list(shape)}, inits or {})


def after_conv(op, extra_inputs=(), inits=None, **attrs):
    """conv(+relu) -> op: the op reads NHWC int8 written by Gemmini."""
    model = conv_model(c=3, h=8, w=8, oc=6, post=("relu",))
    nodes = list(model.graph.node)
    nodes[-1].output[0] = "r"
    node = helper.make_node(op, ["r", *extra_inputs], ["y"], name=op.lower(), **attrs)
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    return infer_outputs(nodes + [node], {"x": [1, 3, 8, 8]}, {**consts, **(inits or {})})


def chain(nodes, inputs, inits, outputs=("y",)):
    return infer_outputs([helper.make_node(op, i, o, name=o[0], **a) for op, i, o, a in nodes], inputs, inits,
                         outputs=outputs)


def weights(seed, *shape, std=0.3):
    return rng(seed).normal(0, std, shape).astype(np.float32)


def gemm(trans_b=1, relu=False, bias=True):
    inits = {"B": weights(1, 12, 20) if trans_b else weights(1, 20, 12), "C": weights(2, 12)}
    nodes = [("Gemm", ["a", "B", "C"] if bias else ["a", "B"], ["g"], {"transB": trans_b}),
             ("Relu" if relu else "Identity", ["g"], ["y"], {})]
    return chain(nodes, {"a": [3, 20]}, inits)


def matmul_bias():
    return chain([("MatMul", ["a", "B"], ["m"], {}), ("Add", ["m", "C"], ["y"], {})], {"a": [2, 3, 16]},
                 {"B": weights(3, 16, 8), "C": weights(4, 8)})


def resadd(op="Add", relu=True):
    nodes = [("Conv", ["x", "W1"], ["c1"], {"pads": [1, 1, 1, 1]}), ("Conv", ["x", "W2"], ["c2"], {}),
             (op, ["c1", "c2"], ["s" if relu else "y"], {})] + ([("Relu", ["s"], ["y"], {})] if relu else [])
    return chain(nodes, {"x": [1, 8, 6, 6]}, {"W1": weights(5, 8, 8, 3, 3), "W2": weights(6, 8, 8, 1, 1)})


def attention():
    """q k^T v with activation x activation matmuls (batched: CPU slices, one Gemmini call per batch)."""
    nodes = [("MatMul", ["x", "Wq"], ["q"], {}), ("MatMul", ["x", "Wk"], ["k"], {}),
             ("Transpose", ["k"], ["kt"], {"perm": [0, 2, 1]}), ("MatMul", ["q", "kt"], ["s"], {}),
             ("Softmax", ["s"], ["p"], {"axis": -1}), ("MatMul", ["p", "x"], ["y"], {})]
    return chain(nodes, {"x": [2, 5, 8]}, {"Wq": weights(7, 8, 8), "Wk": weights(8, 8, 8)})


def transformer_bits():
    """Gather with constant indices, LayerNormalization, a broadcasting Add of two activations."""
    nodes = [("Gather", ["x", "i"], ["g"], {"axis": 1}),
             ("LayerNormalization", ["g", "gamma", "beta"], ["n"], {"axis": -1}),
             ("Add", ["n", "r"], ["y"], {})]
    inits = {"i": np.asarray([[2, 0], [1, -1]], np.int64), "gamma": rng(9).uniform(0.5, 1.5, 6).astype(np.float32),
             "beta": weights(10, 6, std=0.2)}
    return infer_outputs([helper.make_node(op, i, o, name=o[0], **a) for op, i, o, a in nodes],
                         {"x": [2, 5, 6], "r": [1, 1, 6]}, inits)


def concat(requantized=False):
    nodes = [("Conv", ["x", "W1"], ["c1"], {"pads": [1, 1, 1, 1]}), ("Conv", ["x", "W2"], ["c2"], {})]
    inits = {"W1": weights(11, 4, 3, 3, 3), "W2": weights(12, 5, 3, 1, 1)}
    second = "c2"
    if requantized:
        inits.update(lo=np.float32(0), hi=np.float32(6))
        nodes.append(("Clip", ["c2", "lo", "hi"], ["c3"], {}))
        second = "c3"
    if not requantized:
        nodes.append(("Concat", ["c1", second], ["y"], {"axis": 1}))  # a model output: each input keeps its scale
        return chain(nodes, {"x": [1, 3, 6, 6]}, inits)
    # read again, so the concat shares one scale and requantizes the Clip's fixed-scale input
    nodes += [("Concat", ["c1", second], ["cat"], {"axis": 1}),
              ("MaxPool", ["cat"], ["y"], {"kernel_shape": [2, 2], "strides": [2, 2]})]
    return chain(nodes, {"x": [1, 3, 6, 6]}, inits)


def float_outputs(token: bool = False):
    """A detector head as YOLOv8 exports it: boxes (ReLU, 0..) and class scores (a sigmoid) joined on axis 1,
    plus a tanh read by nothing else: both model outputs are float32 (a float32 lookup table, int8 boxes
    dequantized at their scale). `token`: a constant third operand of the concat, copied as it is."""
    inits = {"Wb": weights(21, 8, 4, std=20.0), "Wc": weights(22, 8, 3, std=2.0)}
    parts = ["boxes", "scores"]
    if token:
        inits["token"] = np.linspace(-3, 3, 2 * 40, dtype=np.float32).reshape(1, 2, 40)
        parts.append("token")
    nodes = [("Transpose", ["x"], ["xt"], {"perm": [0, 2, 1]}),
             ("MatMul", ["xt", "Wb"], ["b"], {}), ("Relu", ["b"], ["br"], {}),
             ("Transpose", ["br"], ["boxes"], {"perm": [0, 2, 1]}),
             ("MatMul", ["xt", "Wc"], ["c"], {}), ("Transpose", ["c"], ["ct"], {"perm": [0, 2, 1]}),
             ("Sigmoid", ["ct"], ["scores"], {}),
             ("Concat", parts, ["y"], {"axis": 1}),
             ("Tanh", ["ct"], ["t"], {})]
    return chain(nodes, {"x": [1, 8, 40]}, inits, outputs=("y", "t"))


def concat_in_place():
    """Concat(conv, CPU max-pool, 1x1 conv) whose conv inputs are written in place, and are read again
    through their row stride by a conv and a 1x1 (matmul) conv; the max-pool branch is copied."""
    nodes = [("Conv", ["x", "W1"], ["c1"], {"pads": [1, 1, 1, 1]}), ("Conv", ["x", "W2"], ["c2"], {}),
             ("MaxPool", ["x"], ["p"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
             ("Concat", ["c1", "p", "c2"], ["y"], {"axis": 1}),
             ("Conv", ["c2", "W3"], ["d"], {"pads": [1, 1, 1, 1]}), ("Conv", ["c1", "W4"], ["e"], {})]
    inits = {"W1": weights(13, 4, 3, 3, 3), "W2": weights(14, 5, 3, 1, 1), "W3": weights(15, 2, 5, 3, 3),
             "W4": weights(16, 3, 4, 1, 1)}
    return chain(nodes, {"x": [1, 3, 6, 6]}, inits, outputs=("y", "d", "e"))


def dense_block():
    """DenseNet: each layer's BN+ReLU reads the running concat, its conv's output joins the next concat;
    every concat in the chain is written in place into the last one's buffer."""
    bn = {f"{k}{i}": v for i in (1, 2) for k, v in BN_4.items()}
    bn2 = {f"{k}2": np.concatenate([v, v]) for k, v in BN_4.items()}
    nodes = [("Conv", ["x", "W0"], ["y0"], {"pads": [1, 1, 1, 1]}),
             ("BatchNormalization", ["y0", "s1", "b1", "m1", "v1"], ["n1"], {}), ("Relu", ["n1"], ["r1"], {}),
             ("Conv", ["r1", "W1"], ["c1"], {}), ("Concat", ["y0", "c1"], ["y1"], {"axis": 1}),
             ("BatchNormalization", ["y1", "s2", "b2", "m2", "v2"], ["n2"], {}), ("Relu", ["n2"], ["r2"], {}),
             ("Conv", ["r2", "W2"], ["c2"], {"pads": [1, 1, 1, 1]}), ("Concat", ["y1", "c2"], ["y2"], {"axis": 1}),
             ("Conv", ["y2", "W3"], ["y"], {})]
    inits = {"W0": weights(21, 4, 3, 3, 3), "W1": weights(22, 4, 4, 1, 1), "W2": weights(23, 4, 8, 3, 3),
             "W3": weights(24, 5, 12, 1, 1), **bn, **bn2}
    return chain(nodes, {"x": [1, 3, 6, 6]}, inits)


def depthwise(multiplier=1):
    c = 4
    return chain([("Conv", ["x", "W", "B"], ["c"], {"group": c, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
                  ("Relu", ["c"], ["y"], {})], {"x": [1, c, 7, 7]},
                 {"W": weights(13, c * multiplier, 1, 3, 3, std=0.4), "B": weights(14, c * multiplier, std=0.2)})


def two_in_three_out():
    nodes = [("Conv", ["x", "W"], ["y1"], {"pads": [1, 1, 1, 1]}), ("MatMul", ["a", "B"], ["y2"], {}),
             ("Identity", ["y2"], ["y3"], {})]
    return chain(nodes, {"x": [1, 2, 5, 5], "a": [3, 10]}, {"W": weights(15, 4, 2, 3, 3), "B": weights(16, 10, 5)},
                 outputs=("y1", "y2", "y3"))


def token_encoder():
    """A BERT-style embedding block: lookups by int64 token ids and int32 token types (integer model inputs),
    their sum, a position table, LayerNorm and a projection."""
    nodes = [("Gather", ["word", "ids"], ["w"], {}), ("Gather", ["types", "tt"], ["t"], {}),
             ("Add", ["w", "t"], ["e"], {}), ("Add", ["e", "pos"], ["p"], {}),
             ("LayerNormalization", ["p", "gamma", "beta"], ["n"], {"axis": -1}), ("MatMul", ["n", "W"], ["y"], {})]
    inits = {"word": weights(40, 30, 16, std=0.5), "types": weights(41, 2, 16), "pos": weights(42, 1, 6, 16),
             "gamma": rng(43).uniform(0.5, 1.5, 16).astype(np.float32), "beta": weights(44, 16, std=0.2),
             "W": weights(45, 16, 8)}
    return infer_outputs([helper.make_node(op, i, o, name=o[0], **a) for op, i, o, a in nodes],
                         {"ids": [1, 6], "tt": [1, 6]}, inits,
                         input_types={"ids": onnx.TensorProto.INT64, "tt": onnx.TensorProto.INT32})


def unary_consts(op):
    if op == "Clip":
        return {"lo": np.float32(-0.25), "hi": np.float32(0.5)}, ("lo", "hi")
    if op == "Reshape":
        return {"s": np.asarray([1, -1, 6], np.int64)}, ("s",)
    return {}, ()


def unary(op, shape=(1, 4, 6, 6), **attrs):
    inits, extra = unary_consts(op)
    return single(op, shape, inits, extra, **attrs)


BN = {"s": rng(17).uniform(0.5, 1.5, 3).astype(np.float32), "b": weights(18, 3, std=0.2),
      "m": weights(19, 3, std=0.2), "v": rng(20).uniform(0.5, 1.5, 3).astype(np.float32)}

BN_4 = {"s": rng(25).uniform(0.5, 1.5, 4).astype(np.float32), "b": weights(26, 4, std=0.2),
        "m": weights(27, 4, std=0.2), "v": rng(28).uniform(0.5, 1.5, 4).astype(np.float32)}

# name -> builder; together they cover every plan step kind and CPU op the C back end prints
MODELS = {
    "conv3x3": lambda: conv_model(),
    "conv3x3_stride2_batch2_nobias": lambda: conv_model(n=2, strides=(2, 2), bias=False),
    "conv1x1_matmul": lambda: conv_model(k=(1, 1), pads=(0,) * 4, oc=20, c=24),
    "conv_im2col_nonsquare": lambda: conv_model(k=(1, 3), pads=(0, 1, 0, 1)),
    "conv_im2col_pool": lambda: conv_model(k=(3, 1), pads=(1, 0, 1, 0), h=8, w=8, post=("relu", "maxpool2_2_0")),
    "conv_relu": lambda: conv_model(post=("relu",)),
    "conv_relu6": lambda: conv_model(post=("relu6",)),
    "conv_relu_pool3_pad1": lambda: conv_model(h=9, w=9, post=("relu", "maxpool3_2_1")),
    "gemm_transB": lambda: gemm(),
    "gemm_relu_nobias": lambda: gemm(trans_b=0, relu=True, bias=False),
    "matmul_bias_3d": matmul_bias,
    "add_resadd_relu": lambda: resadd(),
    "sum_resadd": lambda: resadd("Sum", relu=False),
    "maxpool_standalone": lambda: unary("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "maxpool_after_conv": lambda: after_conv("MaxPool", kernel_shape=[4, 4], strides=[2, 2]),
    "averagepool": lambda: unary("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "averagepool_count_pad": lambda: after_conv("AveragePool", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                                count_include_pad=1),
    "global_average_square": lambda: after_conv("GlobalAveragePool"),
    "global_average_rect": lambda: unary("GlobalAveragePool", shape=(2, 3, 4, 6)),
    "relu_standalone": lambda: unary("Relu"),
    "clip_standalone": lambda: unary("Clip"),
    "flatten_after_conv": lambda: after_conv("Flatten"),
    "reshape": lambda: unary("Reshape"),
    "transpose_3d": lambda: unary("Transpose", shape=(2, 3, 4), perm=[2, 0, 1]),
    "softmax": lambda: chain([("MatMul", ["a", "B"], ["m"], {}), ("Softmax", ["m"], ["y"], {"axis": -1})],
                             {"a": [2, 12]}, {"B": weights(21, 12, 7, std=0.5)}),
    "softmax_axis1_4d": lambda: unary("Softmax", shape=(1, 5, 3, 2), axis=1),
    "concat_channels": lambda: concat(),
    "concat_requantized": lambda: concat(requantized=True),
    "concat_in_place": concat_in_place,
    "float_outputs": float_outputs,
    "dense_block": dense_block,
    "conv_weight_scale_per_channel": lambda: conv_model(c=5, oc=6, post=("relu", "maxpool2_2_0")),
    "gemm_weight_scale_groups": lambda: gemm(),
    "conv_sorted_channels_silu_prelu": lambda: sorted_chain("silu_pool_prelu"),
    "depthwise_relu": lambda: depthwise(),
    "depthwise_multiplier2": lambda: depthwise(2),
    "grouped_conv": lambda: grouped_model(),
    "squeeze_excite_lut_binary": lambda: se_block(),
    "div_by_constant": lambda: single("Div", (1, 3, 4, 4), {"k": rng(22).uniform(0.5, 2, (1, 3, 1, 1))
                                                             .astype(np.float32)}, ("k",)),
    "batchnorm_affine": lambda: single("BatchNormalization", (1, 3, 4, 4), BN, ("s", "b", "m", "v")),
    "batchnorm_scale_relu": lambda: bn_scale_relu(),
    "lrn": lambda: unary("LRN", size=3, alpha=1e-3, beta=0.75, bias=1.5),
    "attention_matmuls": attention,
    "gather_layernorm_broadcast_add": transformer_bits,
    "embedding_lookups_int64_int32": token_encoder,
    "softmax_causal_mask": lambda: masked_model("add"),
    "attention_mask_input_causal": lambda: transformers5_style(causal=True),
    "roberta_position_ids": roberta_embeddings,
    "deberta_mask_rows_query_key": deberta_style,
    "two_inputs_three_outputs": two_in_three_out,
    "slice_steps_nhwc": lambda: slice_model((1, 4, 7, 7), [1, -1, 0], [7, -8, 3], [2, 3, 1], [2, -2, 1],
                                            after_conv=True),
    "slice_3d": lambda: slice_model((2, 5, 6), [1, -3], [100, 6], [1, 2]),
    "pad_value_channels": lambda: pad_model((1, 3, 4, 5), [0, 1, 1, 0, 0, 0, 2, 1], value=0.3),
    "pad_reflect_nhwc": lambda: pad_model((1, 3, 5, 5), [0, 0, 2, 1, 0, 0, 1, 2], "reflect", after_conv=True),
    "resize_nearest_nhwc": lambda: resize_model((1, 3, 4, 5), scales=[1, 1, 2, 1.5], after_conv=True),
    "resize_linear_nhwc": lambda: resize_model((1, 3, 4, 5), scales=[1, 1, 2, 0.6], after_conv=True, mode="linear"),
    "resize_linear_3d_align_corners": lambda: resize_model((3, 4, 5), scales=[2, 1, 1.5], mode="linear",
                                                           coordinate_transformation_mode="align_corners"),
    "resize_linear_same_sizes": lambda: resize_model((1, 3, 4, 2), scales=[1, 1, 1, 1.2], mode="linear"),
    "resize_cubic_nhwc_exclude_outside": lambda: resize_model((1, 3, 4, 5), scales=[1, 1, 2, 0.6], after_conv=True,
                                                              mode="cubic", opset=19, cubic_coeff_a=-0.5,
                                                              exclude_outside=1),
    "resize_cubic_2d_align_corners": lambda: resize_model((4, 5), sizes=[7, 3], mode="cubic",
                                                          coordinate_transformation_mode="align_corners"),
    "prelu_per_channel_nhwc": lambda: prelu_model((1, 4, 5, 5), (4, 1, 1), after_conv=True),
    "conv_transpose_stride2": lambda: conv_transpose_model(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    "conv_transpose_dilated_im2col": lambda: conv_transpose_model(dilations=[2, 2], strides=[2, 1]),
    "conv_transpose_grouped_same_lower": lambda: conv_transpose_model(c=4, oc=6, group=2, strides=[2, 2],
                                                                      auto_pad="SAME_LOWER"),
    "concat_constant_nhwc": lambda: chain([("Conv", ["x", "W1"], ["c1"], {"pads": [1, 1, 1, 1]}),
                                           ("Concat", ["c1", "K"], ["y"], {"axis": 1})],
                                          {"x": [1, 3, 6, 6]}, {"W1": weights(11, 4, 3, 3, 3), "K": weights(30, 1, 2, 6, 6)}),
    "reduce_mean_spatial_gemmini": lambda: after_conv("ReduceMean", axes=[2, 3], keepdims=0),
    "reduce_mean_rect_cpu": lambda: unary("ReduceMean", shape=(2, 3, 4, 6), axes=[2, 3]),
    "reduce_max_axes_apart_nhwc": lambda: after_conv("ReduceMax", axes=[1, 3], keepdims=0),
    "reduce_sum_channels": lambda: single("ReduceSum", (1, 5, 3, 3), {"axes": np.array([1], np.int64)}, ("axes",)),
    "lstm_bidirectional_peephole": lambda: rnn_model(direction="bidirectional", initial=True, peephole=True),
    "gru_reverse_linear_before_reset": lambda: rnn_model(op="GRU", direction="reverse", linear_before_reset=1),
    # --keep-float (OPTIONS): float_conv steps; dense (8-output blocks and tails), depthwise, a channel multiplier,
    # matmuls, a fused ReLU + max-pool, padding-only border pixels, ConvTranspose
    "keep_float_conv_pool_gemm": lambda: chain(
        [("Conv", ["x", "W1", "B1"], ["c1"], {"pads": [1, 1, 1, 1]}), ("Relu", ["c1"], ["r1"], {}),
         ("MaxPool", ["r1"], ["p1"], {"kernel_shape": [2, 2], "strides": [2, 2]}), ("Flatten", ["p1"], ["f"], {}),
         ("Gemm", ["f", "B", "C"], ["y"], {"transB": 1})],
        {"x": [1, 3, 8, 8]}, {"W1": weights(40, 11, 3, 3, 3), "B1": weights(41, 11), "B": weights(42, 10, 176),
                              "C": weights(43, 10)}),
    "keep_float_depthwise_matmul": lambda: chain(
        [("Conv", ["x", "Wd"], ["d"], {"group": 12, "pads": [1, 1, 1, 1]}),
         ("Conv", ["d", "Wm"], ["m"], {"group": 12, "strides": [2, 2]}),
         ("Conv", ["m", "W1"], ["p"], {"kernel_shape": [1, 1], "pads": [1, 1, 1, 1]}),
         ("Reshape", ["p", "shape"], ["r"], {}), ("MatMul", ["r", "Bm"], ["y"], {})],
        {"x": [1, 12, 6, 6]}, {"Wd": weights(44, 12, 1, 3, 3), "Wm": weights(45, 24, 1, 3, 3),
                               "W1": weights(46, 9, 24, 1, 1), "shape": np.array([1, 9, 16], np.int64),
                               "Bm": weights(47, 16, 5)}),
    "keep_float_conv_transpose": lambda: conv_transpose_model(c=4, oc=6, group=2, strides=[2, 2], pads=[1, 1, 1, 1],
                                                              after_conv=True),
}

# Compile options of the cases that need other than the defaults.
OPTIONS = {"conv_weight_scale_per_channel": {"weight_scales": "channel"},
           "keep_float_conv_pool_gemm": {"keep_float": ["c1", "y"]},
           "keep_float_depthwise_matmul": {"keep_float": ["d", "m", "p", "y"]},
           "keep_float_conv_transpose": {"keep_float": ["deconv"]},
           "gemm_weight_scale_groups": {"weight_scales": "channel"}}
