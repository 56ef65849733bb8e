"""onnx's light model zoo (real architectures, synthetic weights): every model compiles and writes its
artifacts; the CNNs keep at least 95% of their MACs on Gemmini and every CPU step says why."""
from pathlib import Path

import onnx
import pytest

import onnx2gemmini as o2g
from onnx2gemmini.emit.report import build_report

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = ["resnet50", "vgg19", "squeezenet", "densenet121", "inception_v1", "inception_v2", "shufflenet",
          "bvlc_alexnet", "zfnet512"]
MOSTLY_GEMMINI = {"resnet50", "vgg19", "squeezenet", "densenet121", "inception_v1", "bvlc_alexnet", "zfnet512"}


@pytest.mark.parametrize("name", MODELS)
def test_light_model_compiles(tmp_path, name):
    path = LIGHT / f"light_{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path.name} is not in this onnx wheel")
    compiled = o2g.compile(path, num_calib=1)
    report = build_report(compiled, compiled.timing)
    totals = report["totals"]
    share = totals["macs_on_gemmini"] / totals["macs"]
    if name in MOSTLY_GEMMINI:
        assert share >= 0.95, share
    for layer in report["layers"]:
        assert layer["target"] == "gemmini" or layer["reason"], layer
    out = compiled.write(tmp_path / "out")
    assert (out / "report.json").exists() and (out / "model.qdq.onnx").exists()
