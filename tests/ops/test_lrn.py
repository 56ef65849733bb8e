"""LRN: a float kernel on the CPU within 1 LSB of onnxruntime."""
import pytest
from onnx import helper

from tests.helpers import assert_matches_ort, infer_outputs


@pytest.mark.parametrize("size", [3, 5])  # onnxruntime refuses even sizes
def test_lrn(size):
    model = infer_outputs([helper.make_node("LRN", ["x"], ["y"], size=size, alpha=1e-2, beta=0.75, bias=1.0)],
                          {"x": [1, 7, 4, 4]})
    assert_matches_ort(model, samples=3)
