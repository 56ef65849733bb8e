"""The output-aware range search (`--calib-method output`): a tensor's range is the candidate that disturbs
its consumers' outputs least. The same values get a wider range when a max reads them (the max is the tail
that clipping cuts) than when a sum does (there the finer step of a clipped range wins)."""
import numpy as np
from onnx import helper

from onnx2gemmini.quant.calibrate import statistics
from onnx2gemmini.data import Dataset
from tests.helpers import make_model, rng

WIDTH = 16384


def tail_data(samples=8, width=WIDTH, seed=0) -> Dataset:
    """Positive values with a long (Laplace) tail, which the tensor's own MSE range clips."""
    x = np.abs(rng(seed).laplace(0, 0.2, (samples, 1, width))).astype(np.float32)
    return Dataset({"x": x}, None, "test")


def model(consumer: str):
    """t = x * 1 (the tensor ranged), read by a MatMul summing it, a ReduceMax, or nothing (a model output)."""
    nodes = [helper.make_node("Mul", ["x", "one"], ["t"])]
    inits = {"one": np.ones((1, WIDTH), np.float32)}
    outputs = {"t": [1, WIDTH]}
    if consumer == "sum":
        nodes.append(helper.make_node("MatMul", ["t", "ones"], ["y"]))
        inits["ones"] = np.ones((WIDTH, 1), np.float32)
        outputs = {"y": [1, 1]}
    if consumer == "max":
        nodes.append(helper.make_node("ReduceMax", ["t"], ["y"], axes=[1]))
        outputs = {"y": [1, 1]}
    return make_model(nodes, {"x": [1, WIDTH]}, outputs, inits)


def test_the_consumer_decides_the_range():
    data = tail_data()
    ranges = {method: statistics(model("sum"), data, method, ["t"]).amax["t"]
              for method in ("mse", "minmax", "percentile")}
    assert ranges["percentile"] < ranges["mse"] < ranges["minmax"]  # three distinct candidates
    by_max = statistics(model("max"), data, "output", ["t"]).amax["t"]
    by_sum = statistics(model("sum"), data, "output", ["t"]).amax["t"]
    assert by_max == ranges["minmax"]  # the max is the tail: never clip it
    assert by_sum < ranges["mse"]  # a sum hardly sees the few clipped values, and gains the finer step


def test_without_consumers_the_mse_range_stays():
    data = tail_data()
    m = model("none")
    assert statistics(m, data, "output", ["t"]).amax["t"] == statistics(m, data, "mse", ["t"]).amax["t"]
