"""The architectures users bring (scripts/zoo.py): the smallest member of every torchvision classification
family, the backbones of its detection and segmentation models, and a YOLOv8-style detector, exported with
random weights at a small input size: each compiles and passes `diff` against onnxruntime.
scripts/zoo_coverage.py sweeps the same set (and timm's families) into docs/zoo_coverage.md."""
import dataclasses
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
from onnx2gemmini.fidelity import NO_FLOORS
from onnx2gemmini.data import Dataset  # noqa: E402

ARCHS = {a.name: a for a in zoo.torchvision_families() + zoo.detectors()}


# VGG's and AlexNet's classifiers hold most of their weights (102M of VGG11's 133M parameters in one
# 25,088 x 4,096 layer): here their hidden layers are 256 wide (the same ops, the first keeps its K), which
# took these two tests from 40 and 20 s to 9 and 5 s. Full-width classifiers are compiled and checked with
# onnx's light VGG19, AlexNet and ZFNet (tests/test_model_zoo.py); scripts/zoo_coverage.py runs them whole.
SLIM_CLASSIFIER, HIDDEN = ("vgg11", "alexnet"), 256
# ViT-B/16's twelve encoder layers are one block repeated: two of them prove the same ops (24 -> 6 s).
VIT_LAYERS = 2


def slim_classifier(arch: zoo.Arch, hidden: int) -> zoo.Arch:
    """`arch` with every Linear of its classifier but the last `hidden` wide."""
    def build():
        from torch import nn

        module = arch.build()
        layers = module.classifier
        linear = [k for k, m in enumerate(layers) if isinstance(m, nn.Linear)]
        for k in linear:
            m = layers[k]
            layers[k] = nn.Linear(m.in_features if k == linear[0] else hidden,
                                  m.out_features if k == linear[-1] else hidden)
        return module
    return dataclasses.replace(arch, build=build)


@pytest.mark.parametrize("name", list(ARCHS))
def test_architecture_compiles_and_matches_onnxruntime(name, tmp_path):
    arch = ARCHS[name]
    if name in SLIM_CLASSIFIER:
        arch = slim_classifier(arch, HIDDEN)
    if name == "vit_b_16":
        arch = dataclasses.replace(arch, build=lambda: zoo.torchvision_models().VisionTransformer(
            image_size=arch.shape[-1], patch_size=16, num_layers=VIT_LAYERS, num_heads=12, hidden_dim=768,
            mlp_dim=3072))
    path = zoo.export(arch, tmp_path / "model.onnx")
    compiled = o2g.compile(path, calib=Dataset({"x": zoo.calibration(arch, 2, 0)}, None, "synthetic"))
    result = run_diff(compiled, Dataset({"x": zoo.calibration(arch, 1, 1)}, None, "synthetic"), floors=NO_FLOORS)
    assert result["verdict"]["passed"], result["verdict"]["failures"][:3]
    cpu = [layer for layer in compiled.plan.steps if layer.target == "cpu"]
    assert all(step.reason for step in cpu)
