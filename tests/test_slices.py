"""slices.py: which concat inputs are written in place, and `densify` computes the same bytes without slices."""
from __future__ import annotations

import numpy as np
import pytest

import onnx2gemmini as o2g
from onnx2gemmini.run.emulator import Emulator
from onnx2gemmini.slices import densify
from tests.emit.c_models import MODELS, chain, weights
from tests.helpers import assert_matches_ort, random_dataset


def compiled(model):
    return o2g.compile(model, calib=random_dataset(model, 2, 0))


def concat_step(plan):
    return next((s for s in plan.steps if getattr(s, "op", "") == "concat"), None)


def two_convs(extra_nodes=(), concat_inputs=("c1", "c2"), outputs=("y",)):
    nodes = [("Conv", ["x", "W1"], ["c1"], {"pads": [1, 1, 1, 1]}), ("Conv", ["x", "W2"], ["c2"], {}),
             *extra_nodes, ("Concat", list(concat_inputs), ["y"], {"axis": 1})]
    return chain(nodes, {"x": [1, 3, 6, 6]}, {"W1": weights(1, 4, 3, 3, 3), "W2": weights(2, 5, 3, 1, 1)},
                 outputs=outputs)


CASES = {
    # name: (model, in-place flags of the concat; None: the concat step is gone, every input in place)
    "all_in_place": (lambda: two_convs(), None),
    "mixed_with_cpu_branch": (MODELS["concat_in_place"], [True, False, True]),
    "read_by_a_cpu_op": (lambda: two_convs([("Sigmoid", ["c1"], ["s"], {})], outputs=("y", "s")), [False, True]),
    "input_twice": (lambda: two_convs(concat_inputs=("c1", "c2", "c1")), [False, True, False]),
    "also_a_model_output": (lambda: two_convs(outputs=("y", "c1")), [False, True]),
    "other_scale": (MODELS["concat_requantized"], [True, False]),
    "dense_block_chain": (MODELS["dense_block"], None),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_in_place_inputs_and_exactness(case):
    factory, flags = CASES[case]
    result_compiled, result = assert_matches_ort(factory())
    plan = result_compiled.plan
    step = concat_step(plan)
    if flags is None:
        assert step is None
        assert sum(1 for t in plan.tensors.values() if t.slice_of) == (4 if case == "dense_block_chain" else 2)
    else:
        assert list(step.params.in_place or [False] * len(flags)) == flags
        for tid, in_place in zip(step.inputs, flags):
            assert (plan.tensors[tid].slice_of == step.outputs[0]) == in_place


@pytest.mark.parametrize("name", ["concat_in_place", "grouped_conv", "conv_weight_scale_per_channel", "dense_block"])
def test_densify_computes_the_same_bytes(name):
    from tests.emit.c_models import OPTIONS
    model = MODELS[name]()
    plan = o2g.compile(model, calib=random_dataset(model, 2, 0), **OPTIONS.get(name, {})).plan
    dense = densify(plan)
    assert any(t.slice_of for t in plan.tensors.values())
    assert not any(t.slice_of for t in dense.tensors.values())
    for s in dense.steps:  # every Gemmini step dense again
        if s.kind == "matmul":
            assert (s.stride_A, s.stride_C) == (s.K, s.J)
        if s.kind == "conv":
            assert (s.in_stride, s.out_stride) == (s.in_channels, s.out_channels)
    data = random_dataset(model, 2, 5)
    for i in range(2):
        want, got = Emulator(plan).run(data.sample(i)), Emulator(dense).run(data.sample(i))
        for tid in plan.outputs:
            np.testing.assert_array_equal(got[tid], want[tid])


def test_a_concat_on_another_axis_is_not_written_in_place():
    """Rows of a concat along H are not a channel range: its output stays a buffer of its own."""
    same = {"pads": [1, 1, 1, 1]}
    nodes = [("Conv", ["x", "W1"], ["c1"], same), ("Conv", ["x", "W2"], ["c2"], same),
             ("Concat", ["c1", "c2"], ["h"], {"axis": 2}), ("Conv", ["x2", "W3"], ["c3"], same),
             ("Concat", ["h", "c3"], ["y"], {"axis": 1})]
    model = chain(nodes, {"x": [1, 3, 6, 6], "x2": [1, 3, 12, 6]},
                  {"W1": weights(1, 4, 3, 3, 3), "W2": weights(2, 4, 3, 3, 3), "W3": weights(3, 2, 3, 3, 3)})
    compiled_model, _ = assert_matches_ort(model)
    plan = compiled_model.plan
    assert plan.tensors["h"].slice_of is None and plan.tensors["c3"].slice_of == "y"
