"""Planner: identifiers, pre-flight, plan serialization."""
import json

import numpy as np
from onnx import helper

import onnx2gemmini as o2g
from tests.helpers import infer_outputs, random_dataset


def test_plan_is_json_serializable_and_deterministic():
    nodes = [helper.make_node("Conv", ["in put", "W"], ["out/put"], kernel_shape=[1, 1], name="a*/b")]
    model = infer_outputs(nodes, {"in put": [1, 2, 3, 3]}, {"W": np.ones((2, 2, 1, 1), np.float32)},
                          outputs=("out/put",))
    a = o2g.compile(model, calib=random_dataset(model)).plan.to_dict()
    b = o2g.compile(model, calib=random_dataset(model)).plan.to_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert all(k.replace("_", "").isalnum() for k in a["tensors"])
