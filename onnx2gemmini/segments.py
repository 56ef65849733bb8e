"""Run a float model piece by piece when all of its activations together would not fit in memory.

Why: calibration and the checks read every activation of a sample, and onnxruntime asked for all of them
holds them all at once (68 GiB of float32 for SAM's image encoder at 1024x1024, by its static shapes). So the graph is cut, in
node order, into consecutive pieces whose values fit a budget: what a piece reads from earlier pieces plus
everything it computes. Each piece is its own onnxruntime session, run in order; only the values later
pieces read are carried from one to the next. When every tensor is asked for (calibration), every tensor a
piece computes is one of its outputs, so onnxruntime fuses across none of them, exactly as it fuses across
none in the whole model asked for all: the values are the whole model's, bit for bit. A model that fits the
budget is one piece, the whole model's own session.

The budget is the `activation_bytes` limit (limits.py), counting a piece's values twice (onnxruntime's
buffers and the arrays they are copied into exist together as a run returns); a single node whose inputs,
outputs and the values live across it exceed it is refused with that limit's error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import onnx
from onnx import helper

from . import limits
from .errors import ModelError
from .ort_session import run as ort_run
from .ort_session import session


HANDOVER = 2  # a run's values are held twice while onnxruntime copies them out (measured: SAM's peak RSS)
SHAPE_CONSTANT = 64  # elements: a constant this small goes into shape inference (it may decide a shape)


@dataclass
class Piece:
    """Consecutive nodes of the model, run as one session: `inputs` are fed (model inputs and values of earlier
    pieces), `outputs` are the asked-for values it computes and those later pieces read."""

    nodes: list
    inputs: list[str]
    outputs: list[str]
    nbytes: int
    sess: object = None


class Pieces:
    """The float model's values for one sample, the asked-for ones (`wanted`) piece by piece (`stream`), or
    as `sess.run` gives them (`run`). One piece when the whole model's values fit `budget` (default: the
    `activation_bytes` limit in force)."""

    def __init__(self, model: onnx.ModelProto, wanted: list[str], budget: int | None = None):
        self.wanted = list(dict.fromkeys(wanted))
        self.budget = limits.current().activation_bytes if budget is None else budget
        self.model_outputs = model_outputs = [o.name for o in model.graph.output]
        infos = _value_infos(model)
        sizes = _sizes(infos)
        total = _total_bytes(model, sizes)
        if fits(total, self.budget):
            self.pieces = [Piece(list(model.graph.node), [i.name for i in model.graph.input],
                                 list(dict.fromkeys(model_outputs + self.wanted)), total)]
            self.pieces[0].sess = session(model, self.wanted)
        else:
            self.pieces = _cut(model, set(self.wanted) | set(model_outputs), self.budget // HANDOVER, sizes)
            for piece in self.pieces:
                piece.sess = session(_piece_model(model, piece, infos), arena=False)
        # what pieces k+1.. read: the values carried past piece k
        self._later = [set().union(*(p.inputs for p in self.pieces[k + 1:])) for k in range(len(self.pieces))]

    @property
    def whole(self) -> bool:
        return len(self.pieces) == 1

    def _values(self, feed: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        """Per piece, every value it outputs; only what later pieces read is carried on."""
        carried = dict(feed)
        for piece, later in zip(self.pieces, self._later):
            values = dict(zip(piece.outputs, ort_run(piece.sess, piece.outputs,
                                                     {i: carried[i] for i in piece.inputs})))
            carried = {n: v for n, v in {**carried, **values}.items() if n in later}
            yield values
            del values  # not held while the next piece runs

    def stream(self, feed: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        """Per piece, in order, the asked-for values it computes (the asked-for model inputs with the first)."""
        wanted = set(self.wanted)
        first = {k: v for k, v in feed.items() if k in wanted}
        for values in self._values(feed):
            yield {**first, **{n: v for n, v in values.items() if n in wanted}}
            first = {}
            del values  # not held while the next piece runs

    def run(self, names: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        """`sess.run(names, feed)`: the values of `names` (asked for or model outputs), holding only those."""
        if self.whole:
            return ort_run(self.pieces[0].sess, list(names), feed)
        keep = set(names)
        found = {k: v for k, v in feed.items() if k in keep}
        for values in self._values(feed):
            found.update({n: v for n, v in values.items() if n in keep})
            del values  # not held while the next piece runs
        return [found[n] for n in names]


class Taker:
    """The asked-for values of one sample in the order a reader takes them: `take(name)` runs pieces until
    `name` is computed and hands it over (each value once); values computed but not yet taken are kept, so
    a reader taking them in about the model's node order holds about one piece at a time."""

    def __init__(self, pieces: Pieces, feed: dict[str, np.ndarray]):
        self._stream = pieces.stream(feed)
        self._ready: dict[str, np.ndarray] = {}

    def take(self, name: str) -> np.ndarray:
        while name not in self._ready:
            try:
                self._ready.update(next(self._stream))
            except StopIteration:
                raise KeyError(f"'{name}' is not an asked-for value of the float model") from None
        return self._ready.pop(name)


def _cut(model: onnx.ModelProto, wanted: set[str], budget: int, sizes: dict[str, int]) -> list[Piece]:
    """Consecutive pieces, each as many nodes as keep (values live into it) + (values it computes) within
    `budget`; a node that alone exceeds it is refused."""
    g = model.graph
    nodes = list(g.node)
    constants = {t.name for t in g.initializer}
    reads = [sorted(_reads(n) - constants) for n in nodes]
    last_read: dict[str, int] = {}
    for k, names in enumerate(reads):
        for name in names:
            last_read[name] = k
    produced_at = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    graph_inputs = [i.name for i in g.input if i.name not in constants]
    pieces, start = [], 0
    while start < len(nodes):
        live = [t for t in graph_inputs + [o for n in nodes[:start] for o in n.output if o]
                if last_read.get(t, -1) >= start]
        live_bytes = sum(sizes.get(t, 0) for t in live)
        end, made = start, 0
        while end < len(nodes):
            step = sum(sizes.get(o, 0) for o in nodes[end].output if o)
            if end > start and live_bytes + made + step > budget:
                break
            made += step
            end += 1
        if live_bytes + made > budget:
            node = nodes[start]
            limits.exceeded("activation_bytes", f"the values live at node '{node.name or node.op_type}' "
                            f"({node.op_type}) of one sample, twice while onnxruntime hands them over",
                            HANDOVER * (live_bytes + made), ModelError,
                            limits.current().replace(activation_bytes=HANDOVER * budget))
        inside = {o for n in nodes[start:end] for o in n.output if o}
        inputs = [t for t in dict.fromkeys(t for names in reads[start:end] for t in names) if t not in inside]
        outputs = [o for o in inside if o in wanted or last_read.get(o, -1) >= end]
        outputs.sort(key=lambda o: (produced_at[o], o))
        pieces.append(Piece(nodes[start:end], inputs, outputs, live_bytes + made))
        start = end
    return pieces


def _piece_model(model: onnx.ModelProto, piece: Piece, typed: dict) -> onnx.ModelProto:
    """The piece as a model of its own: its nodes, the weights they read, typed inputs."""
    used = set().union(*(_reads(n) for n in piece.nodes))
    weights = [t for t in model.graph.initializer if t.name in used]
    inputs = [typed.get(name) or helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
              for name in piece.inputs]
    outputs = [typed.get(name) or helper.make_empty_tensor_value_info(name) for name in piece.outputs]
    graph = helper.make_graph(piece.nodes, model.graph.name, inputs, outputs, weights)
    sub = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                            functions=list(model.functions))
    return sub


def _reads(node: onnx.NodeProto) -> set[str]:
    """Every name a node reads, the outer-scope names of its subgraphs (If, Loop, Scan) included."""
    names = {i for i in node.input if i}
    for attr in node.attribute:
        for sub in list(attr.g.node if attr.HasField("g") else []) + [n for g in attr.graphs for n in g.node]:
            names |= _reads(sub)
    return names


def _value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Every value's type and shape: the model's own, else shape inference on the graph with only its small
    constants (pads, shapes, axes: what output shapes depend on); the weights become typed inputs, which
    inference does not copy."""
    g = model.graph
    infos = {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)}
    listed = {vi.name for vi in g.input}
    small = [t for t in g.initializer if t.name not in listed and math.prod(t.dims) <= SHAPE_CONSTANT]
    weights = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in g.initializer
               if t.name not in listed and math.prod(t.dims) > SHAPE_CONSTANT]
    skeleton = helper.make_model(helper.make_graph(list(g.node), g.name, list(g.input) + weights, list(g.output),
                                                   small),
                                 opset_imports=list(model.opset_import), ir_version=model.ir_version,
                                 functions=list(model.functions))
    for vi in list(onnx.shape_inference.infer_shapes(skeleton).graph.value_info):
        infos.setdefault(vi.name, vi)
    return infos


def _sizes(infos: dict[str, onnx.ValueInfoProto]) -> dict[str, int]:
    """Bytes of every value with a static shape, counted as float32 or wider."""
    sizes = {}
    for name, vi in infos.items():
        t = vi.type.tensor_type
        if not t.HasField("shape") or not all(d.HasField("dim_value") for d in t.shape.dim):
            continue
        try:
            itemsize = helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
        except (KeyError, ValueError, TypeError):
            itemsize = 4
        sizes[name] = math.prod(d.dim_value for d in t.shape.dim) * max(itemsize, 4)
    return sizes


def fits(total: int, budget: int) -> bool:
    """Whether values of `total` bytes run as one piece within `budget` (held twice as a run returns)."""
    return HANDOVER * total <= budget


def activation_bytes(model: onnx.ModelProto) -> int:
    """The float model's values of one sample together, by shape inference (what `Pieces` weighs)."""
    return _total_bytes(model, _sizes(_value_infos(model)))


def _total_bytes(model: onnx.ModelProto, sizes: dict[str, int]) -> int:
    """All values of one sample together (model inputs and every computed value with a static shape)."""
    g = model.graph
    constants = {t.name for t in g.initializer}
    names = [i.name for i in g.input if i.name not in constants] + [o for n in g.node for o in n.output if o]
    return sum(sizes.get(n, 0) for n in dict.fromkeys(names))
