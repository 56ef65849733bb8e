"""memory.py: every activation gets an aligned arena offset; buffers live at the same time never share
bytes; views share their base's; the arena stays within 10% of the live-set lower bound."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnx2gemmini as o2g
from onnx2gemmini.memory import ALIGN, align_up, live_ranges, lower_bound, plan_memory
from onnx2gemmini import cpu
from onnx2gemmini.plan import CpuOp, Plan, Tensor
from tests.emit.c_models import MODELS
from tests.helpers import random_dataset

ROOT = Path(__file__).resolve().parents[1]
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def compiled_plan(name: str) -> Plan:
    if name == "digits":
        return o2g.compile(ROOT / "models" / "digits_cnn.onnx", calib=ROOT / "models" / "digits_calib.npz").plan
    if name.startswith("light_"):
        return o2g.compile(LIGHT / f"{name}.onnx", num_calib=1).plan
    model = MODELS[name]()
    return o2g.compile(model, calib=random_dataset(model, 2, 0)).plan


def assert_valid(plan: Plan, mem):
    for tid, off in mem.offsets.items():
        t, base = plan.tensors[tid], plan.base(tid)
        if t.slice_of:  # a channel range inside its base: starts at its first element, ends inside
            assert off == mem.offsets[base.id] + plan.elem_offset(tid) * np.dtype(t.dtype).itemsize, tid
            last_row = (t.nbytes // t.shape[-1] - 1) * plan.row_stride(tid) + t.shape[-1]
            assert plan.elem_offset(tid) + last_row <= int(np.prod(base.shape)), tid
            continue
        assert off % ALIGN == 0 and off + t.nbytes <= mem.arena_bytes, tid
        if t.view_of:
            assert off == mem.offsets[base.id]
    bases = sorted(mem.live)
    for i, a in enumerate(bases):
        for b in bases[i + 1:]:
            (fa, la), (fb, lb) = mem.live[a], mem.live[b]
            if fa <= lb and fb <= la:  # live at the same time: disjoint bytes
                oa, ob = mem.offsets[a], mem.offsets[b]
                assert oa + plan.tensors[a].nbytes <= ob or ob + plan.tensors[b].nbytes <= oa, (a, b)


@pytest.mark.parametrize("name", ["digits", "light_resnet50", "light_inception_v1", "attention_matmuls",
                                  "grouped_conv", "two_inputs_three_outputs", "concat_requantized"])
def test_offsets_are_valid_and_near_the_bound(name):
    plan = compiled_plan(name)
    mem = plan_memory(plan)
    assert_valid(plan, mem)
    assert mem.lower_bound_bytes <= mem.arena_bytes <= 1.1 * mem.lower_bound_bytes
    assert plan_memory(plan) == mem  # a pure function of the plan


def test_float_inputs_stay_out_and_outputs_live_to_the_end():
    plan = compiled_plan("two_inputs_three_outputs")
    mem = plan_memory(plan)
    assert not set(plan.inputs) & set(mem.offsets)
    for tid in plan.outputs:
        assert mem.live[plan.base(tid).id][1] == len(plan.steps)


def tiny_plan(sizes: list[int]) -> Plan:
    """A chain x -> t0 -> t1 -> ... of int8 buffers with the given sizes (clip steps)."""
    tensors = {"x__f32": Tensor("x__f32", "x", (sizes[0],), "float32", kind="input"),
               "t0": Tensor("t0", "x", (sizes[0],))}
    steps = [CpuOp("q", inputs=("x__f32",), outputs=("t0",), params=cpu.Quantize(0.1))]
    for i, n in enumerate(sizes[1:], 1):
        tensors[f"t{i}"] = Tensor(f"t{i}", "", (n,))
        steps.append(CpuOp(f"c{i}", inputs=(f"t{i - 1}",), outputs=(f"t{i}",), params=cpu.Clip(0, 1)))
    base = o2g.compile(ROOT / "models" / "digits_cnn.onnx", calib=ROOT / "models" / "digits_calib.npz").plan
    return dataclasses.replace(base, tensors=tensors, constants={}, steps=tuple(steps), inputs=("x__f32",),
                               outputs=(f"t{len(sizes) - 1}",))


def test_a_chain_ping_pongs_between_two_buffers():
    plan = tiny_plan([1000, 100, 1000, 100, 1000])
    mem = plan_memory(plan)
    assert mem.lower_bound_bytes == align_up(1000) + align_up(100)
    assert mem.arena_bytes == mem.lower_bound_bytes
    assert_valid(plan, mem)


def test_views_share_their_base():
    plan = tiny_plan([64, 64])
    view = Tensor("v", "", (8, 8), view_of="t1")
    plan = dataclasses.replace(plan, tensors={**plan.tensors, "v": view}, outputs=("v",))
    mem = plan_memory(plan)
    assert mem.offsets["v"] == mem.offsets["t1"] and "v" not in mem.live
    assert mem.live["t1"][1] == len(plan.steps)  # the output view keeps its base alive


def test_lower_bound_counts_the_largest_live_set():
    live = {"a": (0, 1), "b": (1, 2), "c": (2, 3)}
    assert lower_bound({"a": 64, "b": 128, "c": 64}, live) == 192
    assert lower_bound({"a": 64, "b": 64, "c": 64}, {"a": (0, 0), "b": (1, 1), "c": (2, 2)}) == 64


def test_live_ranges_cover_reads_and_writes():
    plan = tiny_plan([10, 20, 30])
    assert live_ranges(plan) == {"t0": (0, 1), "t1": (1, 2), "t2": (2, 3)}
    assert np.all([r[0] <= r[1] for r in live_ranges(plan).values()])
