"""Small streaming models for the tests: a recurrent cell whose state is a model input and output, and a
scalar input that an `If` branches on (a sample rate), as real voice-activity detectors are exported."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import OPSET

FEATURES, HIDDEN = 8, 16


def branch(name: str, factor: float) -> "onnx.GraphProto":  # noqa: F821
    """An If branch: the chunk times `factor` (the outer `x` read from inside, as exporters write it)."""
    return helper.make_graph(
        [helper.make_node("Mul", ["x", f"{name}_f"], [f"{name}_y"])], name, [],
        [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1, FEATURES])],
        [numpy_helper.from_array(np.array(factor, np.float32), f"{name}_f")])


def streaming_model(cell: str = "LSTM", seed: int = 0, with_rate: bool = True, recurrence: float = 0.9):
    """x [1, FEATURES] (+ sr int64 scalar) and state [layers, 1, HIDDEN] -> prob [1, 1] and stateN, with the
    state carried through an LSTM (h and c stacked, as silero-vad's `state`) or a GRU (h alone). With
    `with_rate`, x is scaled by 1 where sr == 16000 and by 0.5 otherwise, through an If."""
    r = np.random.default_rng(seed)
    gates = 4 if cell == "LSTM" else 3
    layers = 2 if cell == "LSTM" else 1
    w = r.normal(0, 0.6, (1, gates * HIDDEN, FEATURES)).astype(np.float32)
    rr = r.normal(0, recurrence / np.sqrt(HIDDEN), (1, gates * HIDDEN, HIDDEN)).astype(np.float32)
    b = r.normal(0, 0.1, (1, 2 * gates * HIDDEN)).astype(np.float32)
    if cell == "LSTM":
        b[0, 2 * HIDDEN:3 * HIDDEN] += 2.0  # the forget gate mostly open: the cell remembers across steps
    head = r.normal(0, 1.0, (HIDDEN, 1)).astype(np.float32)
    inits = {"W": w, "R": rr, "B": b, "head": head, "idx0": np.array([0], np.int64),
             "idx1": np.array([1], np.int64), "axes0": np.array([0], np.int64), "rate": np.array(16000, np.int64)}
    nodes = []
    if with_rate:
        nodes += [helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
                  helper.make_node("If", ["is16k"], ["xs"], then_branch=branch("then", 1.0),
                                   else_branch=branch("else", 0.5))]
    else:
        nodes.append(helper.make_node("Identity", ["x"], ["xs"]))
    nodes += [helper.make_node("Unsqueeze", ["xs", "axes0"], ["seq"]),  # [1 step, 1 batch, FEATURES]
              helper.make_node("Gather", ["state", "idx0"], ["h0"], axis=0)]
    inputs = ["seq", "W", "R", "B", "", "h0"]
    outputs = ["Y", "Y_h"]
    if cell == "LSTM":
        nodes.append(helper.make_node("Gather", ["state", "idx1"], ["c0"], axis=0))
        inputs.append("c0")
        outputs.append("Y_c")
    nodes += [helper.make_node(cell, inputs, outputs, hidden_size=HIDDEN),
              helper.make_node("Concat", outputs[1:], ["stateN"], axis=0) if cell == "LSTM"
              else helper.make_node("Identity", ["Y_h"], ["stateN"]),
              helper.make_node("Squeeze", ["Y_h", "axes0"], ["h"]),
              helper.make_node("MatMul", ["h", "head"], ["logit"]),
              helper.make_node("Sigmoid", ["logit"], ["prob"])]
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, FEATURES]),
                    helper.make_tensor_value_info("state", TensorProto.FLOAT, [layers, 1, HIDDEN])]
    if with_rate:
        graph_inputs.append(helper.make_tensor_value_info("sr", TensorProto.INT64, []))
    graph = helper.make_graph(
        nodes, f"stream_{cell.lower()}", graph_inputs,
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1]),
         helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [layers, 1, HIDDEN])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def chunks(steps: int, seed: int = 0) -> np.ndarray:
    """[steps, 1, FEATURES]: a slowly drifting signal plus noise, so the state has something to carry."""
    r = np.random.default_rng(seed)
    drift = np.cumsum(r.normal(0, 0.3, (steps, 1, FEATURES)), axis=0)
    return (np.tanh(drift) + r.normal(0, 0.3, (steps, 1, FEATURES))).astype(np.float32)
