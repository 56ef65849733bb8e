"""Shared by the passes that look at what an integer model input computes (input_mask.py, index_paths.py): the
subgraph between the input and a tensor, run alone by onnxruntime on probe values, and the nodes a fusion
leaves with nothing to read them.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from ..graph import Graph, Node, topological

# A mask's bias or a lookup's indices are a few element-wise and shape ops: a longer subgraph, or one with a
# layer in it (attention scores, computed from token ids), is not probed.
MAX_NODES = 32
LAYER_OPS = {"MatMul", "Gemm", "Conv", "Einsum", "Softmax", "LayerNormalization"}


def ancestors(graph: Graph, tensor: str) -> tuple[list[Node], set[str]]:
    """The nodes `tensor` is computed by, and the non-constant tensors they start from."""
    nodes, leaves, frontier, seen = [], set(), [tensor], set()
    while frontier:
        t = frontier.pop()
        if t in seen or not t or t in graph.initializers:
            continue
        seen.add(t)
        producer = graph.producer(t)
        if producer is None:
            leaves.add(t)
            continue
        if producer not in nodes:
            nodes.append(producer)
            frontier.extend(producer.inputs)
    return nodes, leaves


def drop_dead(graph: Graph) -> None:
    """Nodes nothing reads any more (the mask subgraphs)."""
    while True:
        dead = [n for n in graph.nodes if not any(graph.consumers(o) or graph.is_graph_output(o)
                                                  for o in n.outputs if o)]
        if not dead:
            return
        for n in dead:
            graph.nodes.remove(n)


def probe_session(graph: Graph, nodes: list[Node], info, tensor: str):
    """An onnxruntime session computing `tensor` from the integer input `info` (a ValueInfo) by `nodes`."""
    from ..ort_session import session  # onnxruntime only when such a subgraph is there
    order = topological(nodes, [info.name] + list(graph.initializers))
    used = {i for n in order for i in n.inputs if i in graph.initializers}
    protos = [helper.make_node(n.op_type, n.inputs, n.outputs, name=n.name, domain=n.domain or None,
                               **{k: v for k, v in n.attrs.items() if not isinstance(v, np.ndarray)})
              for n in order]
    g = helper.make_graph(protos, "probe", [helper.make_tensor_value_info(
        info.name, helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype)), info.shape)],
        [helper.make_empty_tensor_value_info(tensor)],
        [numpy_helper.from_array(np.asarray(graph.initializers[i]), i) for i in sorted(used)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", graph.opset)])
    model.ir_version = min(model.ir_version, 9)
    return session(model)
