"""Strided channel slices: Gemmini steps that read or write a range of another tensor's channels in place.

One representation (Tensor.slice_of + offset; rows strided by the parent's width) serves three uses:
grouped convs read their group's input channels and write their group's output channels; per-channel
weight groups write their output channels; and Concat inputs produced by a Gemmini matmul or conv are
written straight into their channel range of the concat buffer (`concat_in_place`), so the concat copies
only what came from elsewhere. Gemmini steps take their row strides from the tensors (`restride`): the
stride arguments of tiled_matmul and tiled_conv_stride_auto. The MLIR tile ops read dense memrefs only,
so `densify` turns slices back into explicit copies for that back end.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .cpu import Concat, Remap
from .plan import Conv, CpuOp, Matmul, Plan, Step, Tensor, row_stride

COMPACT_INDEX = 4096  # a channel copy's index past this many positions runs on views (see _channel_copy)


def is_slice(tensors: dict[str, Tensor], tid: str | None) -> bool:
    return tid in tensors and tensors[tid].slice_of is not None


def _strided(tensors: dict[str, Tensor], tid: str | None) -> bool:
    """A slice whose rows are apart in its base: a single-row slice (a contiguous range, such as one batch
    of a flat view) keeps the step's own dense strides."""
    if not is_slice(tensors, tid):
        return False
    t = tensors[tid]
    return int(np.prod(t.shape[:-1], dtype=np.int64)) > 1 and row_stride(tensors, tid) != t.shape[-1]


def restride(step: Step, tensors: dict[str, Tensor]) -> Step:
    """Row strides of a Matmul or Conv from its operands: the parent's width for strided slices, dense
    otherwise."""
    if isinstance(step, Matmul):
        strides = {field: row_stride(tensors, tid) for field, tid in
                   (("stride_A", step.A), ("stride_B", step.B), ("stride_C", step.C)) if _strided(tensors, tid)}
        return dataclasses.replace(step, **strides) if strides else step
    if isinstance(step, Conv):
        strides = {field: row_stride(tensors, tid) for field, tid in
                   (("in_stride", step.input), ("out_stride", step.output)) if _strided(tensors, tid)}
        return dataclasses.replace(step, **strides) if strides else step
    return step


def _strided_reader(step: Step, tid: str, tensors: dict[str, Tensor]) -> bool:
    """Steps that can read `tid` through a row stride: the A operand of a matmul, the input of a conv, and
    the input of a per-channel affine map over the last axis (o2g_affine's x_row)."""
    if isinstance(step, CpuOp):
        return step.op == "affine" and step.inputs[0] == tid and \
            step.params.axis == len(tensors[tid].shape) - 1
    return (isinstance(step, Matmul) and step.A == tid and step.B != tid and step.D != tid) or \
        (isinstance(step, Conv) and step.input == tid)


def _strided_writer(step: Step, tensors: dict[str, Tensor]) -> bool:
    """Steps that can write through a row stride: Gemmini's matmul and conv, and a last-axis concat (which
    makes DenseNet's chains of concats one buffer)."""
    if isinstance(step, CpuOp):
        return step.op == "concat" and step.params.axis == len(tensors[step.outputs[0]].shape) - 1
    return isinstance(step, (Matmul, Conv))


def concat_in_place(tensors: dict[str, Tensor], steps: list[Step], outputs: list[str],
                    constants: dict | None = None) -> list[Step]:
    """Concats on the last storage axis (NHWC channels) whose inputs a Gemmini matmul/conv (or an earlier
    concat) writes at the concat's own scale (or at their own, for a concat that keeps its inputs' scales): those inputs become slices of the concat buffer, written in
    place, as long as everything else reading them can read strided rows. The concat copies the rest (its
    `in_place` flags say which); a concat left with nothing to copy is dropped. An input that already has
    slices of its own (a nested concat) takes them along. A constant input (in `constants`) is always
    copied. Mutates `tensors`; returns the new step list."""
    writers: dict[str, list[int]] = {}
    readers: dict[str, list[int]] = {}
    for i, step in enumerate(steps):
        for tid in step.writes():
            writers.setdefault(tid, []).append(i)
        for tid in step.reads():
            readers.setdefault(tid, []).append(i)
    viewed = {t.view_of for t in tensors.values()}
    result: list[Step] = []
    for i, step in enumerate(steps):
        if not (isinstance(step, CpuOp) and step.op == "concat"):
            result.append(step)
            continue
        out = tensors[step.outputs[0]]
        if step.params.axis != len(out.shape) - 1 or out.slice_of or out.view_of or out.dtype != "int8":
            result.append(step)
            continue
        flags, offset = [], 0
        for tid, scale in zip(step.inputs, step.params.in_scales):
            if tid not in tensors:  # a constant operand
                flags.append(False)
                offset += (constants or {})[tid].shape[-1]
                continue
            t = tensors[tid]
            ok = ((scale == step.params.out_scale or step.params.keeps_scales) and t.dtype == "int8"
                  and t.view_of is None and t.slice_of is None and tid not in outputs and tid not in viewed
                  and step.inputs.count(tid) == 1 and len(writers.get(tid, [])) == 1
                  and _strided_writer(steps[writers[tid][0]], tensors)
                  and all(j == i or _strided_reader(steps[j], tid, tensors) for j in readers.get(tid, [])))
            if ok:
                tensors[tid] = dataclasses.replace(t, slice_of=out.id, offset=offset)
            flags.append(ok)
            offset += t.shape[-1]
        if all(flags):
            continue
        if any(flags):
            step = dataclasses.replace(step, params=dataclasses.replace(step.params, in_place=tuple(flags)),
                                       reason=f"{step.reason}; {sum(flags)} of {len(flags)} inputs are written in "
                                              "place by their Gemmini producer, the rest is copied")
        result.append(step)
    return result


def densify(plan: Plan) -> Plan:
    """The same computation without slices, for back ends whose operations take dense buffers only.

    A slice that holds data of its own (a step writes it, or slices of it hold data: nested concats)
    becomes its own buffer; its parent is then assembled by the concat that already writes it (all inputs
    copied again) or by a new channel concat after the last write of its parts. A slice only read becomes
    a copy of its channel range, made before its first reader."""
    tensors = dict(plan.tensors)
    slices = [tid for tid, t in tensors.items() if t.slice_of is not None]
    if not slices:
        return plan
    written = {tid for s in plan.steps for tid in s.writes()}
    children: dict[str, list[str]] = {}
    for tid in slices:
        children.setdefault(plan.tensors[tid].slice_of, []).append(tid)

    def holds_data(tid: str) -> bool:
        return tid in written or any(holds_data(c) for c in children.get(tid, ()))

    steps = list(plan.steps)
    for tid in slices:
        tensors[tid] = dataclasses.replace(tensors[tid], slice_of=None, offset=0)
    parents = [p for p in children if any(holds_data(c) for c in children[p])]
    depth = {p: 0 for p in parents}
    for p in parents:  # assemble inner parents (deeper slices) before the parents they are part of
        t = plan.tensors[p]
        while t.slice_of is not None:
            depth[p] += 1
            t = plan.tensors[t.slice_of]
    for parent in sorted(parents, key=lambda p: -depth[p]):
        parts = sorted((c for c in children[parent] if holds_data(c)), key=lambda c: plan.tensors[c].offset)
        concat = next((k for k, s in enumerate(steps) if isinstance(s, CpuOp) and s.op == "concat"
                       and s.outputs == (parent,)), None)
        if concat is not None:
            s = steps[concat]
            steps[concat] = dataclasses.replace(s, params=dataclasses.replace(s.params, in_place=()))
            continue
        last = max(k for k, s in enumerate(steps) if set(s.writes()) & set(parts))
        scale, keeps = tensors[parent].scale, tensors[parent].scale_axis is not None  # keeps: each part its own
        steps.insert(last + 1, CpuOp(steps[last].node, inputs=tuple(parts), outputs=(parent,),
                                     params=Concat(len(tensors[parent].shape) - 1,
                                                   tuple(tensors[c].scale if keeps else scale for c in parts), scale,
                                                   keeps_scales=keeps),
                                     reason="channel slices written in place elsewhere: joined by a copy here"))
    for tid in slices:
        if holds_data(tid):
            continue
        first = next(k for k, s in enumerate(steps) if tid in s.reads())
        source, target, index = _channel_copy(plan, tensors, tid)
        steps.insert(first, CpuOp(steps[first].node, inputs=(source,), outputs=(target,), params=Remap(index),
                                  reason="a channel slice read in place elsewhere: copied here"))
    sliced = set(slices)
    steps = [restride_dense(s) if sliced.intersection(s.reads() + s.writes()) else s for s in steps]
    return dataclasses.replace(plan, tensors=tensors, steps=tuple(steps))


def _channel_copy(plan: Plan, tensors: dict[str, Tensor], tid: str) -> tuple[str, str, tuple[int, ...]]:
    """(input, output, Remap index) copying slice `tid` out of its parent. The index lists the positions
    copied along each axis, so the last axis alone lists the slice's width; past COMPACT_INDEX (SAM's
    attention heads: 16.7M; its 10,528 copies 208M positions, GBs as Python ints) the copy runs between views that split the last axis
    into [n, b], b dividing the parent's width, the offset and the width, and lists w/b + b positions."""
    t = plan.tensors[tid]
    lead, width, parent = t.shape[:-1], t.shape[-1], plan.tensors[t.slice_of]
    split = math.gcd(parent.shape[-1], t.offset, width)
    b = max((d for d in range(1, math.isqrt(width) + 1) if split % d == 0), default=1) \
        if width > COMPACT_INDEX else 1
    if b == 1:
        maps = [range(n) for n in lead] + [range(t.offset, t.offset + width)]
        return t.slice_of, tid, tuple(i for m in maps for i in m)
    views = []
    for of, last in ((t.slice_of, parent.shape[-1]), (tid, width)):
        view = f"{of}__by{b}"
        tensors[view] = dataclasses.replace(tensors[of], id=view, onnx_name="", shape=lead + (last // b, b),
                                            layout="plain", view_of=of, slice_of=None, offset=0)
        views.append(view)
    maps = [range(n) for n in lead] + [range(t.offset // b, (t.offset + width) // b), range(b)]
    return views[0], views[1], tuple(i for m in maps for i in m)


def restride_dense(step: Step) -> Step:
    """Dense row strides again, for a step whose slices became buffers of their own."""
    if isinstance(step, Matmul):
        return dataclasses.replace(step, stride_A=step.K, stride_B=step.J, stride_C=step.J)
    if isinstance(step, Conv):
        return dataclasses.replace(step, in_stride=step.in_channels, out_stride=step.out_channels)
    return step
