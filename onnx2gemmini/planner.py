"""Graph + QuantTable -> Plan: pre-flight every node, call the handlers in order, add the I/O steps."""
from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np

from . import cpu
from .config import GemminiConfig
from .emit.names import unique_identifiers
from .errors import UnsupportedError
from .graph import Graph, NodeView, topological
from .load import INFINITE_OK
from .ops import keep_float
from .ops.context import LowerContext
from .ops.registry import lookup
from .plan import CpuOp, Plan, Tensor
from .quant.quantize import QuantTable
from .slices import concat_in_place, restride


# The ops that read integer model inputs: lookups, and masks the rewrite passes made (passes/input_mask.py).
INDEX_READERS = ("Gather", "MaskRows")


def preflight(graph: Graph, ctx=None) -> None:
    """One error naming every node that cannot be converted (unknown ops with counts, and reasons)."""
    missing: dict[str, list[str]] = {}
    refused: list[str] = []
    infinite = {name for name, value in graph.initializers.items()
                if value.dtype.kind == "f" and not np.isfinite(value).all()}
    for node in graph.nodes:
        ids = [i for i in node.inputs if i and graph.is_index(i)]
        if ids and node.op_type not in INDEX_READERS:
            refused.append(f"{node.name} ({node.op_type}: reads the integer input '{ids[0]}'; integer inputs are "
                           f"read only by embedding lookups (Gather of a constant table) and by the attention "
                           f"masks the rewrite recognizes)")
            continue
        unfused = [i for k, i in enumerate(node.inputs) if i in infinite and (node.op_type, k) not in INFINITE_OK]
        if unfused:  # load.py let it through as an attention mask, and no mask fusion took it
            refused.append(f"{node.name} ({node.op_type}: reads the infinite constant '{unfused[0]}', which no "
                           f"attention-mask fusion took)")
            continue
        handler = lookup(node.op_type, graph.opset, node.domain)
        if handler is None:
            missing.setdefault(node.op_type if not node.domain else f"{node.domain}.{node.op_type}", []).append(node.name)
            continue
        reasons = handler.check(NodeView(node, graph), ctx)
        if reasons:
            refused.append(f"{node.name} ({node.op_type}: {'; '.join(reasons)})")
    if not missing and not refused:
        return
    parts = []
    if missing:
        ops = ", ".join(f"{op} x{len(nodes)} [{', '.join(nodes[:3])}{', ...' if len(nodes) > 3 else ''}]"
                        for op, nodes in sorted(missing.items()))
        parts.append(f"unsupported ops: {ops}")
    if refused:
        parts.append(f"unsupported forms: {'; '.join(refused[:10])}{' ...' if len(refused) > 10 else ''}")
    raise UnsupportedError(" | ".join(parts))


def build_plan(graph: Graph, quant: QuantTable, config: GemminiConfig, model_name: str, sha256: str) -> Plan:
    preflight(graph)
    tensor_names = [i.name for i in graph.inputs] + [o for n in graph.nodes for o in n.outputs if o]
    tensor_ids = unique_identifiers(tensor_names)
    node_ids = unique_identifiers(n.name for n in graph.nodes)
    tensors: dict[str, Tensor] = {}      # id -> tensor
    by_onnx: dict[str, Tensor] = {}      # ONNX name -> tensor holding it
    constants: dict = {}
    steps: list = []
    inputs: list[str] = []
    for vi in graph.inputs:
        if graph.is_index(vi.name):  # token ids: read as they are by the lookups
            ids = Tensor(tensor_ids[vi.name], vi.name, vi.shape, np.dtype(vi.dtype).name, "plain", None, "input")
            tensors[ids.id], by_onnx[vi.name] = ids, ids
            inputs.append(ids.id)
            continue
        scale = quant.scales[vi.name]
        f = Tensor(f"{tensor_ids[vi.name]}__f32", vi.name, vi.shape, "float32", "plain", None, "input")
        nhwc = len(vi.shape) == 4
        shape = (vi.shape[0], vi.shape[2], vi.shape[3], vi.shape[1]) if nhwc else vi.shape
        q = Tensor(tensor_ids[vi.name], vi.name, shape, "int8", "NHWC" if nhwc else "plain", scale)
        tensors[f.id], tensors[q.id], by_onnx[vi.name] = f, q, q
        steps.append(CpuOp(f"quantize_{q.id}", inputs=(f.id,), outputs=(q.id,), params=cpu.Quantize(scale, nhwc),
                           reason="model inputs arrive as float32: QuantizeLinear on the CPU"))
        inputs.append(f.id)
    order = topological(graph.nodes, [i.name for i in graph.inputs] + list(graph.initializers))
    for node in order:
        view = NodeView(node, graph)
        ctx = LowerContext(config, quant, by_onnx, tensor_ids, node_ids)
        if node.name in quant.float_layers:  # --keep-float: float32 weights on the CPU
            lowered = keep_float.lower(view, ctx)
        else:
            lowered = lookup(node.op_type, graph.opset, node.domain).lower(view, ctx)
        for t in lowered.tensors:
            if t.id in tensors:
                raise AssertionError(f"tensor id {t.id} defined twice")
            tensors[t.id] = t
            if t.onnx_name:
                by_onnx[t.onnx_name] = t
        constants.update(lowered.constants)
        steps.extend(lowered.steps)
    outputs = []
    for vo in graph.outputs:
        t = by_onnx[vo.name]
        if t.layout == "NHWC":
            n, h, w, c = t.shape
            out = dataclasses.replace(t, id=f"{t.id}__out", shape=(n, c, h, w), layout="plain", kind="output",
                                      view_of=None, slice_of=None, offset=0)
            tensors[out.id] = out
            steps.append(CpuOp(f"output_{t.id}", inputs=(t.id,), outputs=(out.id,), params=cpu.Transpose((0, 3, 1, 2)),
                               reason="model outputs are written in ONNX order"))
            t = out
        outputs.append(t.id)
    steps = [restride(s, tensors) for s in concat_in_place(tensors, steps, outputs, constants)]
    return Plan(model_name, sha256, graph.opset, config, tensors, constants, tuple(steps), tuple(inputs),
                tuple(outputs), {"method": quant.method, "num_samples": quant.num_samples})


def op_histogram(graph: Graph) -> Counter:
    return Counter(n.op_type for n in graph.nodes)
