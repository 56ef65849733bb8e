"""Every int8 weight against the float weight it stands for: a check that the golden does not share.

The golden (golden.py) and the emulator both read the quantization table, so a bug there (int8 weights
scaled wrongly, one channel's scale off) passes the exact half of `diff` with 0 mismatches. Here each layer's
int8 weights, times their scales, are compared with the float weights of the rewritten graph (which diff holds
to the user's original model within REWRITE_MIN_SQNR_DB) by plain arithmetic, independent of how the table was
made: round to nearest leaves every weight within half a step of its scale, AdaRound within one step. A
weight beyond that is a quantization bug, and the accuracy half of the verdict fails.
"""
from __future__ import annotations

import numpy as np

from .graph import NodeView
from .numerics import along_axis
from .ops.registry import handlers_for

# Slack on the bound, in steps: w and the scale are float32, so w / scale carries a relative error of at most
# 2^-23 of |q| <= 127 steps, 1.5e-5 steps; 1e-3 leaves a margin, and a bug moves a weight by whole steps.
SLACK = 1e-3


def check_weights(compiled) -> dict:
    """{checked, layers: [{name, worst_steps, bound_steps}], failures: [..], unchecked: [{name, why}]}."""
    graph, quant = compiled.graph, compiled.quant
    handlers = handlers_for(graph)
    rows, failures, unchecked = [], [], []
    for node in graph.nodes:
        wq = quant.weights.get(node.name)
        if wq is None:
            continue
        got = handlers[node.name].float_weights(NodeView(node, graph))
        if got is None:
            unchecked.append({"name": node.name, "why": "no constant float weights"})
            continue
        w = np.asarray(got[0], np.float64)
        if w.shape != wq.q.shape:
            unchecked.append({"name": node.name, "why": f"float weights {list(w.shape)}, int8 {list(wq.q.shape)}"})
            continue
        steps = _scales(wq, w.ndim)
        error = np.abs(wq.q.astype(np.float64) * steps - w) / steps
        worst = float(error.max()) if error.size else 0.0
        bound = (1.0 if node.name in quant.adarounded else 0.5) + SLACK
        rows.append({"name": node.name, "worst_steps": worst, "bound_steps": bound})
        if worst > bound:
            where = np.unravel_index(int(np.argmax(error)), error.shape)
            failures.append(f"layer {node.name}: an int8 weight is {worst:.2f} steps of its scale from the float "
                            f"weight it stands for (at {list(map(int, where))}; at most {bound - SLACK:g} allowed): "
                            "a quantization bug the golden shares")
    return {"checked": len(rows), "layers": rows, "failures": failures, "unchecked": unchecked}


def _scales(wq, rank: int) -> np.ndarray:
    """Every weight's scale, broadcastable over the weights (float64 of the float32 scales)."""
    if wq.channel_scale is None:
        return np.float64(np.float32(wq.scale))
    return along_axis(wq.channel_scale, wq.axis, rank).astype(np.float64)
