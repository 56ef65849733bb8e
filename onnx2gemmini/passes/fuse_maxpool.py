"""Conv(+ReLU) followed by MaxPool: the pool moves into the conv when Gemmini's pool equals ONNX's.

Gemmini pools on the int8 output while storing it, with windows of at most 3 (2-bit fields) and with
padded positions read as 0, not -inf: that equals ONNX only after a ReLU or without pool padding.
"""
from __future__ import annotations

from dataclasses import replace

from ..config import GemminiConfig
from ..graph import FusedPool, Graph
from .rewrite import absorb_successor, require_same_fixed_scale

MAX_POOL_FIELD = 3  # pool size, stride and padding are 2-bit fields of config_st


def pool_geometry(node) -> FusedPool | None:
    """Square, symmetric MaxPool parameters Gemmini can fuse, or None."""
    a = node.attrs
    kernel = list(a.get("kernel_shape", []))
    strides = list(a.get("strides", [1] * len(kernel))) or [1] * len(kernel)
    pads = list(a.get("pads", [0] * 2 * len(kernel))) or [0] * 2 * len(kernel)
    dilations = list(a.get("dilations", [1] * len(kernel))) or [1] * len(kernel)
    if len(kernel) != 2 or len(set(kernel)) != 1 or len(set(strides)) != 1 or len(set(pads)) != 1:
        return None
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or set(dilations) != {1}:
        return None
    if a.get("ceil_mode", 0) or a.get("storage_order", 0) or len(node.outputs) > 1 and node.outputs[1]:
        # an Indices output (even unused) keeps the standalone pool
        return None
    size, stride, pad = kernel[0], strides[0], pads[0]
    if not (1 <= size <= MAX_POOL_FIELD and 1 <= stride <= MAX_POOL_FIELD and 0 <= pad <= MAX_POOL_FIELD):
        return None
    if pad >= size:
        return None
    return FusedPool(size, stride, pad, node.name)


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    if not config.has_max_pool:
        return []
    changes = []
    for node in list(graph.nodes):
        if node not in graph.nodes or node.op_type != "Conv" or node.fused.pool:
            continue
        pool = graph.only_consumer(node.outputs[0])
        if pool is None or pool.op_type != "MaxPool":
            continue
        geometry = pool_geometry(pool)
        if geometry is None:
            continue
        if geometry.padding and not node.fused.relu:
            continue  # zero-valued pool padding differs from -inf on negative values
        require_same_fixed_scale(graph, node.outputs[0], pool.outputs[0], "max-pool")
        node.fused = replace(node.fused, pool=geometry)
        absorb_successor(graph, node, pool)
        changes.append(f"{pool.name} (MaxPool {geometry.size}/{geometry.stride}/{geometry.padding}) "
                       f"fused into {node.name}")
    return changes
