"""Range estimators: minmax, percentile, mse."""
import numpy as np
import pytest
from onnx import helper

from onnx2gemmini.calibrate import calibrate
from onnx2gemmini.data import Dataset
from onnx2gemmini.errors import UsageError
from tests.helpers import infer_outputs


def identity_model():
    return infer_outputs([helper.make_node("Relu", ["x"], ["y"])], {"x": [1, 100_000]})


def data_with_outlier():
    x = np.random.default_rng(0).uniform(-1, 1, (4, 1, 100_000)).astype(np.float32)
    x[0, 0, 0] = 50.0
    return Dataset({"x": x}, None, "t")


def test_minmax_takes_the_outlier():
    assert calibrate(identity_model(), data_with_outlier(), "minmax")["x"] == pytest.approx(50.0)


@pytest.mark.parametrize("method,upper", [("percentile", 5.0), ("mse", 20.0)])
def test_robust_methods_clip_the_outlier(method, upper):
    # mse: 400k values in [-1, 1] plus one 50: rounding noise 2.07 t^2 vs clipping (50 - t)^2 -> t ~ 16.3
    amax = calibrate(identity_model(), data_with_outlier(), method)
    assert 0.5 < amax["x"] < upper
    assert amax["y"] <= calibrate(identity_model(), data_with_outlier(), "minmax")["y"]


def test_unknown_method():
    with pytest.raises(UsageError, match="calib-method"):
        calibrate(identity_model(), data_with_outlier(), "magic")
