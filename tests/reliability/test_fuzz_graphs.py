"""A fuzzer of whole models: hypothesis builds random small graphs from the supported ops (random shapes,
weights and attributes). Each one must compile and pass `diff` against onnxruntime within tolerance, or be
refused with one of the library's own errors: never an internal error, never a silent wrong answer.

CI runs a bounded number of graphs; run it longer with, e.g.,
    O2G_FUZZ_EXAMPLES=2000 python -m pytest tests/reliability/test_fuzz_graphs.py -p no:xdist
(the seed is printed with a failing graph, and hypothesis replays it first on the next run).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini.compare import run_diff
from tests.helpers import infer_outputs, random_dataset

EXAMPLES = int(os.environ.get("O2G_FUZZ_EXAMPLES", "30"))


@dataclass
class Graph:
    """A graph under construction: nodes, constants, and the float tensors available with their shapes."""

    draw: object
    nodes: list = field(default_factory=list)
    inits: dict = field(default_factory=dict)
    shapes: dict = field(default_factory=dict)
    count: int = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, prefix: str, value) -> str:
        name = self.name(prefix)
        self.inits[name] = np.asarray(value)
        return name

    def add(self, op: str, inputs: list[str], shape: tuple, **attrs) -> str:
        out = self.name("t")
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.name(op.lower() + "_"), **attrs))
        self.shapes[out] = tuple(shape)
        return out

    def weights(self, *shape, std=0.3):
        seed = self.draw(st.integers(0, 2 ** 16))
        return (np.random.default_rng(seed).standard_normal(shape) * std).astype(np.float32)


def conv(g: Graph, x: str) -> str:
    n, c, h, w = g.shapes[x]
    k = g.draw(st.sampled_from([1, 3] if min(h, w) >= 3 else [1]))
    stride = g.draw(st.sampled_from([1, 2]))
    pad = g.draw(st.sampled_from([0, 1])) if k == 3 else 0
    depthwise = c > 1 and g.draw(st.booleans())
    oc = c if depthwise else g.draw(st.integers(1, 12))
    w_name = g.const("w", g.weights(oc, 1 if depthwise else c, k, k, std=1.0 / np.sqrt(k * k * (1 if depthwise else c))))
    inputs = [x, w_name] + ([g.const("b", g.weights(oc, std=0.1))] if g.draw(st.booleans()) else [])
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return g.add("Conv", inputs, (n, oc, oh, ow), kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                 group=c if depthwise else 1)


def unary(g: Graph, x: str) -> str:
    op = g.draw(st.sampled_from(["Relu", "Sigmoid", "LeakyRelu", "HardSwish", "Tanh", "Clip"]))
    if op == "Clip":
        return g.add("Clip", [x, g.const("lo", np.float32(0)), g.const("hi", np.float32(0.8))], g.shapes[x])
    return g.add(op, [x], g.shapes[x], **({"alpha": 0.1} if op == "LeakyRelu" else {}))


def pool(g: Graph, x: str) -> str:
    n, c, h, w = g.shapes[x]
    if min(h, w) >= 2 and g.draw(st.booleans()):
        return g.add("MaxPool", [x], (n, c, (h - 2) // 2 + 1, (w - 2) // 2 + 1), kernel_shape=[2, 2], strides=[2, 2])
    return g.add("AveragePool", [x], (n, c, h, w), kernel_shape=[3, 3], pads=[1, 1, 1, 1])


def global_mean(g: Graph, x: str) -> str:
    n, c = g.shapes[x][:2]
    if g.draw(st.booleans()):
        return g.add("GlobalAveragePool", [x], (n, c, 1, 1))
    return g.add("ReduceMean", [x], (n, c, 1, 1), axes=[2, 3], keepdims=1)


def add(g: Graph, x: str) -> str:
    same = [t for t, s in g.shapes.items() if s == g.shapes[x] and t != x]
    if same and g.draw(st.booleans()):
        return g.add("Add", [x, g.draw(st.sampled_from(sorted(same)))], g.shapes[x])
    c = g.shapes[x][1]
    op = g.draw(st.sampled_from(["Add", "Mul"]))
    k = g.weights(1, c, 1, 1, std=0.5) + (1.0 if op == "Mul" else 0.0)
    return g.add(op, [x, g.const("k", k)], g.shapes[x])


def concat(g: Graph, x: str) -> str:
    n, c, h, w = g.shapes[x]
    same = sorted(t for t, s in g.shapes.items() if len(s) == 4 and s[0] == n and s[2:] == (h, w))
    other = g.draw(st.sampled_from(same))
    return g.add("Concat", [x, other], (n, c + g.shapes[other][1], h, w), axis=1)


def batch_norm(g: Graph, x: str) -> str:
    c = g.shapes[x][1]
    scale, bias, mean = g.weights(c, std=0.3) + 1, g.weights(c, std=0.2), g.weights(c, std=0.2)
    var = np.abs(g.weights(c, std=0.3)) + 0.5
    return g.add("BatchNormalization", [x] + [g.const(p, v) for p, v in zip("sbmv", (scale, bias, mean, var))],
                 g.shapes[x])


def move(g: Graph, x: str) -> str:
    n, c, h, w = g.shapes[x]
    op = g.draw(st.sampled_from(["Transpose", "Pad", "Slice", "Resize"]))
    if op == "Transpose":
        return g.add("Transpose", [x], (n, c, w, h), perm=[0, 1, 3, 2])
    if op == "Pad":
        return g.add("Pad", [x, g.const("p", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))], (n, c, h + 2, w + 2))
    if op == "Slice" and c >= 2:
        starts, ends = g.const("s", np.array([0], np.int64)), g.const("e", np.array([c // 2], np.int64))
        return g.add("Slice", [x, starts, ends, g.const("a", np.array([1], np.int64))], (n, c // 2, h, w))
    if max(h, w) <= 12:
        scales = g.const("sc", np.array([1, 1, 2, 2], np.float32))
        return g.add("Resize", [x, "", scales], (n, c, 2 * h, 2 * w), mode="nearest")
    return x


def softmax(g: Graph, x: str) -> str:
    return g.add("Softmax", [x], g.shapes[x], axis=1)


FEATURE_OPS = [conv, conv, unary, pool, global_mean, add, concat, batch_norm, move, softmax]


def head(g: Graph, x: str) -> str:
    """Flatten, then a Gemm (and maybe a softmax): the usual classifier tail."""
    n = g.shapes[x][0]
    size = int(np.prod(g.shapes[x][1:]))
    flat = g.add("Flatten", [x], (n, size))
    classes = g.draw(st.integers(2, 10))
    y = g.add("Gemm", [flat, g.const("fw", g.weights(classes, size, std=1 / np.sqrt(size))),
                       g.const("fb", g.weights(classes, std=0.1))], (n, classes), transB=1)
    return g.add("Softmax", [y], (n, classes), axis=-1) if g.draw(st.booleans()) else y


def build(draw) -> tuple:
    g = Graph(draw)
    shape = (1, draw(st.integers(1, 8)), draw(st.integers(3, 12)), draw(st.integers(3, 12)))
    g.shapes["x"] = shape
    x = "x"
    for _ in range(draw(st.integers(1, 6))):
        if len(g.shapes[x]) != 4:
            break
        x = draw(st.sampled_from(FEATURE_OPS))(g, x)
    if len(g.shapes[x]) == 4 and draw(st.booleans()):
        x = head(g, x)
    if x == "x":
        x = unary(g, x)
    return infer_outputs(g.nodes, {"x": list(shape)}, g.inits, outputs=(x,)), x


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("O2G_FUZZ_EXAMPLES"),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_random_graphs_compile_and_match_onnxruntime_or_are_refused(data):
    model, out = build(data.draw)
    ops = [n.op_type for n in model.graph.node]
    try:
        compiled = o2g.compile(model, calib=random_dataset(model, 4, 0))
    except (o2g.UnsupportedError, o2g.ModelError) as exc:
        assert str(exc) and "\n" not in str(exc).strip(), exc  # refused, with one clear line
        return
    result = run_diff(compiled, random_dataset(model, 3, 1))
    assert result["verdict"]["passed"], (ops, result["verdict"]["failures"])
