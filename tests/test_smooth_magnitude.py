"""A spectrum's magnitude evened out bin by bin (passes/smooth_magnitude.py), and chained 1-D convs seen as
2-D ones by the passes that pair convs (passes/conv1d.py): the float function unchanged (diff's rewritten
graph against the original), the int8 result exact against the golden, and closer to the original than
without the rewrite (the negative control switches it off)."""
import re

import numpy as np
import pytest
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini.data import Dataset
from onnx2gemmini.golden import build_float
from onnx2gemmini import passes
from onnx2gemmini.passes import smooth_magnitude
from onnx2gemmini.quant.calibrate import channel_ranges
from tests.helpers import assert_matches_ort, infer_outputs, rng

BINS, FRAME, HOP = 24, 64, 16


def spectrum_model(square="Pow", extra_axis_slice=False, shared_slice=False):
    """x [1, 1, L] -> a Conv1d with a windowed Fourier basis (re then im, BINS each) -> |X| -> Conv1d -> Relu,
    as silero-vad's front end; `square`: Pow(x, 2) or Mul(x, x)."""
    n = np.arange(FRAME)
    window = np.hanning(FRAME)
    k = np.arange(BINS)[:, None]
    basis = np.concatenate([np.cos(2 * np.pi * k * n / FRAME), -np.sin(2 * np.pi * k * n / FRAME)]) * window
    r = rng(5)
    inits = {"basis": basis[:, None, :].astype(np.float32),
             "w2": r.normal(0, 0.3, (16, BINS, 3)).astype(np.float32), "b2": r.normal(0, 0.1, 16).astype(np.float32),
             "s0": np.array([0, 0 if not extra_axis_slice else 1], np.int64),
             "e0": np.array([BINS, 10 ** 9], np.int64), "s1": np.array([BINS, 0 if not extra_axis_slice else 1],
                                                                          np.int64),
             "e1": np.array([2 * BINS, 10 ** 9], np.int64), "axes": np.array([1, 2], np.int64),
             "two": np.array(2.0, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "basis"], ["spec"], strides=[HOP]),
             helper.make_node("Slice", ["spec", "s0", "e0", "axes"], ["re"]),
             helper.make_node("Slice", ["spec", "s1", "e1", "axes"], ["im"])]
    for part in ("re", "im"):
        nodes.append(helper.make_node("Pow", [part, "two"], [f"{part}2"]) if square == "Pow"
                     else helper.make_node("Mul", [part, part], [f"{part}2"]))
    nodes += [helper.make_node("Add", ["re2", "im2"], ["power"]), helper.make_node("Sqrt", ["power"], ["mag"]),
              helper.make_node("Conv", ["mag", "w2", "b2"], ["c2"], pads=[1, 1]),
              helper.make_node("Relu", ["c2"], ["y"])]
    outputs = ("y", "re") if shared_slice else ("y",)
    return infer_outputs(nodes, {"x": [1, 1, FRAME + 15 * HOP]}, inits, outputs=outputs)


def tones(count: int, seed: int) -> np.ndarray:
    """Audio-like frames: a few low tones, loud, and faint high ones, over noise."""
    r = rng(seed)
    t = np.arange(FRAME + 15 * HOP)
    out = []
    for _ in range(count):
        low = sum(r.uniform(0.3, 1.0) * np.sin(2 * np.pi * r.uniform(1, 4) * t / FRAME + r.uniform(0, 6))
                  for _ in range(2))
        high = 0.02 * np.sin(2 * np.pi * r.uniform(14, 22) * t / FRAME)
        out.append(low + high + r.normal(0, 0.002, t.shape))
    return np.asarray(out, np.float32)[:, None, None, :]


@pytest.fixture(scope="module")
def data():
    return {"x": tones(24, 1)}, {"x": tones(16, 2)}


def chosen_alpha(compiled) -> float:
    line = next(c for c in compiled.changes if c.startswith("smooth_magnitude:"))
    match = re.search(r"evened out, alpha ([0-9.]+)", line)
    assert match, line
    return float(match.group(1))


@pytest.mark.parametrize("square,extra_axis", [("Pow", False), ("Mul", True)], ids=["pow", "mul-time-slice"])
def test_the_bins_are_evened_out_exactly(square, extra_axis, data):
    calib, evaluation = data
    model = spectrum_model(square, extra_axis)
    result = o2g.diff(model, calib=calib, data=evaluation, min_sqnr="none")
    compiled = o2g.compile(model, calib=calib)
    alpha = chosen_alpha(compiled)
    assert 0 < alpha <= 1
    assert result["verdict"]["passed"], result["verdict"]  # exact against the golden
    assert result["outputs"]["y"]["fp32_vs_original"]["sqnr_db"] > 100  # the float function is unchanged
    # the bins' calibrated ranges, as given and rescaled: their spread is raised to the power 1 - alpha
    tops = channel_ranges(build_float(compiled.graph), Dataset(calib, None, "calib"), ["mag"])["mag"]
    given = channel_ranges(build_float(spectrum_graph(model)), Dataset(calib, None, "calib"), ["mag"])["mag"]
    assert np.log(tops.max() / tops.min()) == pytest.approx((1 - alpha) * np.log(given.max() / given.min()),
                                                            rel=1e-4, abs=1e-4)


def spectrum_graph(model):
    """The model's graph after the default passes, without the calibrated one."""
    from onnx2gemmini.compiler import prepare
    return prepare(model)[1]


def test_the_amount_follows_the_weight_scales(data):
    """Simulated per pattern: with one weight scale for the Fourier conv, evening out fully would crush its
    loud bins' weights (the test model keeps 0.6 dB); with one per channel it pays."""
    calib, _ = data
    per_tensor = chosen_alpha(o2g.compile(spectrum_model(), calib=calib))
    per_channel = chosen_alpha(o2g.compile(spectrum_model(), calib=calib, weight_scales="channel"))
    assert per_tensor <= 0.5 < per_channel


def test_the_magnitude_is_one_step(data, monkeypatch):
    """passes/fuse_magnitude.py: sqrt(re*re + im*im) computed from the two int8 parts, the squares never
    rounded to int8 (their range is the square of the parts'); exact against the golden. Negative control: with
    the fusion switched off the squares are int8 tensors and the faint bins drown (measured 35.8 against 21.8 dB)."""
    calib, evaluation = data
    model = spectrum_model()
    compiled = o2g.compile(model, calib=calib)
    assert any(c.startswith("fuse_magnitude:") for c in compiled.changes)
    assert "Pow" not in {n.op_type for n in compiled.graph.nodes} and "Add" not in {n.op_type for n in compiled.graph.nodes}
    fused = o2g.diff(compiled, data=evaluation, min_sqnr="none")
    assert fused["verdict"]["passed"], fused["verdict"]
    monkeypatch.setattr(passes, "PASSES", tuple(p for p in passes.PASSES if p[0] != "fuse_magnitude"))
    plain = o2g.diff(model, calib=calib, data=evaluation, min_sqnr="none")
    ours, theirs = (r["fidelity"]["y"]["vs_original"]["sqnr_db"] for r in (fused, plain))
    assert ours > theirs + 8, (ours, theirs)


@pytest.mark.parametrize("square", ["Pow", "Mul"])
def test_the_fused_magnitude_matches_onnxruntime(square):
    """Two activations of any shape (not only a spectrum's halves), against onnxruntime's float ops on the
    QDQ model: every rounding (the squares, the sum, the square root) the same."""
    nodes = [helper.make_node("Relu", ["a"], ["x"]), helper.make_node("Sigmoid", ["b"], ["y"])]
    for part in ("x", "y"):
        nodes.append(helper.make_node("Pow", [part, "two"], [f"{part}2"]) if square == "Pow"
                     else helper.make_node("Mul", [part, part], [f"{part}2"]))
    nodes += [helper.make_node("Add", ["x2", "y2"], ["p"]), helper.make_node("Sqrt", ["p"], ["m"]),
              helper.make_node("Neg", ["m"], ["out"])]
    model = infer_outputs(nodes, {"a": [2, 3, 5, 7], "b": [2, 3, 5, 7]}, {"two": np.array(2.0, np.float32)},
                          outputs=("out",))
    compiled, result = assert_matches_ort(model, samples=6)
    assert any(c.startswith("fuse_magnitude:") for c in compiled.changes)
    assert sum(1 for s in compiled.plan.steps if getattr(s, "params", None) is not None
               and getattr(s.params, "fn", None) == "hypot") == 1


def test_a_slice_read_elsewhere_is_left_alone(data):
    calib, _ = data
    compiled = o2g.compile(spectrum_model(shared_slice=True), calib=calib)
    assert not any("smooth_magnitude" in c for c in compiled.changes)


def test_chained_1d_convs_are_paired_like_2d_ones():
    """conv1d's Squeeze and the next conv's Unsqueeze cancel: equalization and channel sorting pair the two
    convs, and the function is unchanged."""
    r = rng(7)
    scale = np.exp(r.uniform(-4, 1, 32)).astype(np.float32)[:, None, None]  # channel ranges 150x apart
    inits = {"w1": (r.normal(0, 1, (32, 8, 3)) * scale).astype(np.float32), "w2": r.normal(0, 1, (8, 32, 3)).astype(
        np.float32)}
    model = infer_outputs([helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1]),
                           helper.make_node("Relu", ["a"], ["r"]),
                           helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1])], {"x": [1, 8, 40]}, inits)
    calib = {"x": r.normal(0, 1, (16, 1, 8, 40)).astype(np.float32)}
    compiled = o2g.compile(model, calib=calib)
    ops = [n.op_type for n in compiled.graph.nodes]
    assert ops == ["Unsqueeze", "Conv", "Conv", "Squeeze"], ops
    assert any(c.startswith("equalize:") for c in compiled.changes)
    result = o2g.diff(compiled, data=calib, min_sqnr="none")
    assert result["verdict"]["passed"] and result["outputs"]["y"]["fp32_vs_original"]["sqnr_db"] > 100
