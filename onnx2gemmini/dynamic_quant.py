"""Dynamically quantized models (onnxruntime's quantize_dynamic) turned back into the float model they stand
for, before shape inference.

Such a model keeps (u)int8 weights with a scale and an asymmetric zero point, and quantizes every activation
at run time (DynamicQuantizeLinear: a new scale for each input). Gemmini needs static scales, so there is
nothing to keep: each ConvInteger / MatMulInteger with the Cast -> Mul(x_scale * w_scale) that dequantizes
its result (and, in models from older onnxruntime releases, the int32 bias it adds first, computed as
Floor(bias / scale)) becomes the float Conv / MatMul it approximates, and com.microsoft's
DynamicQuantizeLSTM the ONNX LSTM; the weights are dequantized as DequantizeLinear does, (q - zero) * scale,
and the compiler calibrates the result like any float model. Not through DequantizeLinear nodes and
passes/qdq_import.py: those keep a model's scales for a bit-exact compile, while these weight scales are
asymmetric (refused there), the activations have none, and DQ nodes would switch off the shape folding such
models need. Anything else reading an integer tensor is refused, naming the node.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import UnsupportedError
from .numerics import dequantize

INTEGER_OPS = {"ConvInteger": "Conv", "MatMulInteger": "MatMul"}
DYNAMIC_LSTM = "DynamicQuantizeLSTM"  # com.microsoft
# What is left of a dynamically quantized model after the rewrite: refused.
DYNAMIC_OPS = set(INTEGER_OPS) | {"DynamicQuantizeLinear", DYNAMIC_LSTM}
# LSTM attributes of opset 13 (DynamicQuantizeLSTM has the same ones).
LSTM_ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
              "input_forget")


def has_dynamic(model: onnx.ModelProto) -> bool:
    return any(n.op_type in DYNAMIC_OPS for n in model.graph.node)


class _View:
    """The producers, readers and constants of a GraphProto, for matching. `nodes` holds the node objects
    the rewrite compares by identity (protobuf may hand out new wrappers on each access)."""

    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.nodes = list(g.node)
        self.inits = {t.name: t for t in g.initializer}
        self.producer = {o: n for n in self.nodes for o in n.output if o}
        self.readers: dict[str, list] = defaultdict(list)
        for n in self.nodes:
            for i in n.input:
                self.readers[i].append(n)
        self.outputs = {o.name for o in g.output}
        self.new_inits: dict[str, np.ndarray] = {}

    def const(self, name: str):
        return numpy_helper.to_array(self.inits[name]) if name in self.inits else None

    def only_reader(self, name: str):
        readers = self.readers.get(name, [])
        return readers[0] if len(readers) == 1 and name not in self.outputs else None

    def add(self, base: str, value: np.ndarray) -> str:
        name, i = base, 1
        while name in self.inits or name in self.producer or name in self.new_inits:
            name, i = f"{base}_{i}", i + 1
        self.new_inits[name] = value
        return name


def _input(node, i: int) -> str:
    return node.input[i] if i < len(node.input) else ""


def _attr(node, name: str, default=None):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _where(node) -> str:
    return f"{node.op_type} '{node.name or node.output[0]}'"


def _const_input(view: _View, node, i: int, what: str, default=None):
    """Input i of `node` as an array: `default` when absent, refused when computed at run time."""
    name = _input(node, i)
    if not name:
        return default
    value = view.const(name)
    if value is None:
        raise UnsupportedError(f"{_where(node)}: {what} '{name}' is not constant; only constant weights "
                               f"of a dynamically quantized model can be dequantized")
    return value


def _channel_values(value: np.ndarray, n: int, axis: int, node, what: str) -> np.ndarray:
    """A scalar, or the `n` values `value` holds along its `axis` (size 1 elsewhere); refused otherwise."""
    if value.size == 1:
        return value.reshape(())
    if -value.ndim <= axis < value.ndim and value.shape[axis] == n and value.size == n:
        return value.reshape(-1)
    raise UnsupportedError(f"{_where(node)}: {what} of shape {list(value.shape)} (expected one value or "
                           f"{n}, one per output channel)")


def _weight_scale(view: _View, name: str, x_scale: str):
    """The constant w_scale of a `Mul(x_scale, w_scale)` producing `name` (None if it is not one)."""
    mul = view.producer.get(name)
    if mul is None or mul.op_type != "Mul" or x_scale not in mul.input:
        return None
    other = mul.input[1] if mul.input[0] == x_scale else mul.input[0]
    return view.const(other)


def _integer_bias(view: _View, add, acc: str, x_scale: str, w_scale: np.ndarray, node) -> tuple[np.ndarray, list]:
    """The float bias an older onnxruntime adds to the int32 result: Add(acc, Reshape(Cast(Floor(Div(bias,
    Mul(x_scale, w_scale)))))); returns (bias, the nodes of that chain)."""
    term = add.input[1] if add.input[0] == acc else add.input[0]
    chain, name = [], term
    for op in ("Reshape", "Cast", "Floor", "Div"):
        step = view.producer.get(name)
        if step is None or step.op_type != op:
            chain = None
            break
        chain.append(step)
        name = step.input[0]
    if chain is not None:
        div = chain[-1]
        bias = view.const(div.input[0])
        scale = _weight_scale(view, div.input[1], x_scale)
        if bias is not None and scale is not None and np.array_equal(scale, w_scale):
            return bias.astype(np.float32), chain + [view.producer[div.input[1]]]
    raise UnsupportedError(f"{_where(node)}: its int32 result is added to '{term}', which is not a bias "
                           f"quantized as Floor(bias / (x_scale * w_scale)); cannot recover the float bias")


def _integer_op(view: _View, node) -> tuple[onnx.NodeProto, list]:
    """The float Conv/MatMul for a ConvInteger/MatMulInteger and its dequantization; (new node, the nodes
    it replaces, which may now be dead)."""
    x_q = node.input[0]
    dq = view.producer.get(x_q)
    if dq is None or dq.op_type != "DynamicQuantizeLinear" or dq.output[0] != x_q \
            or _input(node, 2) != dq.output[2]:
        raise UnsupportedError(f"{_where(node)}: input '{x_q}' is not quantized by a DynamicQuantizeLinear "
                               f"(with its zero point); only dynamically quantized activations are supported")
    x, x_scale = dq.input[0], dq.output[1]
    w_q = _const_input(view, node, 1, "weight")
    w_zero = _const_input(view, node, 3, "weight zero point", np.zeros((), w_q.dtype))
    conv = node.op_type == "ConvInteger"
    # Convolution weights [M, C, k...]: channel axis 0. MatMul weights [..., K, N]: one value per column.
    n_out, axis = (w_q.shape[0], 0) if conv else (w_q.shape[-1], w_q.ndim - 1)
    replaced, bias = [node], None
    step = view.only_reader(node.output[0])
    if step is not None and step.op_type == "Add" and conv:
        add = step
        step = view.only_reader(add.output[0])
    else:
        add = None
    if step is None or step.op_type != "Cast" or _attr(step, "to") != onnx.TensorProto.FLOAT:
        raise UnsupportedError(f"{_where(node)}: its int32 result is not (only) cast to float; integer "
                               f"tensors between ops are not supported")
    mul = view.only_reader(step.output[0])
    w_scale = None
    if mul is not None and mul.op_type == "Mul":
        scale_in = mul.input[1] if mul.input[0] == step.output[0] else mul.input[0]
        w_scale = _weight_scale(view, scale_in, x_scale)
    if w_scale is None:
        raise UnsupportedError(f"{_where(node)}: its result is not multiplied by x_scale * a constant weight "
                               f"scale; not onnxruntime's dynamic quantization")
    # The scale multiplies the float result [N, M, spatial...] (Conv) or [..., N] (MatMul): right-aligned,
    # its channel axis is the result's axis 1 or last one. The zero point is 1-D along the weight's axis.
    scale_axis = w_scale.ndim - (w_q.ndim - 1) if conv else -1
    scale = _channel_values(w_scale.astype(np.float32), n_out, scale_axis, node, "weight scale")
    zero = _channel_values(w_zero, n_out, 0, node, "weight zero point").astype(np.int32)
    along = [n_out if d == axis else 1 for d in range(w_q.ndim)]
    scale, zero = scale.reshape(along if scale.ndim else ()), zero.reshape(along if zero.ndim else ())
    if add is not None:
        bias, chain = _integer_bias(view, add, node.output[0], x_scale, w_scale, node)
        if bias.size != n_out:
            raise UnsupportedError(f"{_where(node)}: bias of {bias.size} values for {n_out} output channels")
        replaced += [add] + chain
    weights = dequantize(w_q.astype(np.int32) - zero, scale)
    inputs = [x, view.add(f"{node.input[1]}__float", weights)]
    if bias is not None:
        inputs.append(view.add(f"{node.input[1]}__bias", bias.reshape(-1)))
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute} if conv else {}
    new = helper.make_node(INTEGER_OPS[node.op_type], inputs, [mul.output[0]], name=node.name or mul.output[0],
                           **attrs)
    replaced += [step, mul, view.producer.get(mul.input[0]), view.producer.get(mul.input[1]), dq]
    return new, [n for n in replaced if n is not None]


def _per_gate_row(value: np.ndarray) -> np.ndarray:
    """A DynamicQuantizeLSTM scale or zero point ([], [D], [D, 1] or [D, 4H]) shaped [D or 1, 1, 4H or 1], to
    broadcast against its weights [D, in, 4H]."""
    return value.reshape((value.shape[0] if value.ndim else 1, 1, value.shape[-1] if value.ndim > 1 else 1))


def _lstm(view: _View, node) -> onnx.NodeProto:
    """com.microsoft DynamicQuantizeLSTM -> ONNX LSTM: W [D, I, 4H] and R [D, H, 4H] dequantized (one scale
    per direction, or per direction and gate row) and transposed to ONNX's [D, 4H, I] and [D, 4H, H]."""
    mats = []
    for i, what in ((1, "W"), (2, "R")):
        q = _const_input(view, node, i, what)
        scale = _const_input(view, node, 8 if what == "W" else 10, f"{what}_scale")
        zero = _const_input(view, node, 9 if what == "W" else 11, f"{what}_zero_point", np.zeros((), q.dtype))
        shapes = {(), (1,), (q.shape[0],), (q.shape[0], 1), (q.shape[0], q.shape[2]), (q.shape[0], 1, q.shape[2])}
        for value, name in ((scale, "scale"), (zero, "zero point")):
            if value.shape not in shapes:
                raise UnsupportedError(f"{_where(node)}: {what} {name} of shape {list(value.shape)}")
        values = dequantize(q.astype(np.int32) - _per_gate_row(zero).astype(np.int32),
                            _per_gate_row(scale).astype(np.float32))
        mats.append(view.add(f"{node.input[i]}__float", np.ascontiguousarray(values.transpose(0, 2, 1))))
    inputs = [node.input[0], *mats] + [_input(node, i) for i in range(3, 8)]
    while inputs and not inputs[-1]:
        inputs.pop()
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    unknown = sorted(set(attrs) - set(LSTM_ATTRS))
    if unknown:
        raise UnsupportedError(f"{_where(node)}: attributes {', '.join(unknown)} have no ONNX LSTM equivalent")
    return helper.make_node("LSTM", inputs, list(node.output), name=node.name or node.output[0], **attrs)


def rewrite(model: onnx.ModelProto) -> int:
    """In place: every dynamically quantized op becomes its float equivalent (see the module docstring);
    returns how many were rewritten. Refuses what it does not recognize, naming the node."""
    view = _View(model)
    g = model.graph
    replaced: dict[int, onnx.NodeProto] = {}
    removed: set[int] = set()  # the dequantizing chains, bias chains, DynamicQuantizeLinear, scale products
    for node in view.nodes:
        if node.op_type in INTEGER_OPS:
            replaced[id(node)], gone = _integer_op(view, node)
            removed.update(id(n) for n in gone[1:])
        elif node.op_type == DYNAMIC_LSTM and node.domain == "com.microsoft":
            replaced[id(node)] = _lstm(view, node)
    removed -= set(replaced)
    while True:  # what something else still reads stays (and is refused below if it is a dynamic op)
        kept = [replaced.get(id(n), n) for n in view.nodes if id(n) not in removed]
        read = {i for n in kept for i in n.input} | {o.name for o in g.output}
        read -= {o for n in kept for o in n.output}  # the replacements compute the dequantized results
        still = {id(n) for n in view.nodes if id(n) in removed and read & set(n.output)}
        if not still:
            break
        removed -= still
    for node in kept:
        if node.op_type in DYNAMIC_OPS:
            readers = [r.name or r.output[0] for r in kept if set(r.input) & set(node.output)]
            raise UnsupportedError(f"{_where(node)} (read by {', '.join(readers) or 'the graph outputs'}): a "
                                   f"dynamically quantized op other than a ConvInteger/MatMulInteger with "
                                   f"constant weights dequantized by Cast -> Mul; cannot be turned back into float")
    del g.node[:]
    g.node.extend(kept)
    read = {i for n in g.node for i in n.input} | {o.name for o in g.output} | {i.name for i in g.input}
    used = [t for t in g.initializer if t.name in read]  # the integer weights, scales and zero points go
    del g.initializer[:]
    g.initializer.extend(used)
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in view.new_inits.items())
    return len(replaced)
