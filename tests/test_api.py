"""The Python API as docs/api.md documents it: the page's example runs as written, a torch module compiles
like its exported ONNX file, `diff` takes a Compiled, and the reports take a diff result."""
from __future__ import annotations

import contextlib
import io
import json
import os

import numpy as np
import onnx
import pytest

import onnx2gemmini as o2g
from onnx2gemmini import torch_export
from tests.doc_blocks import REPO, blocks
from tests.reliability.common import conv_model

if os.environ.get("CI") == "true":
    import torch
else:
    torch = pytest.importorskip("torch")

API_PAGE = REPO / "docs" / "api.md"
GOOD = np.random.default_rng(0).standard_normal((6, 1, 3, 8, 8)).astype(np.float32)


def test_the_api_page_runs_as_written(tmp_path, monkeypatch):
    """Every python block of docs/api.md, in order, in one namespace, from a folder holding models/."""
    code = blocks(API_PAGE, ("python",))
    assert len(code) >= 6 and all(b.runs and b.file is None for b in code)
    (tmp_path / "models").symlink_to(REPO / "models")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "api_page"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for block in code:
            exec(compile(block.body, f"{API_PAGE}:{block.line}", "exec"), namespace)
    out = tmp_path / "digits_out"
    assert {"report.html", "model.annotated.onnx", "report.json"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "report.json").read_text())["quality"]["source"] == "diff"  # the last write
    assert namespace["result"]["verdict"]["passed"]
    assert namespace["tiny"].plan.model_name == "TinyNet"
    assert "no array for model input(s) input" in printed.getvalue()


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, image):
        y = torch.nn.functional.max_pool2d(torch.relu(self.conv(image)), 2)
        return self.fc(y.flatten(1))


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return TinyNet()


def test_a_torch_module_compiles_like_its_exported_file(net, tmp_path):
    x = torch.from_numpy(GOOD[0])
    path = tmp_path / "tiny.onnx"
    torch.onnx.export(net, (x,), str(path), dynamo=False, opset_version=17, input_names=["image"],
                      output_names=["output"])
    from_file = o2g.compile(path, calib={"image": GOOD})
    from_module = o2g.compile(net, example_inputs=(x,), calib={"image": GOOD})
    assert [i.name for i in from_module.graph.inputs] == ["image"]       # forward's parameter name
    assert [o.name for o in from_module.graph.outputs] == ["output"]
    a, b = from_file.plan.to_dict(), from_module.plan.to_dict()
    for key in ("model", "sha256"):
        a.pop(key), b.pop(key)
    assert a == b
    with torch.no_grad():
        expected = net(x).numpy()
    got = from_module.run({"image": GOOD[0]})["output"]
    assert np.corrcoef(expected.ravel(), got.ravel())[0, 1] > 0.99
    assert net.training  # the module's mode is restored after the export


def test_torch_tensors_are_data(net):
    x = torch.from_numpy(GOOD[0])
    plans = [o2g.compile(net, example_inputs=x, calib=c).plan.to_dict()
             for c in (GOOD, torch.from_numpy(GOOD), {"image": torch.from_numpy(GOOD)})]
    assert plans[0] == plans[1] == plans[2]


@pytest.mark.parametrize("kwargs,fragment", [
    ({}, "needs example_inputs"),
    ({"example_inputs": [1, 2]}, "expected a torch.Tensor"),
], ids=["missing", "not_a_tensor"])
def test_torch_mistakes_are_usage_errors(net, kwargs, fragment):
    with pytest.raises(o2g.UsageError, match=fragment):
        o2g.compile(net, **kwargs)


def test_example_inputs_without_a_module_is_a_usage_error():
    with pytest.raises(o2g.UsageError, match="goes with a torch.nn.Module"):
        o2g.compile(conv_model(), example_inputs=(np.zeros((1, 3, 8, 8)),))


def test_an_export_failure_is_a_model_error():
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("cannot trace this\nsecond line")

    with pytest.raises(o2g.ModelError, match="torch.onnx.export of Broken failed: cannot trace this$"):
        o2g.compile(Broken(), example_inputs=torch.zeros(1, 3))


def test_output_names_follow_the_number_of_outputs():
    class Two(torch.nn.Module):
        def forward(self, a, b):
            return a + b, a * b

    model = torch_export.export(Two(), (torch.zeros(1, 4), torch.ones(1, 4)))
    assert [i.name for i in model.graph.input] == ["a", "b"]
    assert [o.name for o in model.graph.output] == ["output_0", "output_1"]
    assert model.graph.name == "Two"
    onnx.checker.check_model(model)


def test_diff_of_a_compiled_model_is_the_diff_of_the_model():
    compiled = o2g.compile(conv_model(), calib=GOOD)
    assert o2g.diff(compiled, data=GOOD) == o2g.diff(conv_model(), calib=GOOD, data=GOOD)


def test_write_takes_a_diff_result(tmp_path):
    compiled = o2g.compile(conv_model(), calib=GOOD)
    result = o2g.diff(compiled, data=GOOD)
    report = json.loads((compiled.write(tmp_path / "out", diff=result) / "report.json").read_text())
    quality = report["quality"]
    assert quality["source"] == "diff" and quality["samples"] == len(GOOD)
    assert [l["name"] for l in quality["layers"]] == [l["name"] for l in result["layers"]]
    assert [l["mismatches"] for l in quality["layers"]] == [l["mismatches_vs_ort_qdq"] for l in result["layers"]]
    with pytest.raises(o2g.UsageError, match="diff= expects the result of o2g.diff"):
        compiled.write(tmp_path / "other", diff={"samples": 3})
