"""The architectures users bring (scripts/zoo.py): the smallest member of every torchvision classification
family, the backbones of its detection and segmentation models, and a YOLOv8-style detector, exported with
random weights at a small input size: each compiles and passes `diff` against onnxruntime.
scripts/zoo_coverage.py sweeps the same set (and timm's families) into docs/zoo_coverage.md."""
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

if os.environ.get("CI") != "true" and importlib.util.find_spec("torchvision") is None:
    pytest.skip("the zoo test needs torchvision (test extra)", allow_module_level=True)

import zoo  # noqa: E402

import onnx2gemmini as o2g  # noqa: E402
from onnx2gemmini.compare import run_diff  # noqa: E402
from onnx2gemmini.data import Dataset  # noqa: E402

ARCHS = {a.name: a for a in zoo.torchvision_families() + zoo.detectors()}


@pytest.mark.parametrize("name", list(ARCHS))
def test_architecture_compiles_and_matches_onnxruntime(name, tmp_path):
    arch = ARCHS[name]
    path = zoo.export(arch, tmp_path / "model.onnx")
    compiled = o2g.compile(path, calib=Dataset({"x": zoo.calibration(arch, 2, 0)}, None, "synthetic"))
    result = run_diff(compiled, Dataset({"x": zoo.calibration(arch, 1, 1)}, None, "synthetic"))
    assert result["verdict"]["passed"], result["verdict"]["failures"][:3]
    cpu = [layer for layer in compiled.plan.steps if layer.target == "cpu"]
    assert all(step.reason for step in cpu)
