"""Real architectures built with torch (deterministic seeds): MobileNetV2-like, MobileNetV3-small-like,
a ShuffleNet-like block and a 2-layer transformer encoder. Each must compile and match onnxruntime on its
QDQ model: bit for bit on Gemmini steps, within the stated LSB tolerance on CPU float steps."""
import os

import pytest

import onnx2gemmini as o2g
from onnx2gemmini.compare import run_diff
from onnx2gemmini.data import random_data

if os.environ.get("CI") == "true":
    import torch
    from torch import nn
else:
    torch = pytest.importorskip("torch")
    nn = torch.nn


def _export(module, shape, path):
    torch.manual_seed(0)
    module.eval()
    with torch.no_grad():
        for p in module.modules():  # non-trivial BatchNorm statistics, so folding is exercised
            if isinstance(p, nn.BatchNorm2d):
                p.running_mean.uniform_(-0.2, 0.2)
                p.running_var.uniform_(0.5, 1.5)
    torch.onnx.export(module, (torch.randn(*shape),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    return path


class InvertedResidual(nn.Module):
    def __init__(self, c_in, c_out, expand, stride):
        super().__init__()
        h = c_in * expand
        self.block = nn.Sequential(
            nn.Conv2d(c_in, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, h, 3, stride, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


def mobilenet_v2():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
                         InvertedResidual(16, 16, 4, 1), InvertedResidual(16, 24, 4, 2),
                         InvertedResidual(24, 24, 6, 1), nn.Conv2d(24, 64, 1), nn.ReLU6(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


class SqueezeExcite(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.f = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, c // 4, 1), nn.ReLU(),
                               nn.Conv2d(c // 4, c, 1), nn.Hardsigmoid())

    def forward(self, x):
        return x * self.f(x)


def mobilenet_v3_small():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish(),
        nn.Conv2d(16, 16, 5, 1, 2, groups=16, bias=False), nn.BatchNorm2d(16), nn.Hardswish(), SqueezeExcite(16),
        nn.Conv2d(16, 24, 1, bias=False), nn.BatchNorm2d(24),
        nn.Conv2d(24, 72, 1, bias=False), nn.BatchNorm2d(72), nn.Hardswish(),
        nn.Conv2d(72, 72, 5, 2, 2, groups=72, bias=False), nn.BatchNorm2d(72), nn.Hardswish(), SqueezeExcite(72),
        nn.Conv2d(72, 32, 1, bias=False), nn.BatchNorm2d(32),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 64), nn.Hardswish(), nn.Linear(64, 10))


class ShuffleBlock(nn.Module):
    """ShuffleNet v1 unit: grouped 1x1, channel shuffle, depthwise 3x3, grouped 1x1, residual add."""

    def __init__(self, c=24, groups=3):
        super().__init__()
        self.groups = groups
        self.g1 = nn.Sequential(nn.Conv2d(c, c, 1, groups=groups, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.dw = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, groups=c, bias=False), nn.BatchNorm2d(c))
        self.g2 = nn.Sequential(nn.Conv2d(c, c, 1, groups=groups, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        y = self.g1(x)
        n, c, h, w = y.shape
        y = y.reshape(n, self.groups, c // self.groups, h, w).transpose(1, 2).reshape(n, c, h, w)
        return torch.relu(x + self.g2(self.dw(y)))


def shufflenet_block():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 24, 3, 1, 1), nn.ReLU(), ShuffleBlock(), ShuffleBlock())


def transformer_encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


MODELS = {"mobilenet_v2": (mobilenet_v2, (1, 3, 32, 32)),
          "mobilenet_v3_small": (mobilenet_v3_small, (1, 3, 32, 32)),
          "shufflenet_block": (shufflenet_block, (1, 3, 12, 12)),
          "transformer_encoder": (transformer_encoder, (1, 8, 32))}


@pytest.mark.parametrize("weight_scales", ["tensor", "channel"])
@pytest.mark.parametrize("name", list(MODELS))
def test_real_architecture_matches_onnxruntime(tmp_path, name, weight_scales):
    build, shape = MODELS[name]
    path = _export(build(), shape, tmp_path / f"{name}.onnx")
    compiled = o2g.compile(path, calib=random_data(compiled_inputs(path), 16, seed=0), weight_scales=weight_scales)
    result = run_diff(compiled, random_data(compiled.graph.inputs, 4, seed=1))
    for layer in result["layers"]:
        assert layer["max_lsb_vs_ort_qdq"] <= layer["tolerance_lsb"], layer
        if layer["tolerance_lsb"] == 0:
            assert layer["mismatches_vs_ort_qdq"] == 0, layer
    assert result["verdict"]["passed"]
    gemmini_steps = [s for s in compiled.plan.steps if s.target == "gemmini"]
    assert gemmini_steps, "nothing ran on Gemmini"
    for out in result["outputs"].values():
        assert out["fp32_vs_int8"]["sqnr_db"] is None or out["fp32_vs_int8"]["sqnr_db"] > 15.0


def compiled_inputs(path):
    from onnx2gemmini.compiler import prepare
    return prepare(path)[1].inputs
