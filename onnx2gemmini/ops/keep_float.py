"""`--keep-float LAYER[,...]`: the named convs and matmuls run in float on the CPU instead of on Gemmini.

Why: some layers lose much more accuracy to int8 weights than others (an outlier weight stretches the scale
of every other weight of the layer); `diff --sensitivity` ranks them. Keeping such a layer float trades its
speed (a float conv on the host core, its cost estimated in the report) for accuracy, knowingly. The layer
still reads the int8 activation and writes int8 at its calibrated output scale, so its neighbours are
unchanged: one `float_conv` CPU step (cpu/float_layers.py) with float32 weights and bias, the fused
ReLU/Clip(0, hi) applied by its quantization and a fused max-pool as the int8 CPU pool after it.

Not a handler: the node keeps its op's handler for checks, scale rules and the support table; the planner
lowers it here instead when the QuantTable lists it (QuantTable.float_layers).
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable

import numpy as np

from .. import cpu
from ..errors import UnsupportedError, UsageError
from ..graph import Graph, NodeView
from ..plan import CpuOp
from .common import to_nhwc, to_plain
from .context import LowerContext
from .conv import _cpu_maxpool, geometry as conv_geometry
from .conv_transpose import ConvTransposeHandler
from .gemm import GemmHandler, MatMulHandler
from .registry import Lowered
from .remap import lower_remap

KEEPABLE = ("Conv", "ConvTranspose", "Gemm", "MatMul")
_MATMULS = {"Gemm": GemmHandler(), "MatMul": MatMulHandler()}  # their float_weights, not second registrations
REASON = "kept float by --keep-float"


def layer_names(value) -> tuple[str, ...]:
    """The option's value as node names: None, a comma-separated string (as on the command line) or an
    iterable of names; duplicates dropped, order kept."""
    if value is None:
        return ()
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, Iterable):
        items = list(value)
        if not all(isinstance(v, str) for v in items):
            raise UsageError("--keep-float: expected layer names (strings)")
        items = [part for v in items for part in v.split(",")]
    else:
        raise UsageError(f"--keep-float: expected layer names, got {type(value).__name__}")
    names = [v.strip() for v in items]
    if any(not n for n in names):
        raise UsageError("--keep-float: an empty layer name (expected LAYER[,LAYER...], the node names that "
                         "`diff --sensitivity` lists)")
    return tuple(dict.fromkeys(names))


def check_layers(graph: Graph, names: tuple[str, ...], original=None) -> frozenset:
    """The kept layers, each a node of the rewritten graph whose op can run in float here; else one UsageError
    naming the layer (with close names, or the layer a fused activation or pool joined) or its op.
    `original()`: {name: op} of the model's nodes before the rewrite passes, asked only for that message."""
    nodes = {n.name: n for n in graph.nodes}
    for name in names:
        node = nodes.get(name)
        if node is None:
            raise UsageError(f"--keep-float: {_unknown(graph, name, original() if original else {})}")
        view = NodeView(node, graph)
        if node.op_type not in KEEPABLE:
            raise UsageError(f"--keep-float: layer '{name}' is a {node.op_type}; only Conv, ConvTranspose, Gemm and "
                             f"MatMul layers with constant weights can be kept float")
        weights = view.inputs[1] if len(view.inputs) > 1 else None
        if not view.is_const(weights):
            raise UsageError(f"--keep-float: layer '{name}' ({node.op_type}) multiplies two activations: it has "
                             f"no weights to keep float")
        if node.op_type == "MatMul" and len(view.shape(weights)) != 2:
            raise UsageError(f"--keep-float: layer '{name}' (MatMul) has weights of rank {len(view.shape(weights))}; "
                             f"only 2-D weights can be kept float")
    return frozenset(names)


def _unknown(graph: Graph, name: str, original: dict[str, str]) -> str:
    """Why `name` is no layer: absorbed into another node by a fusion, or unknown (with close names)."""
    for node in graph.nodes:
        absorbed = [node.fused.activation_node, node.fused.pool.node if node.fused.pool else None]
        if name in absorbed:
            return (f"layer '{name}' ({original.get(name, 'fused')}) was fused into '{node.name}' "
                    f"({node.op_type}); keep '{node.name}' float (its activation and pool come with it)")
    if name in original:
        return (f"layer '{name}' ({original[name]}) was folded into another node by the rewrite passes (-v lists "
                f"them); keep the layer it joined")
    candidates = [n.name for n in graph.nodes if n.op_type in KEEPABLE]
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else \
        "`diff --sensitivity` lists the layers by name"
    return f"no layer named '{name}' ({hint})"


def lower(node: NodeView, ctx: LowerContext) -> Lowered:
    """The kept node as a float_conv CPU step (after the input's layout change and, for ConvTranspose, its
    exact int8 zero insertion; before a fused max-pool)."""
    if node.op_type in ("Gemm", "MatMul"):
        return _lower_matmul(node, ctx)
    return _lower_conv(node, ctx)


def _lower_conv(node: NodeView, ctx: LowerContext) -> Lowered:
    lowered = Lowered()
    x = to_nhwc(node, ctx, ctx.tensor(node.input("X")), lowered)
    b_name = node.input("B")
    w, bias = node.const(node.input("W")), node.const(b_name) if b_name else None
    groups = node.attr("group", 1)
    if node.op_type == "ConvTranspose":
        maps, g = ConvTransposeHandler.maps(node)
        up, x = lower_remap(node, ctx, x, maps, 0, "ConvTranspose kept float: zero insertion and padding on the "
                            "CPU, then a float conv", temp="upsampled")
        lowered.add(up)
        ic, ocg, kh, kw = w.shape  # [C_in][C_out/g][KH][KW] -> per group flipped [C_out/g][C_in/g]: OIHW
        w = w.reshape(groups, ic // groups, ocg, kh, kw).transpose(0, 2, 1, 3, 4)[..., ::-1, ::-1]
        w = w.reshape(groups * ocg, ic // groups, kh, kw)
    else:
        g = conv_geometry(node)
    n, h, wd, _ = x.shape
    k, s, d, p = g["kernel"], g["strides"], g["dilations"], g["pads"]
    oh, ow = ((size + p[i] + p[i + 2] - (k[i] - 1) * d[i] - 1) // s[i] + 1 for i, size in enumerate((h, wd)))
    out_shape = node.shape(node.output)
    y = ctx.output(node.output, (out_shape[0], out_shape[2], out_shape[3], out_shape[1]), "NHWC")
    lowered.tensors.append(y)
    pool = node.fused.pool
    conv_out = y
    if pool:
        conv_out = ctx.temp(node.name, "unpooled", (n, oh, ow, w.shape[0]), y.scale, layout="NHWC")
        lowered.tensors.append(conv_out)
    window = cpu.Window(tuple(k), tuple(s), tuple(p), tuple(d), (oh, ow))
    weights = np.ascontiguousarray(w.transpose(2, 3, 1, 0), np.float32)  # OIHW -> [KH][KW][C/groups][OC]
    lowered.add(_step(node, ctx, x, conv_out, weights, bias, window, groups))
    if pool:
        lowered.steps.append(_cpu_maxpool(node, conv_out, y, pool, "after a layer kept float"))
    return lowered


def _lower_matmul(node: NodeView, ctx: LowerContext) -> Lowered:
    lowered = Lowered()
    a = to_plain(node, ctx, ctx.tensor(node.inputs[0]), lowered)
    w, bias = matmul_weights(node)
    rows = int(np.prod(a.shape[:-1], dtype=np.int64))
    y = ctx.output(node.output, node.shape(node.output))
    lowered.tensors.append(y)
    window = cpu.Window((1, 1), (1, 1), (0, 0, 0, 0), (1, 1), (1, rows))
    return lowered.add(_step(node, ctx, a, y, np.ascontiguousarray(w, np.float32), bias, window, 1))


def matmul_weights(node: NodeView) -> tuple[np.ndarray, np.ndarray | None]:
    """[K][J] float weights and a J bias (or None) as the op's handler gives them to quantize.py (alpha,
    beta and transB folded; a MatMul's fused bias Add)."""
    w, bias = _MATMULS[node.op_type].float_weights(node)
    if bias is not None:
        bias = np.broadcast_to(np.asarray(bias, np.float32).reshape(-1), (w.shape[1],))
    return w, bias


def _step(node: NodeView, ctx: LowerContext, x, y, weights: np.ndarray, bias, window: cpu.Window,
          groups: int) -> Lowered:
    """The float_conv step with its constants (float32 weights, and the bias when the model has one)."""
    if not np.isfinite(weights).all() or (bias is not None and not np.isfinite(bias).all()):
        raise UnsupportedError(f"node '{node.name}': non-finite weights or bias cannot be kept float")
    w_id = ctx.const_id(node.name, "W_f32")
    constants = {w_id: weights}
    inputs = (x.id, w_id)
    if bias is not None:
        b_id = ctx.const_id(node.name, "b_f32")
        constants[b_id] = np.ascontiguousarray(bias, np.float32)
        inputs += (b_id,)
    params = cpu.FloatConv(window, groups, x.scale, y.scale, bool(node.fused.relu))
    step = CpuOp(node.name, inputs=inputs, outputs=(y.id,), params=params,
                 reason=f"{REASON}: {node.op_type} with float32 weights and arithmetic on the CPU")
    return Lowered([step], [], constants)
