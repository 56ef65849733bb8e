"""timm end to end (the whole sweep is scripts/zoo_coverage.py --timm): shrunk members of two families whose
coverage needed rewrites of their own, random weights, through the CLI: compile, `diff` against onnxruntime
and the C program's self-test on this host. sequencer2d runs bidirectional LSTMs over rows and columns
(the recurrence path); crossvit resizes its image bicubically for its second branch (cubic Resize)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

if os.environ.get("CI") != "true" and importlib.util.find_spec("timm") is None:
    pytest.skip("needs timm (test extra)", allow_module_level=True)

import zoo  # noqa: E402

from onnx2gemmini.run import hostc  # noqa: E402


def _timm(name: str, **kwargs):
    def build():
        zoo.torchvision_models()  # timm imports torchvision, which needs this order beside torch 2.13
        import timm
        return timm.create_model(name, pretrained=False, num_classes=10, **kwargs)
    return build


ARCHS = {
    "sequencer2d": zoo.Arch("sequencer2d_s", "sequencer", _timm(
        "sequencer2d_s", layers=[1, 1, 1, 1], embed_dims=[16, 32, 32, 32], hidden_sizes=[8, 16, 16, 16]),
        (1, 3, 56, 56)),
    "crossvit": zoo.Arch("crossvit_tiny_240", "crossvit", _timm(
        "crossvit_tiny_240", img_size=120, embed_dim=(24, 48), depth=((1, 1, 0),), num_heads=(2, 2),
        mlp_ratio=(2.0, 2.0, 1.0)), (1, 3, 120, 120)),
}
# the op each was chosen for, with the attribute that makes it so
REWRITES = {"sequencer2d": ("LSTM", "direction", b"bidirectional"), "crossvit": ("Resize", "mode", b"cubic")}


def cli(*args):
    return subprocess.run([sys.executable, "-m", "onnx2gemmini.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=900)


@pytest.mark.parametrize("name", list(ARCHS))
def test_timm_family_end_to_end(name, tmp_path):
    arch = ARCHS[name]
    path = zoo.export(arch, tmp_path / f"{name}.onnx")
    op, attribute, value = REWRITES[name]
    assert any(n.op_type == op and any(a.name == attribute and a.s == value for a in n.attribute)
               for n in onnx.load(path).graph.node)
    np.savez(tmp_path / "calib.npz", x=zoo.calibration(arch, 8, 0)[:, 0])
    np.savez(tmp_path / "data.npz", x=zoo.calibration(arch, 2, 1)[:, 0])

    out = tmp_path / "out"
    compiled = cli(path, "--calib", tmp_path / "calib.npz", "-o", out)
    assert compiled.returncode == 0, compiled.stderr[-2000:]
    diff = cli("diff", path, "--calib", tmp_path / "calib.npz", "--data", tmp_path / "data.npz")
    assert diff.returncode == 0 and "PASSED" in diff.stdout, diff.stdout[-3000:] + diff.stderr[-2000:]

    c_dir = out / "c"
    hostc.build(c_dir, ("model-selftest",))
    selftest = subprocess.run(["./model-selftest"], cwd=c_dir, capture_output=True, text=True, timeout=300)
    assert selftest.returncode == 0 and "PASS (exact)" in selftest.stdout, selftest.stdout[-2000:]
