"""Softmax: a float kernel on the CPU, within 1 LSB of onnxruntime."""
import pytest
from onnx import helper

from tests.helpers import assert_matches_ort, infer_outputs


@pytest.mark.parametrize("shape,axis", [((2, 10), -1), ((2, 3, 5), 1), ((1, 4, 3, 3), 1)],
                         ids=["2d", "3d_axis1", "4d_channels"])
def test_softmax_within_one_lsb(shape, axis):
    model = infer_outputs([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], {"x": list(shape)})
    compiled, result = assert_matches_ort(model)
    step = next(s for s in compiled.plan.steps if getattr(s, "op", "") == "softmax")
    assert step.reason and result["layers"][0]["tolerance_lsb"] == 1
