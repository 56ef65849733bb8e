"""The generated programs' self-test sample: a real calibration sample when there is one, and a warning when
the sample the programs embed leaves a model output degenerate (a PASS on all-zero outputs proves nothing)."""
import numpy as np
import pytest

import onnx2gemmini as o2g
from onnx2gemmini.run.selftest import default_sample, degenerate, expected_values
from tests.helpers import make_model

ONES = np.ones((1, 1, 5, 5), np.float32)


def detector():
    """A smooth-pattern detector: a 5x5 box filter minus a threshold, then ReLU. Bright, smooth patches fire;
    zero-mean noise over the same range stays below the threshold, so its outputs are all zero."""
    from onnx import helper
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[2, 2, 2, 2]),
             helper.make_node("Relu", ["c"], ["y"])]
    return make_model(nodes, {"x": [1, 1, 8, 8]}, {"y": [1, 1, 8, 8]}, {"W": ONES, "B": np.array([-12.0], np.float32)})


def bright_patches(n=8):
    rng = np.random.default_rng(1)
    level = rng.uniform(0.6, 1.0, (n, 1, 1, 1, 1))
    return {"x": (level * np.ones((n, 1, 1, 8, 8)) + rng.normal(0, 0.02, (n, 1, 1, 8, 8))).astype(np.float32)}


def test_the_sample_is_the_first_calibration_sample(tmp_path):
    calib = bright_patches()
    compiled = o2g.compile(detector(), calib=calib)
    np.testing.assert_array_equal(compiled.selftest_sample["x"], calib["x"][0])
    out = compiled.write(tmp_path / "out", emit=("c",))
    assert calib["x"][0].astype(np.float32).tobytes() in (out / "c" / "selftest_data.bin").read_bytes()
    expected = expected_values(compiled.plan, compiled.selftest_sample)[compiled.plan.outputs[0]]
    assert np.count_nonzero(expected) > expected.size // 2 and degenerate(expected) is None
    assert not [w for w in compiled.warnings if "self-test sample" in w]
    # negative control: the seeded noise the programs embedded before gives all zeros on this detector
    noise = expected_values(compiled.plan, default_sample(compiled.plan))[compiled.plan.outputs[0]]
    assert degenerate(noise) == "all zero"


def test_noise_that_leaves_outputs_zero_is_a_warning_in_the_report(tmp_path):
    compiled = o2g.compile(detector())  # no calibration data: the sample is seeded noise
    [warning] = [w for w in compiled.warnings if "self-test sample" in w]
    assert "seeded noise" in warning and "output 'y' is all zero" in warning
    import json
    report = json.loads((compiled.write(tmp_path / "out", emit=("c",)) / "report.json").read_text())
    assert warning in report["warnings"]


def test_constant_weights_make_equal_outputs_a_warning():
    from onnx import helper
    model = make_model([helper.make_node("MatMul", ["x", "W"], ["y"])], {"x": [1, 16]}, {"y": [1, 4]},
                       {"W": np.full((16, 4), 0.5, np.float32)})
    compiled = o2g.compile(model, calib={"x": np.random.default_rng(0).normal(0, 1, (8, 1, 16)).astype(np.float32)})
    assert any("output 'y' is all equal" in w for w in compiled.warnings), compiled.warnings


@pytest.mark.parametrize("values,why", [
    ([0, 0, 0], "all zero"), ([5, 5], "all equal (5)"), ([127, 127, -128, 3], "75% saturated at -128/127"),
    ([127, 3, -128, 4], None), ([1, 2, 3], None), ([0], None), ([127], "100% saturated at -128/127")])
def test_degenerate(values, why):
    assert degenerate(np.array(values, np.int8)) == why


@pytest.mark.parametrize("values,why", [([0.53], None), ([0.25, 0.25], "all equal (0.25)"), ([0.0, 0.0], "all zero"),
                                        ([127.0, -128.0, 3.5], None)])
def test_degenerate_float_outputs(values, why):
    """A float32 output (kept float): its value in the message, no int8 saturation, one value is not "all equal"."""
    assert degenerate(np.array(values, np.float32)) == why
