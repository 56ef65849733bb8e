"""emit/html_report.py + plots.py: report.html is one self-contained page that renders in a real browser
(headless Chromium: ink on the screenshot, no console message, no request), whose figures carry the
report's numbers, and which no model text can break out of."""
from __future__ import annotations

import html.parser
import re

import numpy as np
import pytest

import onnx2gemmini as o2g
from onnx2gemmini import quality
from onnx2gemmini.emit import plots
from onnx2gemmini.emit.html_report import CSP, report_html
from onnx2gemmini.emit.report import build_report
from tests.emit.browser import colours, ink, render
from tests.reliability.test_determinism import _small_net

DATA = np.random.default_rng(1).standard_normal((4, 1, 3, 16, 16)).astype(np.float32)


@pytest.fixture(scope="module")
def compiled():
    return o2g.compile(_small_net(), calib=DATA, command="onnx2gemmini net.onnx")


@pytest.fixture(scope="module")
def written(compiled, tmp_path_factory):
    return compiled.write(tmp_path_factory.mktemp("html") / "out")


class _Page(html.parser.HTMLParser):
    """Tags, attributes and ids of a page."""

    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]


def parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def test_the_page_renders_in_chromium(written, tmp_path):
    shown = render(written / "report.html", tmp_path)
    assert shown.console == [] and shown.requests == []
    assert ink(shown.screenshot) > 0.05 and colours(shown.screenshot) > 20
    blue = np.all(np.abs(shown.screenshot.astype(int) - (0x1F, 0x6F, 0xB4)) < 12, axis=-1)
    assert blue.sum() > 2000  # the Gemmini bars of the figures are drawn


def test_the_browser_checks_can_fail(tmp_path):
    """Negative control: a blank page that logs an error and fetches an image fails every check above."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><body><img src="http://example.invalid/x.png">'
                    '<script>console.error("boom")</script></body></html>')
    shown = render(page, tmp_path / "run")
    assert any("boom" in line for line in shown.console)
    assert shown.requests == ["http://example.invalid/x.png"]
    assert ink(shown.screenshot) < 0.01


def test_the_page_is_self_contained(written):
    text = (written / "report.html").read_text()
    page = parse(text)
    assert "script" not in page.tags and "img" not in page.tags and "link" not in page.tags
    assert ("meta", "content", CSP) in page.attrs
    refs = [v for tag, k, v in page.attrs if k in ("src", "href", "xlink:href", "action")]
    assert refs and all(v.startswith("#") for v in refs), refs
    ids = [v for _, k, v in page.attrs if k == "id"]
    assert len(ids) == len(set(ids))          # six SVGs share one id space
    assert page.tags.count("svg") == len(plots.FIGURES)
    assert "<?xml" not in text and "<!DOCTYPE svg" not in text and text.isascii()


def test_the_table_has_a_row_per_step(compiled, written):
    text = (written / "report.html").read_text()
    body = text[text.index("<tbody>"):text.index("</tbody>")]
    assert body.count("<tr>") == len(compiled.plan.steps)


def _report(compiled, measured=None):
    return build_report(compiled, compiled.timing, measured)


def test_the_roofline_places_every_gemmini_conv_and_matmul(compiled):
    report = _report(compiled)
    fig = plots.roofline(report)
    points = fig.axes[0].collections[0].get_offsets()
    rows = [r for r in report["layers"] if r["target"] == "gemmini" and r["macs"]]
    assert len(points) == len(rows) >= 3
    np.testing.assert_allclose(points[:, 0], [r["macs"] / r["dram_bytes"] for r in rows])
    np.testing.assert_allclose(points[:, 1], [r["macs"] / r["est_cycles"] for r in rows])
    roof = fig.axes[0].lines[0].get_ydata()
    assert max(roof) == report["config"]["dim"] ** 2
    assert all(y <= report["config"]["dim"] ** 2 for y in points[:, 1])


def test_the_arena_draws_every_buffer(compiled):
    report = _report(compiled)
    fig = plots.arena(report)
    assert len(fig.axes[0].collections) == len(report["memory"]["buffers"]) > 3
    top = max(b["offset"] + b["bytes"] for b in report["memory"]["buffers"])
    assert top == report["memory"]["arena_bytes"]


def test_quality_panels_follow_the_source(compiled):
    calib = _report(compiled, quality.from_calibration(compiled, compiled.calib_head))
    assert len(plots.quality(calib).axes) == 1   # SQNR only: mismatches need a diff
    result = o2g.diff(compiled, data=DATA)
    from_diff = _report(compiled, quality.from_diff(result))
    fig = plots.quality(from_diff)
    assert len(fig.axes) == 2
    measured = [l for l in result["layers"] if l["name"] in {r["name"] for r in from_diff["layers"]}]
    assert len(fig.axes[0].patches) == len(measured)
    page = report_html(from_diff)
    assert "mismatches are counted against onnxruntime" in page
    assert "No per-layer SQNR" in report_html(_report(compiled))


def test_the_page_is_deterministic(compiled):
    report = _report(compiled, quality.from_calibration(compiled, compiled.calib_head))
    page = report_html(report)
    assert page == report_html(report)
    assert re.search(r"\d{4}-\d{2}-\d{2}", page) is None  # no dates
