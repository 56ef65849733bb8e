"""sensitivity.py (`diff --sensitivity`): every compared layer quantized alone, ranked by the output SQNR it
costs; golden.build_qdq(only=...) builds those models; the reports show the ranking."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx2gemmini as o2g
from onnx2gemmini import quality
from onnx2gemmini.ort_session import session
from onnx2gemmini.compare import _layers
from onnx2gemmini.data import load_data
from onnx2gemmini.emit import plots
from onnx2gemmini.emit.html_report import report_html
from onnx2gemmini.emit.names import markdown
from onnx2gemmini.emit.report import SENSITIVITY_TOP, build_report, report_json, report_markdown
from onnx2gemmini.golden import build_float, build_qdq
from onnx2gemmini.sensitivity import sensitivity

ROOT = Path(__file__).resolve().parents[1]
MODEL, CALIB, EVAL = (ROOT / "models" / n for n in ("digits_cnn.onnx", "digits_calib.npz", "digits_eval.npz"))
SAMPLES = 16


@pytest.fixture(scope="module")
def digits():
    compiled = o2g.compile(MODEL, calib=CALIB)
    return compiled, load_data(EVAL, compiled.graph.inputs).head(SAMPLES)


@pytest.fixture(scope="module")
def ranking(digits):
    return sensitivity(*digits)


def _run(model, dataset) -> np.ndarray:
    sess = session(model)
    return np.stack([sess.run(None, dataset.sample(i))[0] for i in range(dataset.num_samples)])


def test_only_every_node_is_the_whole_qdq_model_and_none_is_the_float_model(digits):
    compiled, data = digits
    graph, quant = compiled.graph, compiled.quant
    every = {n.name for n in graph.nodes}
    np.testing.assert_array_equal(_run(build_qdq(graph, quant, only=every), data), _run(build_qdq(graph, quant), data))
    np.testing.assert_array_equal(_run(build_qdq(graph, quant, only=set()), data), _run(build_float(graph), data))


def test_the_ranking_covers_every_compared_layer(digits, ranking):
    compiled, _ = digits
    compared = {l.name: l.op for l in _layers(compiled)}
    assert len(ranking) == len(compared) >= 5
    assert {r["name"]: r["op"] for r in ranking} == compared


def test_costs_are_finite_sorted_and_add_up(digits, ranking):
    compiled, data = digits
    costs = [r["sqnr_db_cost"] for r in ranking]
    assert all(math.isfinite(c) and c >= 0.0 for c in costs)
    assert costs == sorted(costs, reverse=True) and costs[0] > costs[-1]
    for r in ranking:
        assert r["sqnr_db_cost"] == pytest.approx(10 * math.log10(1 + r["noise_share"]))
    # Noise adds up roughly: the shares explain the whole int8 model's noise, give or take double counting.
    assert 0.7 < sum(r["noise_share"] for r in ranking) < 2.0
    # One layer quantized is less noisy than all of them: each SQNR is above the whole int8 model's.
    whole = o2g.diff(compiled, data=data)["outputs"]["logits"]["fp32_vs_int8"]["sqnr_db"]
    assert all(r["sqnr_db"] is not None and r["sqnr_db"] > whole - 0.5 for r in ranking), (whole, ranking)
    assert min(r["sqnr_db"] for r in ranking) == ranking[0]["sqnr_db"]  # one output: cost follows the SQNR


def test_progress_counts_every_layer(digits, ranking):
    calls = []
    sensitivity(*digits, progress=lambda n, total: calls.append((n, total)))
    assert calls == [(1, len(ranking))] * len(ranking)


def _two_matmuls(outlier: str):
    """x @ W1 @ W2 with one weight of 1000 among N(0, 1) weights in layer `outlier`, on an input that is
    always 0 (x[0] for the first layer, a dead column of W1 for the second): the outlier moves no output,
    but sets the per-tensor int8 weight scale and crushes every other weight of its layer to 0."""
    r = np.random.default_rng(0)
    w1 = r.standard_normal((16, 16)).astype(np.float32)
    w2 = r.standard_normal((16, 8)).astype(np.float32)
    if outlier == "first":
        w1[0, 0] = 1000.0
    else:
        w1[:, 0] = 0.0
        w2[0, 0] = 1000.0
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["h"], name="first"),
         helper.make_node("MatMul", ["h", "W2"], ["y"], name="second")], "two_matmuls",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")])
    x = r.standard_normal((32, 1, 16)).astype(np.float32)
    x[:, :, 0] = 0.0
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), x


@pytest.mark.parametrize("outlier", ["first", "second"])
def test_a_layer_made_hard_to_quantize_ranks_first(outlier):
    """Negative control: whichever layer holds the outlier, in graph order first or last, ranks first."""
    model, x = _two_matmuls(outlier)
    compiled = o2g.compile(model, calib=x, calib_method="mse")  # the ranges the figures below assume
    ranking = sensitivity(compiled, load_data(x, compiled.graph.inputs))
    assert [r["name"] for r in ranking][0] == outlier
    worst, other = ranking
    assert worst["sqnr_db"] < 3.0 and other["sqnr_db"] > 30.0
    assert worst["sqnr_db_cost"] > 2.5 and other["sqnr_db_cost"] < 0.05


def _report(compiled, result):
    return build_report(compiled, compiled.timing, quality.from_diff(result), result.get("sensitivity"))


def test_the_reports_show_the_ranking(digits, ranking):
    compiled, data = digits
    result = {**o2g.diff(compiled, data=data), "sensitivity": ranking}
    report = _report(compiled, result)
    assert json.loads(report_json(report))["sensitivity"] == ranking
    md = report_markdown(report)
    section = md[md.index("## Sensitivity"):]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| rank")]
    assert len(rows) == len(ranking)
    assert rows[0].startswith(f"| 1 | {markdown(ranking[0]['name'])} | {ranking[0]['op']} |")
    assert f"{ranking[0]['sqnr_db_cost']:.3f}" in rows[0]
    page = report_html(report)
    table = page[page.index('<table class="sensitivity">'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == len(ranking) + 1 and ranking[0]["name"] in table
    assert page.count("<svg") == len(plots.FIGURES) + 1  # the ranking's bar chart
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)) and page.isascii()  # its SVG ids do not clash with the other figures'
    bars = plots.sensitivity(report).axes[0].patches
    assert sorted(b.get_width() for b in bars) == sorted(r["sqnr_db_cost"] for r in ranking)
    plain = _report(compiled, {k: v for k, v in result.items() if k != "sensitivity"})
    assert "sensitivity" not in plain and "Sensitivity" not in report_markdown(plain)
    assert "Sensitivity" not in report_html(plain)


def test_the_reports_show_the_top_rows_and_json_every_one(digits, ranking):
    compiled, data = digits
    many = [{**ranking[i % len(ranking)], "sqnr_db_cost": 30.0 - i} for i in range(SENSITIVITY_TOP + 5)]
    report = build_report(compiled, compiled.timing, None, many)
    assert len(json.loads(report_json(report))["sensitivity"]) == SENSITIVITY_TOP + 5
    md = report_markdown(report)
    assert "| 20 |" in md and "| 21 |" not in md and "5 more in report.json" in md
    page = report_html(report)
    table = page[page.index('<table class="sensitivity">'):]
    assert table[:table.index("</table>")].count("<tr>") == SENSITIVITY_TOP + 1


def test_written_reports_show_the_ranking_of_a_diff_result(digits, ranking, tmp_path):
    """End to end: Compiled.write(OUT, diff=result) with a `sensitivity` list puts it in the three reports."""
    compiled, data = digits
    result = {**o2g.diff(compiled, data=data), "sensitivity": ranking}
    out = compiled.write(tmp_path / "out", emit="qdq", diff=result)
    assert json.loads((out / "report.json").read_text()).get("sensitivity") == ranking
    assert "## Sensitivity" in (out / "report.md").read_text()
    assert '<table class="sensitivity">' in (out / "report.html").read_text()
