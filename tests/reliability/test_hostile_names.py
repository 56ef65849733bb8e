"""Hostile names: any Unicode in a model's node, tensor and graph names (and the config's name) reaches the
C, MLIR, Makefile, Markdown and HTML only through emit/names.py. The C builds with -Werror and computes the
emulator's bytes, the payloads stay inert, the MLIR parses, report.md's table keeps its shape, report.html
keeps its elements and table, and model.annotated.onnx adds printable text only."""
from __future__ import annotations

import dataclasses
import html.parser
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import onnx2gemmini as o2g
from onnx2gemmini.config import PRESETS
from onnx2gemmini.emit.names import ascii_text
from onnx2gemmini.emit.c import RUNTIME_FILES, c_files
from onnx2gemmini import quality
from onnx2gemmini.emit.annotated import KEY, annotated_model
from onnx2gemmini.emit.html_report import report_html
from onnx2gemmini.emit.report import build_report, report_markdown
from onnx2gemmini.run import hostc
from onnx2gemmini.run.emulator import Emulator
from onnx2gemmini.run.selftest import selftest_case
from tests.helpers import random_dataset
from tests.reliability.common import conv_model

CC = os.environ.get("CC", "cc")
PAYLOADS = [
    '*\\ __attribute__((constructor)) static void f(void){ system("touch PWNED"); } /\\*',
    "x */ int pwned = 1; /* y",
    "\u202ereversed\u2066 isolate\u2069",
    "nul\x00 vt\x0b ff\x0c nl\n cr\r tab\t",
    "??/ trigraph ??= #define X",
    "| col | `code` <script>alert(1)</script> \\",
    "# make comment \\",
    "é 漢字 🙂",
]
names = st.text(min_size=1, max_size=40).filter(lambda s: s.strip("\x00") != "")


def renamed(node_a: str, node_b: str, tensor_in: str, tensor_out: str, graph: str):
    """conv_model() with every name replaced (tensor names must differ to stay a valid graph)."""
    model = conv_model()
    model.graph.name = graph
    model.graph.node[0].name, model.graph.node[1].name = node_a, node_b + "\u0001"
    rename = {"x": tensor_in, "y": tensor_out if tensor_out != tensor_in else tensor_out + "'"}
    for vi in list(model.graph.input) + list(model.graph.output):
        vi.name = rename.get(vi.name, vi.name)
    for node in model.graph.node:
        node.input[:] = [rename.get(t, t) for t in node.input]
        node.output[:] = [rename.get(t, t) for t in node.output]
    return model


def assert_table_intact(markdown: str, rows: int) -> None:
    table = [line for line in markdown.splitlines() if line.startswith("| ")]
    header = table[0].count(" | ")
    assert len(table) == rows + 1 and all(line.count(" | ") == header for line in table), table


C_COMMENT_OR_STRING = re.compile(r'/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)


def check_generated_text(files: dict[str, bytes]) -> None:
    """Printable ASCII only; outside C comments and string literals, none of the payloads' code."""
    for name, data in files.items():
        if name.endswith((".c", ".h", ".inc", ".S", "Makefile")) and name not in RUNTIME_FILES:
            text = data.decode("ascii")
            assert all(32 <= ord(c) < 127 or c in "\n\t" for c in text), name
            code = C_COMMENT_OR_STRING.sub(" ", text) if name != "Makefile" else \
                "\n".join(line for line in text.splitlines() if not line.startswith("#"))
            for fragment in ("system(", "pwned = 1", "((constructor", "<script>"):
                assert fragment not in code, (name, fragment)


@pytest.mark.skipif(shutil.which("make") is None or shutil.which(CC) is None, reason="needs make and a C compiler")
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(names, names, names, names, names)
@example(*PAYLOADS[:5]).via("the payloads of the issue")
@example(*PAYLOADS[3:8]).via("the payloads of the issue")
def test_hostile_names_through_every_emitter(tmp_path_factory, node_a, node_b, tensor_in, tensor_out, graph):
    model = renamed(node_a, node_b, tensor_in, tensor_out, graph)
    config = dataclasses.replace(PRESETS["default"], name=PAYLOADS[0])
    compiled = o2g.compile(model, calib=random_dataset(model), config=config, command="onnx2gemmini " + graph)
    plan = compiled.plan
    sample, expected = selftest_case(plan)
    files = c_files(plan, sample, expected, compiled.command)
    check_generated_text(files)
    c_dir = tmp_path_factory.mktemp("hostile") / "c"
    for name, data in files.items():
        (c_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (c_dir / name).write_bytes(data)
    hostc.build(c_dir, ("model", "model-selftest"))
    got = hostc.run(c_dir, plan, sample)
    want = Emulator(plan).run(sample)
    for tid in plan.outputs:
        np.testing.assert_array_equal(got[tid], want[tid].reshape(got[tid].shape))
    proc = subprocess.run(["./model-selftest"], cwd=c_dir, capture_output=True, timeout=60)
    assert proc.returncode == 0 and b"PASS (exact)" in proc.stdout
    assert not (Path.cwd() / "PWNED").exists() and not (c_dir / "PWNED").exists()
    report = build_report(compiled, compiled.timing)
    assert_table_intact(report_markdown(report), len(plan.steps))


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(names, names, names, names, names)
@example(*PAYLOADS[:5])
def test_hostile_names_in_mlir(node_a, node_b, tensor_in, tensor_out, graph):
    pytest.importorskip("torch_mlir", reason="the MLIR parser comes with the test extra")
    model = renamed(node_a, node_b, tensor_in, tensor_out, graph)
    check_mlir(o2g.compile(model, calib=random_dataset(model)).plan, "onnx2gemmini " + graph)


def check_mlir(plan, command: str) -> None:
    """model.mlir parses, ASCII only; OUT/mlir/'s self-test tables, data and Makefile hold no payload code, its
    model_checked.mlir parses and o2g_mlir_selftest.c compiles with them under -Werror."""
    from onnx2gemmini.emit.mlir import emit_mlir
    from onnx2gemmini.emit.mlir_program import RUNTIME_FILES as MLIR_RUNTIME_FILES, mlir_program_files
    from onnx2gemmini.slices import densify
    from tests.emit.mlir_interp import parse

    text = emit_mlir(plan, command)
    assert text.isascii()
    parse(text)
    sample, expected = selftest_case(densify(plan))
    files = mlir_program_files(plan, sample, expected, command)
    check_generated_text({k: v for k, v in files.items() if k not in MLIR_RUNTIME_FILES})
    parse(files["model_checked.mlir"].decode("ascii"))
    if shutil.which(CC):
        with tempfile.TemporaryDirectory() as out:
            for name, data in files.items():
                Path(out, name).write_bytes(data)
            proc = subprocess.run([CC, "-std=gnu99", "-fsyntax-only", "-Wall", "-Werror", f"-I{out}",
                                   str(Path(out, "o2g_mlir_selftest.c"))], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr


# Every element report.html may contain: its own markup and what matplotlib's SVG writer emits.
HTML_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "code", "div", "b", "figure",
             "figcaption", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "svg", "metadata", "rdf:rdf",
             "ns2:work", "cc:work", "dc:type", "dc:date", "dc:format", "dc:creator", "cc:agent", "dc:title", "defs",
             "style", "g", "path", "use", "clippath", "rect", "text", "tspan", "polyline", "line", "pattern"}


class _Elements(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.rows, self.names = set(), 0, []
        self._cell = None

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.rows += tag == "tr"
        self._cell = [] if ("class", "name") in attrs else None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.names.append("".join(self._cell))
            self._cell = None


def check_html(page: str, step_names: list[str]) -> None:
    """Printable ASCII; only known elements (no script, no link, no img); one table row per step, whose
    name cell reads as the name's escaped ASCII text."""
    assert all(32 <= ord(c) < 127 or c == "\n" for c in page)
    parsed = _Elements()
    parsed.feed(page)
    assert parsed.tags <= HTML_TAGS, parsed.tags - HTML_TAGS
    assert parsed.rows == len(step_names) + 1  # the header row
    assert parsed.names == [ascii_text(n) for n in step_names]


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(names, names, names, names, names)
@example(*PAYLOADS[:5]).via("the payloads of the issue")
@example(*PAYLOADS[3:8]).via("the payloads of the issue")
def test_hostile_names_in_html_report_and_annotated_model(node_a, node_b, tensor_in, tensor_out, graph):
    model = renamed(node_a, node_b, tensor_in, tensor_out, graph)
    config = dataclasses.replace(PRESETS["default"], name=PAYLOADS[5])
    compiled = o2g.compile(model, calib=random_dataset(model), config=config, command="onnx2gemmini " + graph)
    report = build_report(compiled, compiled.timing, quality.from_calibration(compiled, compiled.calib_head))
    check_html(report_html(report), [step.node for step in compiled.plan.steps])
    annotated = annotated_model(compiled, report)
    onnx.checker.check_model(annotated)
    added = [p.value for n in annotated.graph.node for p in n.metadata_props if p.key.startswith(KEY)]
    added += [n.doc_string for n in annotated.graph.node] + [p.value for p in annotated.metadata_props]
    assert added and all(all(32 <= ord(c) < 127 or c == "\n" for c in text) for text in added)


@pytest.mark.skipif(shutil.which("make") is None or shutil.which(CC) is None, reason="needs make and a C compiler")
def test_hostile_names_through_sorted_channels(tmp_path):
    """passes/sort_channels.py names its permuted weights after the nodes: those names, and the payloads in
    every node and tensor name of a model it sorts, reach the C, the MLIR and report.md only escaped."""
    from tests.test_sort_channels import sorted_chain
    model = sorted_chain("silu_pool_prelu")
    rename = {name: f"{PAYLOADS[i % len(PAYLOADS)]}{i}" for i, name in
              enumerate(dict.fromkeys(t for n in model.graph.node for t in [*n.input, *n.output]))}
    for i, node in enumerate(model.graph.node):
        node.name = f"{PAYLOADS[(i + 3) % len(PAYLOADS)]}#{i}"
        node.input[:] = [rename[t] for t in node.input]
        node.output[:] = [rename[t] for t in node.output]
    for t in list(model.graph.initializer) + list(model.graph.input) + list(model.graph.output):
        t.name = rename[t.name]
    compiled = o2g.compile(model, calib=random_dataset(model))
    assert compiled.graph.channel_groups == {model.graph.node[0].name: compiled.config.dim}
    check_everywhere(compiled, tmp_path)


@pytest.mark.skipif(shutil.which("make") is None or shutil.which(CC) is None, reason="needs make and a C compiler")
def test_hostile_names_through_integer_inputs(tmp_path):
    """A token-id input and an attention-mask input named after the payloads, with the masks fused into the
    softmax and the embeddings' MaskRows: their names reach C (input tables, INPUT.bin's messages), the MLIR
    and report.md only escaped."""
    from tests.test_input_mask import deberta_style
    model = deberta_style()
    rename = {"ids": PAYLOADS[0], "mask": PAYLOADS[1]}
    for node in model.graph.node:
        node.input[:] = [rename.get(t, t) for t in node.input]
    for vi in model.graph.input:
        vi.name = rename.get(vi.name, vi.name)
    compiled = o2g.compile(model, calib=random_dataset(model))
    assert {s.params.op for s in compiled.plan.steps if hasattr(s, "params")} >= {"embedding", "mask_rows",
                                                                                   "softmax_input_mask"}
    check_everywhere(compiled, tmp_path)


def check_everywhere(compiled, tmp_path) -> None:
    """C (built with -Werror, self-test PASS (exact), no payload ran), report.md's table and the MLIR."""
    plan = compiled.plan
    sample, expected = selftest_case(plan)
    files = c_files(plan, sample, expected, compiled.command)
    check_generated_text(files)
    c_dir = tmp_path / "c"
    for name, data in files.items():
        (c_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (c_dir / name).write_bytes(data)
    hostc.build(c_dir, ("model", "model-selftest"))
    proc = subprocess.run(["./model-selftest"], cwd=c_dir, capture_output=True, timeout=60)
    assert proc.returncode == 0 and b"PASS (exact)" in proc.stdout
    assert not (c_dir / "PWNED").exists()
    assert_table_intact(report_markdown(build_report(compiled, compiled.timing)), len(plan.steps))
    pytest.importorskip("torch_mlir", reason="the MLIR parser comes with the test extra")
    check_mlir(plan, "onnx2gemmini")
