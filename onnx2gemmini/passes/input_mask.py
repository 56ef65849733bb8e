"""An attention mask computed from an integer model input (Hugging Face's `attention_mask`, 1 = attend):
the export builds an additive bias M from it (Cast, Unsqueeze, Sub, Mul by finfo.min, or Flatten / Gather /
And / Where in transformers 5) and adds it to the scores before every Softmax; transformers 5 then zeroes
NaN rows (Where(IsNaN(p), 0, p)).

That subgraph is not quantizable (M holds -3.4e38), so each Softmax(x + M) with M a function of one integer
input and constants becomes a Softmax masked by that input (fused.input_mask): position k of batch b is kept
where mask[b, k] != 0 (and k <= q for a causal mask). Which form M computes is not read off its ops: the
subgraph is run by onnxruntime on probe masks (all ones, every padding length, random patterns) and its bias
must equal the form's on every one of them, or nothing is fused. The golden QDQ model builds the same bias
from the input with standard ops (golden.py). Where(IsNaN(p), c, p) is p: int8 arithmetic makes no NaN.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import GemminiConfig
from ..graph import Graph, Node
from ..kernels import MASK_FORMS, attention_keep
from .fuse_mask import MASKED_BELOW
from .probe import LAYER_OPS, MAX_NODES, ancestors, drop_dead, probe_session

# What an attention mask's data must allow, least strict first (data.py refuses a row a form leaves empty).
STRICTNESS = ("query_key", "padding", "causal")
RANDOM_PROBES = 4


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = _drop_nan_guards(graph)
    forms: dict[str, tuple | None] = {}  # bias tensor -> (mask input, form, kept value or None), found once
    fused: list[Node] = []
    for node in list(graph.nodes):
        if node.op_type != "Softmax" or node.fused.mask or node.fused.input_mask or len(node.inputs) != 1:
            continue
        add = graph.producer(node.inputs[0])
        if add is None or graph.only_consumer(node.inputs[0]) is not node:
            continue
        if add.op_type == "Where" and len(add.inputs) == 3:
            found = _selected(graph, add, graph.shapes[node.inputs[0]], node.attrs.get("axis", -1))
            if found is not None:
                node.inputs = [found[0]]
                node.fused = replace(node.fused, input_mask=found[1:])
                graph.nodes.remove(add)
                fused.append(node)
                changes.append(f"{add.name} (Where of a {found[2]} mask from '{found[1]}') fused into {node.name}")
            continue
        if add.op_type != "Add":
            continue
        for x, bias in (add.inputs, add.inputs[::-1]):
            if bias not in forms:
                forms[bias] = _form(graph, bias, graph.shapes[x], node.attrs.get("axis", -1))
            if forms[bias] is not None and x != bias:
                mask, form, kept = forms[bias]
                node.fused = replace(node.fused, input_mask=(mask, form))
                if kept is None:
                    node.inputs = [x]
                    graph.nodes.remove(add)
                else:  # T5: a position bias where kept; the Add keeps it as a constant
                    name = f"{bias}__kept"
                    graph.initializers[name], graph.shapes[name] = kept, kept.shape
                    graph.dtypes[name] = np.dtype(np.float32)
                    add.inputs = [x, name]
                fused.append(node)
                changes.append(f"{add.name} (Add of a {form} mask from '{mask}'"
                               f"{'' if kept is None else ' over a constant bias'}) fused into {node.name}")
                break
    rows = _mask_rows(graph)
    if fused or rows:
        drop_dead(graph)
    strictest: dict[str, str] = {}
    for n in fused:  # the strictest form each input is used with: what its data must allow
        name, form = n.fused.input_mask
        strictest[name] = max(strictest.get(name, form), form, key=STRICTNESS.index)
    graph.inputs = [replace(vi, attention_mask=strictest[vi.name]) if vi.name in strictest else vi
                    for vi in graph.inputs]
    return changes + rows


def is_mask_input(graph: Graph, info) -> bool:
    """An integer model input that no lookup reads: a mask of 0 and 1 (the probes' values; data.py holds the
    data to them), never token ids, whose other values a mask's ops would not treat as 0 or 1."""
    return graph.is_index(info.name) and info.index_limit is None


def _mask_rows(graph: Graph) -> list[str]:
    """Mul(x, m) with m computed from a mask input and equal, on every probe, to mask[b, s] != 0 over x's
    [batch, positions, ...] rows (DeBERTa zeroes the embeddings of padded positions): a MaskRows node
    (ops/mask_rows.py) reading the mask itself."""
    changes = []
    for node in graph.nodes:
        if node.op_type != "Mul" or len(node.inputs) != 2:
            continue
        for x, m in (node.inputs, node.inputs[::-1]):
            x_shape = graph.shapes.get(x, ())
            if graph.const(x) is not None or graph.const(m) is not None or len(x_shape) < 2:
                continue
            nodes, leaves = ancestors(graph, m)
            mask = next(iter(leaves)) if len(leaves) == 1 else None
            info = next((vi for vi in graph.inputs if vi.name == mask), None)
            if info is None or not is_mask_input(graph, info) or tuple(info.shape) != tuple(x_shape[:2]) \
                    or len(nodes) > MAX_NODES or any(n.op_type in LAYER_OPS for n in nodes):
                continue
            try:
                probe = probe_session(graph, nodes, info, m)
            except Exception:  # noqa: BLE001 - not fused
                continue
            rows = lambda p: (p != 0).reshape(p.shape + (1,) * (len(x_shape) - 2))  # noqa: E731
            if all(_broadcasts_to(probe.run([m], {mask: p})[0], rows(p), x_shape)
                   for p in _probes(info.shape, np.dtype(info.dtype))):
                node.op_type, node.domain, node.inputs, node.attrs = "MaskRows", "onnx2gemmini", [x, mask], {}
                changes.append(f"{node.name} (Mul by rows of '{mask}') zeroes the masked positions' rows")
                break
    return changes


def _broadcasts_to(values: np.ndarray, rows: np.ndarray, shape: tuple[int, ...]) -> bool:
    try:
        return bool(np.array_equal(np.broadcast_to(values, shape), np.broadcast_to(rows, shape).astype(values.dtype)))
    except ValueError:
        return False


def _drop_nan_guards(graph: Graph) -> list[str]:
    """Where(IsNaN(t), c, t) -> t (its readers read t)."""
    changes = []
    for where in list(graph.nodes):
        if where.op_type != "Where" or len(where.inputs) != 3 or graph.is_graph_output(where.outputs[0]):
            continue
        test = graph.producer(where.inputs[0])
        if test is None or test.op_type != "IsNaN" or test.inputs[0] != where.inputs[2] \
                or graph.const(where.inputs[1]) is None:
            continue
        for reader in graph.consumers(where.outputs[0]):
            reader.inputs = [where.inputs[2] if i == where.outputs[0] else i for i in reader.inputs]
        graph.nodes.remove(where)
        if not graph.consumers(test.outputs[0]):
            graph.nodes.remove(test)
        changes.append(f"{where.name} (Where(IsNaN(x), c, x)) removed: int8 values are never NaN")
    return changes


def _selected(graph: Graph, where: Node, x_shape: tuple[int, ...], axis: int) -> tuple | None:
    """(scores, mask input, form) of Where(c, fill, scores) or Where(c, scores, fill) with a constant fill of at
    most MASKED_BELOW and c computed from a mask input (DeBERTa's masked_fill); None for anything else."""
    cond = where.inputs[0]
    for fill, x, masked_when in ((where.inputs[1], where.inputs[2], True), (where.inputs[2], where.inputs[1], False)):
        value = graph.const(fill)
        if value is None or graph.const(x) is not None or not np.all(np.asarray(value) <= MASKED_BELOW):
            continue
        found = _form(graph, cond, x_shape, axis, selects=masked_when, finite=bool(np.isfinite(value).all()))
        if found is not None:
            return (x,) + found[:2]
    return None


def _form(graph: Graph, bias: str, x_shape: tuple[int, ...], axis: int, selects: bool | None = None,
          finite: bool = True) -> tuple | None:
    """(mask input, form, kept) when `bias` is, on every probe, the additive mask of one of the forms over a
    constant bias `kept` (None: 0), the same wherever a position is kept; with `selects` (True or False), the
    condition of a Where that masks where it is `selects`. "query_key" leaves padded queries nothing: only
    with a finite masked value (`finite`, or the bias itself), whose rows come out uniform. Else None."""
    nodes, leaves = ancestors(graph, bias)
    if len(leaves) != 1 or not nodes or len(nodes) > MAX_NODES or len(x_shape) < 2 \
            or axis % len(x_shape) != len(x_shape) - 1 or any(n.op_type in LAYER_OPS for n in nodes):
        return None
    mask = next(iter(leaves))
    info = next((vi for vi in graph.inputs if vi.name == mask), None)
    if info is None or not is_mask_input(graph, info) or len(info.shape) != 2 or info.shape[0] != x_shape[0] \
            or info.shape[1] != x_shape[-1]:
        return None
    try:
        probe = probe_session(graph, nodes, info, bias)
    except Exception:  # noqa: BLE001 - a subgraph onnxruntime cannot run alone is simply not fused
        return None
    candidates, kept = list(MASK_FORMS), None
    for m in _probes(info.shape, np.dtype(info.dtype)):
        values = probe.run([bias], {mask: m})[0]
        if np.broadcast_shapes(values.shape, x_shape) != tuple(x_shape):
            return None
        if selects is not None:
            if values.dtype != np.bool_:
                return None
            masked = values if selects else ~values
        else:
            masked = values <= MASKED_BELOW
            finite = finite and bool(np.isfinite(values).all())
            if kept is None:  # the first probe keeps every position any form keeps: the bias where kept
                kept = np.where(masked, np.float32(0), values).astype(np.float32)
                if not np.isfinite(kept).all():
                    return None
            if not np.all(masked | (values == kept)):
                return None
        masked = np.broadcast_to(masked, x_shape)
        candidates = [f for f in candidates if np.array_equal(~masked, attention_keep(m, x_shape, f))]
        if not candidates:
            return None
    if candidates[0] == "query_key" and not finite:
        return None
    return mask, candidates[0], kept if kept is not None and kept.any() else None


def _probes(shape: tuple[int, int], dtype: np.dtype):
    batch, keys = shape
    yield np.ones(shape, dtype)
    for length in range(1, keys):
        yield (np.arange(keys)[None, :] < length).repeat(batch, 0).astype(dtype)
    rng = np.random.default_rng(0)
    for _ in range(RANDOM_PROBES):
        m = rng.integers(0, 2, shape).astype(dtype)
        m[:, rng.integers(0, keys)] = 1
        yield m
