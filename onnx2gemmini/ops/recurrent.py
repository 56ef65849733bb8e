"""LSTM and GRU (CRNN text recognizers, timm's sequencer2d): the input projections of every time step and
direction are one Gemmini matmul, the recurrence a float32 CPU kernel (cpu.Recurrent). The matmul writes
its int32 accumulators (full_C) where the configuration reads them out at full width, else int8.

passes/recurrent_projection.py splits each node into MatMul(X, Wᵀ) (+ Wb as its bias) and the node
itself reading that projection through a 0/1 selection W (exact in float). So the projection is an
ordinary tensor: calibrated, quantized and lowered like any MatMul with a constant weight, and the QDQ
golden quantizes it at the same point (onnxruntime runs the two rewritten nodes; int32 accumulators are
its float product, which it fuses into QGemm, compared after division by s_x*s_w within the budget of
compare.step_tolerance). What the golden cannot share is the recurrence's float order and sigmoid/tanh:
the kernel states its tolerance (RECURRENCE).
"""
from __future__ import annotations

import numpy as np

from .. import cpu
from ..cpu.recurrent import MAX_HIDDEN
from ..graph import NodeView
from ..plan import CpuOp
from .common import to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler

DEFAULT_ACTIVATIONS = {"LSTM": ("sigmoid", "tanh", "tanh"), "GRU": ("sigmoid", "tanh")}
DIRECTIONS = ("forward", "reverse", "bidirectional")
STATES = {"LSTM": ("initial_h", "initial_c"), "GRU": ("initial_h",)}


def refusals(node: NodeView) -> list[str]:
    """Why an LSTM/GRU node cannot be compiled (empty: it can); passes/recurrent_projection.py splits only
    the nodes this accepts."""
    op, reasons = node.op_type, []
    direction = node.attr("direction", "forward")
    if direction not in DIRECTIONS:
        reasons.append(f"direction '{direction}'")
    dirs = 2 if direction == "bidirectional" else 1
    given = node.attr("activations")
    if given and [a.lower() for a in given] != list(DEFAULT_ACTIVATIONS[op]) * dirs:
        reasons.append(f"activations {list(given)} (only the default {', '.join(DEFAULT_ACTIVATIONS[op])})")
    if node.attr("clip") is not None:
        reasons.append("clip (cell clipping)")
    if op == "LSTM" and node.attr("input_forget", 0):
        reasons.append("input_forget=1 (coupled input and forget gates)")
    if node.attr("layout", 0) not in (0, 1):
        reasons.append(f"layout {node.attr('layout')}")
    if node.is_const(node.input("X")):
        reasons.append("a constant X")
    for name in ("W", "R", "B") + (("P",) if op == "LSTM" else ()):
        if node.input(name) is not None and not node.is_const(node.input(name)):
            reasons.append(f"{name} is not constant")
    lens = node.input("sequence_lens")
    if lens is not None:
        seq = node.shape(node.input("X"))[1 if node.attr("layout", 0) else 0]
        if not node.is_const(lens):
            reasons.append("sequence_lens is not constant")
        elif np.any(node.const(lens) != seq):
            reasons.append(f"sequence_lens {node.const(lens).tolist()} shorter than the sequence ({seq}): "
                           f"padded batches")
    hidden = node.shape(node.input("R"))[-1]
    if hidden > MAX_HIDDEN:
        reasons.append(f"hidden_size {hidden} > {MAX_HIDDEN} (the runtime's state buffer)")
    return reasons


class _Recurrent(Handler):
    gemmini = ("tiled_matmul: the input projections X·Wᵀ (+ Wb) of every time step and direction as one call, "
               "its int32 accumulators read out by full_C (int8 on configurations without acc_read_full_width); "
               "the recurrence on the CPU")

    def check(self, node, ctx):
        reasons = refusals(node)
        if not reasons and not node.fused.projected:
            reasons.append("the input projection was not split off (passes/recurrent_projection.py)")
        return reasons

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        op, lowered = node.op_type, Lowered()
        p = to_plain(node, ctx, ctx.tensor(node.input("X")), lowered)
        r = node.const(node.input("R")).astype(np.float32)
        dirs, width, hidden = r.shape
        batch = p.shape[1]  # layout 0: the pass moved a batch-first sequence
        b = node.const(node.input("B"))  # [Wb, Rb]: the pass moved Wb into the projection's bias, zeros here
        constants = {"R": r, "Rb": np.zeros((dirs, width), np.float32) if b is None else b[:, width:]}
        if op == "LSTM":
            peephole = node.const(node.input("P"))
            constants["P"] = np.zeros((dirs, 3 * hidden), np.float32) if peephole is None else peephole
        sources = {}  # the kernel's inputs after P, in its order: R, the recurrence bias, peepholes, states
        for name in constants:
            sources[name] = ctx.const_id(node.name, name)
        for name in STATES[op]:
            given = node.input(name)
            if given is not None and not node.is_const(given):  # a streaming model's state input
                sources[name] = _dequantized_state(node, ctx, name, given, lowered)
                continue
            value = None if given is None else node.const(given)
            sources[name] = ctx.const_id(node.name, name)
            constants[name] = np.zeros((dirs, batch, hidden), np.float32) if value is None else value
        for name, value in constants.items():
            lowered.constants[sources[name]] = np.ascontiguousarray(value, np.float32)
        ids = list(sources.values())
        outputs = [ctx.output(o, node.shape(o)) for o in node.outputs]
        lowered.tensors += outputs
        direction = node.attr("direction", "forward")
        scales = [o.scale for o in outputs]
        params = cpu.Recurrent(op.lower(), 2 if direction == "bidirectional" else 1, direction == "reverse",
                               bool(node.attr("linear_before_reset", 0)), p.scale, *scales)
        reason = f"{op} recurrence: each step needs the last one's state, and Gemmini has no sigmoid or tanh"
        lowered.steps.append(CpuOp(node.name, inputs=(p.id, *ids), outputs=tuple(o.id for o in outputs),
                                   params=params, reason=reason))
        return lowered


def _dequantized_state(node: NodeView, ctx: LowerContext, name: str, given: str, lowered: Lowered) -> str:
    """An initial state computed at run time (a streaming model's state input): its int8 values dequantized
    to the float32 state the kernel reads, as DequantizeLinear (x * scale in float32) before onnxruntime's
    LSTM in the golden."""
    t = to_plain(node, ctx, ctx.tensor(given), lowered)
    state = ctx.temp(node.name, name, t.shape, None, dtype="float32")
    lowered.tensors.append(state)
    params = cpu.Concat(0, (t.scale,), 1.0, float_out=True)
    lowered.steps.append(CpuOp(node.name, inputs=(t.id,), outputs=(state.id,), params=params,
                               reason=f"{node.op_type} {name}: the recurrence reads its state in float32"))
    return state.id


LIMITS = ("directions forward, reverse, bidirectional; layout 0, and 1 (opset 14) between int8 transposes; constant "
          "W, R, B; initial states constant, absent or computed (a streaming model's state input, dequantized "
          "from int8); sequence_lens constant and full-length; default activations only; "
          "clip refused; hidden_size <= 1024; the recurrence a float32 CPU kernel (1 LSB tolerance)")


@handler("LSTM", since=7)
class LSTMHandler(_Recurrent):
    """ONNX LSTM (opset 14 adds `layout`, which _Recurrent reads with its default)."""
    limits = f"{LIMITS}; peepholes supported, input_forget refused"


@handler("GRU", since=7)
class GRUHandler(_Recurrent):
    """ONNX GRU (opset 14 adds `layout`, which _Recurrent reads with its default)."""
    limits = f"{LIMITS}; linear_before_reset 0 and 1"
