"""Standalone Relu and Clip: exact int8 clips on the CPU."""
import numpy as np
import pytest
from onnx import helper

from tests.helpers import assert_matches_ort, infer_outputs


def unary_model(op, shape=(2, 10), **kw):
    inits = {}
    inputs = ["x"]
    if op == "Clip":
        for name in ("lo", "hi"):
            if name in kw:
                inits[name] = np.float32(kw[name])
                inputs.append(name)
            else:
                inputs.append("")
        while inputs and inputs[-1] == "":
            inputs.pop()
    return infer_outputs([helper.make_node(op, inputs, ["y"])], {"x": list(shape)}, inits)


UNARY = {"relu": ("Relu", {}), "clip_sym": ("Clip", {"lo": -0.5, "hi": 0.5}), "clip_min_only": ("Clip", {"lo": -0.2}),
         "clip_0_6_standalone": ("Clip", {"lo": 0.0, "hi": 6.0})}


@pytest.mark.parametrize("case", list(UNARY), ids=list(UNARY))
def test_standalone_unary_is_exact(case):
    op, kw = UNARY[case]
    compiled, _ = assert_matches_ort(unary_model(op, **kw))
    assert any(getattr(s, "op", "") == "clip" for s in compiled.plan.steps)
