"""Fold the model's shape computations (Shape -> Gather -> Concat -> Reshape/Pad ...) with onnxruntime.

Once every input shape is fixed, every tensor computed from Shape or Size outputs and constants alone is a
constant. onnxsim folds them with the shapes that ONNX shape inference predicts, and where the prediction is
wrong it bakes the wrong constant in: timm's "same" padding computes its pads from the input size, the
inference of the Pad with computed pads loses the spatial size, and a later Reshape's target came out
[-1, 3, 96, 8] where onnxruntime computes [1, 3, 96, 9]. Here the constants are what onnxruntime computes,
running the model once, so onnxsim and shape inference start from the true values.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from .ort_session import session

SOURCES = {"Shape", "Size"}
# Ops whose output can be as large as an activation although computed from shapes: left to onnxsim, which
# folds them under its size threshold.
LARGE = {"ConstantOfShape", "Expand", "Tile", "Range", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
MAX_ELEMENTS = 4096


def shape_derived(model: onnx.ModelProto) -> tuple[list[onnx.NodeProto], list[str]]:
    """(the nodes that compute only from shapes and constants, the tensors of theirs that other nodes or
    the graph's outputs read)."""
    g = model.graph
    constant = {t.name for t in g.initializer} | {""}
    derived: set[str] = set()
    nodes = []
    for node in g.node:  # graph order is topological
        if node.op_type in SOURCES:
            ok = True
        elif node.op_type in LARGE or node.op_type.startswith("Random") or any(a.g.node or a.graphs
                                                                              for a in node.attribute):
            ok = False
        else:
            ins = [i for i in node.input if i]
            ok = bool(ins) and all(i in derived or i in constant for i in ins) and any(i in derived for i in ins)
        if ok:
            nodes.append(node)
            derived.update(o for o in node.output if o)
    chosen = {id(n) for n in nodes}
    read_elsewhere = {i for n in g.node if id(n) not in chosen for i in _reads(n)} | {o.name for o in g.output}
    return nodes, [t for t in dict.fromkeys(o for n in nodes for o in n.output) if t in read_elsewhere]


def _reads(node: onnx.NodeProto) -> list[str]:
    """A node's inputs and what its subgraphs (If/Loop bodies) read from the enclosing graph."""
    names = list(node.input)
    for a in node.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for n in sub.node:
                names += _reads(n)
    return names


def fold(model: onnx.ModelProto) -> int:
    """Replace the shape computations of `model` (static input shapes) by the constants onnxruntime computes,
    and an If whose condition thereby becomes constant by the branch it takes; repeated while that folds
    more. Returns how many tensors became constants (and Ifs were resolved)."""
    total = 0
    for _ in range(4):
        done = _fold_once(model) + _resolve_ifs(model)
        total += done
        if not done:
            break
    return total


def _resolve_ifs(model: onnx.ModelProto) -> int:
    """Ifs with a constant condition, replaced by the nodes of the branch taken (its outputs renamed to the
    If's through Identity nodes)."""
    g = model.graph
    weights = {t.name: t for t in g.initializer}
    resolved, nodes = 0, []
    for node in g.node:
        cond = weights.get(node.input[0]) if node.op_type == "If" and node.input else None
        if cond is None or numpy_helper.to_array(cond).size != 1:
            nodes.append(node)
            continue
        taken = "then_branch" if bool(numpy_helper.to_array(cond).reshape(())) else "else_branch"
        branch = next(a.g for a in node.attribute if a.name == taken)
        g.initializer.extend(branch.initializer)
        nodes.extend(branch.node)
        nodes.extend(onnx.helper.make_node("Identity", [b.name], [o], name=f"{node.name}/{taken}/{o}")
                     for b, o in zip(branch.output, node.output) if o)
        resolved += 1
    if resolved:
        del g.node[:]
        g.node.extend(nodes)
    return resolved


def _fold_once(model: onnx.ModelProto) -> int:
    """Replace the shape computations of `model` (static input shapes) by the constants onnxruntime computes;
    returns how many tensors became constants. Leaves the model as it is when anything is unusual: a
    dynamic input, a session that will not build, a value that is not small."""
    g = model.graph
    if not any(n.op_type in SOURCES for n in g.node):
        return 0
    nodes, frontier = shape_derived(model)
    present = {o.name for o in g.output}
    if not frontier or any(t in present for t in frontier):  # a graph output from shapes alone: onnxsim's
        return 0
    feeds = _zero_inputs(model)
    if feeds is None:
        return 0
    try:
        sess = session(model, frontier, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                       log_level=4)
        values = dict(zip(frontier, sess.run(frontier, feeds)))
    except Exception:  # noqa: BLE001 - onnxsim and shape inference then see the model as it is
        return 0
    if any(np.asarray(v).size > MAX_ELEMENTS for v in values.values()):
        return 0
    for t in frontier:
        g.initializer.append(numpy_helper.from_array(np.asarray(values[t]), t))
    dead = {id(n) for n in nodes}
    kept = [n for n in g.node if id(n) not in dead]
    del g.node[:]
    g.node.extend(kept)
    read = {i for n in kept for i in _reads(n)} | {o.name for o in g.output}
    used = [t for t in g.initializer if t.name in read]  # the constants only the folded nodes read go too
    del g.initializer[:]
    g.initializer.extend(used)
    return len(frontier)


def _zero_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray] | None:
    """Zeros for every graph input that is not an initializer; None when a dimension is not fixed."""
    weights = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in weights:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        if not tt.HasField("shape") or any(d < 0 for d in dims):
            return None
        feeds[vi.name] = np.zeros(dims, onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
    return feeds
