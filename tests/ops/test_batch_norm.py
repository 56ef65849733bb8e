"""A standalone BatchNormalization: a per-channel float affine map on the CPU within 1 LSB of onnxruntime."""
import numpy as np
import pytest
from onnx import helper

from tests.helpers import assert_matches_ort, infer_outputs, rng


def bn_model(shape=(1, 4, 5, 5)):
    r = rng(0)
    c = shape[1]
    inits = {"s": r.uniform(0.5, 2, c).astype(np.float32), "b": r.normal(size=c).astype(np.float32),
             "m": r.normal(size=c).astype(np.float32), "v": r.uniform(0.5, 2, c).astype(np.float32)}
    return infer_outputs([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
                         {"x": list(shape)}, inits)


@pytest.mark.parametrize("shape", [(1, 4, 5, 5), (3, 4)], ids=["nchw", "nc"])
def test_standalone_batchnorm(shape):
    compiled, _ = assert_matches_ort(bn_model(shape))
    assert any(getattr(s, "op", "") == "affine" for s in compiled.plan.steps)
