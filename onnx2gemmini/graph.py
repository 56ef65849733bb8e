"""The compiler's graph: plain nodes for the rewrite passes, read-only views for the op handlers.

Attributes are decoded once, with the op schema's defaults filled in, and inputs are reachable by the
names the ONNX spec gives them (X, W, B, ...), so a handler never touches protobuf.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import ModelError, UnsupportedError


@dataclass(frozen=True)
class ValueInfo:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    # an integer input (token ids): how many rows the tables it indexes have (valid ids: -limit .. limit-1)
    index_limit: int | None = None
    # an integer input that masks softmaxes (nonzero: attend), by the strictest form it masks with
    # (passes/input_mask.py): "query_key", "padding" or "causal"; "" for any other input
    attention_mask: str = ""


@dataclass(frozen=True)
class FusedPool:
    """A MaxPool moved into the conv before it (passes/fuse_maxpool.py): square window, one stride and
    padding, each at most 3 (config_st's 2-bit fields)."""

    size: int
    stride: int
    padding: int
    node: str            # the MaxPool node it replaces


@dataclass(frozen=True)
class Fused:
    """What the rewrite passes moved into a node, read by the handlers and the golden."""

    relu: bool = False                         # a following Relu or Clip(0, hi)
    clip: tuple[float, float] | None = None    # Clip(0, hi): the output scale becomes hi/127
    activation_node: str | None = None         # the Relu/Clip node absorbed
    pool: FusedPool | None = None              # a following MaxPool (convs only)
    bias: str | None = None                    # MatMul + Add of a per-channel constant: that initializer
    # Mul(x, f(x)) with f a sigmoid-like activation (SiLU, hard swish): f's op type and sorted attributes;
    # the Mul then reads x alone and x * f(x) is one lookup table (passes/fuse_gate.py)
    gate: tuple[str, tuple] | None = None
    # LSTM/GRU whose input projection X·Wᵀ (+ Wb) is a MatMul before it (passes/recurrent_projection.py): its X
    # is that projection and its W the 0/1 selection of each direction's gate columns
    projected: bool = False
    # that projection MatMul writes Gemmini's raw int32 accumulators (full_C) at scale s_in*s_w, which the
    # recurrence reads: no int8 rounding or clipping between the projection and the gates
    accumulate: bool = False
    # Softmax(x + mask) or Softmax(Where(cond, -inf, x)) with a constant attention mask (passes/fuse_mask.py):
    # the initializer holding which positions are kept (int8 0/1, shaped like the trailing axes of x)
    mask: str | None = None
    # Softmax(x + M) with M computed from an integer model input (passes/input_mask.py): (that input, form),
    # form: kernels.MASK_FORMS ("padding": position k kept where mask[b, k] != 0; "causal": and k <= q;
    # "query_key": and mask[b, q] != 0)
    input_mask: tuple[str, str] | None = None
    # Gather(table, position ids) whose ids count the non-padding token ids up to each position (RoBERTa's
    # create_position_ids_from_input_ids; passes/index_paths.py): the pad id; the Gather reads the token ids
    positions: int | None = None
    # A chain of elementwise ops computing a function of one tensor x (GELU written out with Erf or Tanh, Mish,
    # x * 0.5 ...; passes/fuse_elementwise.py): ((op type, operands, sorted attributes), ...) in order, each
    # operand ("x",), ("step", k) for an earlier op's result or ("const", value, dtype name); the node, an
    # ElementwiseChain, reads x alone and the last op's result is its output: one lookup table of x
    chain: tuple | None = None
    # MatMul(A, B) then Softmax over its last axis, on Gemmini's normalizer (passes/fuse_softmax.py, configs
    # with has_normalizations): the scalar the scores were multiplied by between the two (1.0 if nothing);
    # the MatMul writes the Softmax's output
    softmax: float | None = None
    # Sqrt(x*x + y*y) of two activations (passes/fuse_magnitude.py): the Sqrt reads x and y and computes the
    # magnitude in float32 between their DequantizeLinear and its QuantizeLinear
    magnitude: bool = False
    # and the constant added to the scores before the Softmax (Swin's relative position bias): its initializer;
    # it becomes the matmul's int32 bias D, one per batch
    softmax_bias: str | None = None


@dataclass
class Node:
    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    domain: str = ""
    fused: Fused = field(default_factory=Fused)  # replaced (never mutated) by the fusion passes


@dataclass
class Graph:
    name: str
    opset: int
    nodes: list[Node]
    initializers: dict[str, np.ndarray]
    inputs: list[ValueInfo]
    outputs: list[ValueInfo]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, np.dtype]
    # Scales a pre-quantized (QDQ) model fixes: activation tensor -> scale, weight initializer -> scale.
    fixed_scales: dict[str, float] = field(default_factory=dict)
    fixed_weight_scales: dict[str, float | tuple] = field(default_factory=dict)  # (scales, axis): per channel
    # Convs whose output channels passes/sort_channels.py sorted by weight range: node -> weight-scale group size
    channel_groups: dict[str, int] = field(default_factory=dict)

    def copy(self) -> "Graph":
        return Graph(self.name, self.opset, copy.deepcopy(self.nodes), dict(self.initializers),
                     list(self.inputs), list(self.outputs), dict(self.shapes), dict(self.dtypes),
                     dict(self.fixed_scales), dict(self.fixed_weight_scales), dict(self.channel_groups))

    def producer(self, tensor: str) -> Node | None:
        for node in self.nodes:
            if tensor in node.outputs:
                return node
        return None

    def consumers(self, tensor: str) -> list[Node]:
        return [n for n in self.nodes if tensor in n.inputs]

    def is_graph_output(self, tensor: str) -> bool:
        return any(o.name == tensor for o in self.outputs)

    def only_consumer(self, tensor: str) -> Node | None:
        """The single node reading `tensor`, if it is read once and is not a graph output."""
        users = self.consumers(tensor)
        if len(users) == 1 and not self.is_graph_output(tensor) and users[0].inputs.count(tensor) == 1:
            return users[0]
        return None

    def const(self, tensor: str) -> np.ndarray | None:
        return self.initializers.get(tensor)

    def is_index(self, tensor: str) -> bool:
        """Whether `tensor` is an integer model input (token ids): read as it is, never quantized."""
        return any(vi.name == tensor and np.dtype(vi.dtype).kind in "iu" for vi in self.inputs)

    def activations(self, node: Node) -> list[str]:
        """The node's inputs that carry an int8 scale: neither constants nor integer model inputs."""
        return [i for i in node.inputs if i and i not in self.initializers and not self.is_index(i)]

    def index_limits(self) -> dict[str, int]:
        """Integer model input -> the number of rows its lookups can address (the smallest table it indexes)."""
        limits: dict[str, int] = {}
        for node in self.nodes:
            if node.op_type == "Gather" and len(node.inputs) > 1 and self.is_index(node.inputs[1]):
                data = self.initializers.get(node.inputs[0])
                if data is not None:
                    rows = int(data.shape[node.attrs.get("axis", 0) % data.ndim])
                    limits[node.inputs[1]] = min(limits.get(node.inputs[1], rows), rows)
        return limits


def decode_attributes(node: onnx.NodeProto, opset: int) -> dict[str, Any]:
    """Attributes of `node` as Python values, with the schema's defaults filled in."""
    attrs: dict[str, Any] = {}
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        schema = None
    if schema is not None:
        for name, attr in schema.attributes.items():
            if attr.default_value.type != onnx.AttributeProto.UNDEFINED:
                attrs[name] = _plain(helper.get_attribute_value(attr.default_value))
    for attr in node.attribute:
        attrs[attr.name] = _plain(helper.get_attribute_value(attr))
    return attrs


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return value


def input_names(op_type: str, opset: int, domain: str = "") -> list[str]:
    """The spec names of an op's inputs (variadic last input repeated by index)."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return []
    return [p.name for p in schema.inputs]


class NodeView:
    """Read-only view of one node for handlers: spec-named inputs, shapes, constants, decoded attributes."""

    def __init__(self, node: Node, graph: Graph):
        self._node = node
        self._graph = graph
        self.name = node.name
        self.op_type = node.op_type
        self.inputs: tuple[str, ...] = tuple(node.inputs)
        self.outputs: tuple[str, ...] = tuple(node.outputs)
        self.attrs: Mapping[str, Any] = MappingProxyType(dict(node.attrs))
        self.fused: Fused = node.fused
        self._spec = input_names(node.op_type, graph.opset, node.domain)

    def input(self, spec_name: str) -> str | None:
        """Tensor name bound to the spec input `spec_name` (None when absent)."""
        if spec_name not in self._spec:
            raise KeyError(f"{self.op_type} has no input named {spec_name}")
        i = self._spec.index(spec_name)
        if i < len(self.inputs) and self.inputs[i]:
            return self.inputs[i]
        return None

    @property
    def output(self) -> str:
        return self.outputs[0]

    def shape(self, tensor: str) -> tuple[int, ...]:
        return self._graph.shapes[tensor]

    def const(self, tensor: str | None) -> np.ndarray | None:
        if tensor is None:
            return None
        value = self._graph.const(tensor)
        if value is not None:
            value = value.view()
            value.flags.writeable = False
        return value

    def is_const(self, tensor: str | None) -> bool:
        return tensor is not None and tensor in self._graph.initializers

    def is_index(self, tensor: str | None) -> bool:
        """Whether `tensor` is an integer model input (token ids)."""
        return tensor is not None and self._graph.is_index(tensor)

    def used(self, tensor: str | None) -> bool:
        """Whether any node reads `tensor` or the graph returns it."""
        return bool(tensor) and (bool(self._graph.consumers(tensor)) or self._graph.is_graph_output(tensor))

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)


# Model input types: float32 data, or integer ids that only index constant tables (embedding lookups).
INPUT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.INT32)


def from_onnx(model: onnx.ModelProto) -> Graph:
    """Build the compiler graph from a loaded, shape-inferred, fully static model."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    g = model.graph
    initializers = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, np.dtype] = {}
    for name, arr in initializers.items():
        shapes[name], dtypes[name] = tuple(arr.shape), arr.dtype
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
        shapes[vi.name] = dims
        dtypes[vi.name] = helper.tensor_dtype_to_np_dtype(t.elem_type) if t.elem_type else np.dtype(np.float32)
    nodes = []
    used_names: set[str] = set()
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        while name in used_names:
            name = f"{name}_{i}"
        used_names.add(name)
        nodes.append(Node(name, n.op_type, list(n.input), list(n.output), decode_attributes(n, opset), n.domain))

    def info(vi: onnx.ValueInfoProto, accepted: tuple[int, ...] = (onnx.TensorProto.FLOAT,)) -> ValueInfo:
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type" or vi.type.tensor_type.elem_type not in accepted:
            what = onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type) if kind == "tensor_type" \
                else (kind or "untyped").replace("_type", "")
            raise UnsupportedError(f"graph input/output '{vi.name}' is {what}: onnx2gemmini compiles models "
                                   f"with float32 outputs and float32 or integer (int64, int32: token id) inputs")
        if vi.name not in shapes or any(d < 0 for d in shapes[vi.name]):
            raise ModelError(f"tensor '{vi.name}' has no static shape after shape inference; "
                             f"fix it with --input-shape{_custom_ops_hint(g)}")
        return ValueInfo(vi.name, shapes[vi.name], dtypes[vi.name])

    inputs = [info(vi, INPUT_TYPES) for vi in g.input if vi.name not in initializers]
    outputs = [info(vi) for vi in g.output]
    graph = Graph(g.name or "model", opset, nodes, initializers, inputs, outputs, shapes, dtypes)
    limits = graph.index_limits()
    graph.inputs = [dataclasses.replace(vi, index_limit=limits.get(vi.name)) if graph.is_index(vi.name) else vi
                    for vi in inputs]
    for node in nodes:
        for out in node.outputs:
            if out and (out not in shapes or any(d < 0 for d in shapes[out])):
                raise ModelError(f"node '{node.name}' ({node.op_type}): output '{out}' has no static shape "
                                 f"after shape inference")
    return graph


def _custom_ops_hint(g: onnx.GraphProto) -> str:
    """Why a shape may be unknown whatever the input shapes: ONNX infers no shapes through ops outside its
    own domain (onnxruntime's com.microsoft ops), and then drops its errors downstream."""
    custom = [n for n in g.node if n.domain not in ("", "ai.onnx")]
    if not custom:
        return ""
    named = ", ".join(f"{n.domain}.{n.op_type} '{n.name}'" for n in custom[:3])
    return f" (or the ops ONNX cannot infer shapes through: {named}{', ...' if len(custom) > 3 else ''})"


def topological(nodes: Iterable[Node], available: Iterable[str]) -> list[Node]:
    """Nodes in an order where every input is produced before it is read."""
    ready = set(available) | {""}
    pending = list(nodes)
    ordered: list[Node] = []
    while pending:
        progressed = False
        for node in list(pending):
            if all(i in ready for i in node.inputs):
                ordered.append(node)
                ready.update(node.outputs)
                pending.remove(node)
                progressed = True
        if not progressed:
            names = ", ".join(n.name for n in pending[:5])
            raise ModelError(f"graph has a cycle or reads undefined tensors at nodes: {names}")
    return ordered
