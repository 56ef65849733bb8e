"""Static memory for activations: one arena, offsets from buffer liveness (no malloc on the target).

Every int8 activation of a Plan (model outputs, temporaries, the quantized inputs) gets a fixed byte
offset in one arena; a view (Tensor.view_of) shares its base's offset, a channel slice (Tensor.slice_of)
starts at its first element inside its base. Two buffers may share bytes when
their live ranges (first step writing them .. last step reading them; model outputs live to the end)
do not overlap. The float model inputs are not in the arena: the program keeps them in their own buffers.

The lower bound is the largest total size of buffers live at one step (sizes rounded up to the
alignment, which any arena of aligned buffers must spend); the arena is placed by greedy first-fit in
a few orders and the smallest result kept, then improved by a short local search when it misses the
bound; on real nets it lands on the bound.
A pure function of the Plan: the same plan always gives the same offsets.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from .plan import Plan

ALIGN = 64  # row_align_acc(1) of the default config and a cache line: every buffer starts here
SEARCH_MAX_BUFFERS = 200  # the local search costs steps x buffers^2; larger nets keep the heuristic result


@dataclass(frozen=True)
class MemoryPlan:
    offsets: dict[str, int]               # arena tensor id (views too) -> byte offset
    live: dict[str, tuple[int, int]]      # base tensor id -> (first step, last step), inclusive
    arena_bytes: int
    lower_bound_bytes: int
    alignment: int = ALIGN

    @property
    def ratio(self) -> float:
        """arena / lower bound (1.0 is optimal)."""
        return self.arena_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0

    def to_dict(self) -> dict:
        return {"arena_bytes": self.arena_bytes, "lower_bound_bytes": self.lower_bound_bytes,
                "alignment": self.alignment, "ratio": round(self.ratio, 4)}


def align_up(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


def arena_tensors(plan: Plan) -> list[str]:
    """Tensor ids whose bytes live in the arena: everything but the float model inputs (and their views)."""
    outside = set(plan.inputs)
    return [tid for tid in plan.tensors if plan.base(tid).id not in outside]


def live_ranges(plan: Plan) -> dict[str, tuple[int, int]]:
    """Base tensor id -> (first, last) step index touching it or any of its views; outputs live to the end."""
    ranges: dict[str, list[int]] = {}
    arena = set(arena_tensors(plan))
    for i, step in enumerate(plan.steps):
        for tid in step.reads() + step.writes():
            if tid in arena:
                r = ranges.setdefault(plan.base(tid).id, [i, i])
                r[0], r[1] = min(r[0], i), max(r[1], i)
    end = len(plan.steps)
    for tid in plan.outputs:
        if tid in arena:
            r = ranges.setdefault(plan.base(tid).id, [end, end])
            r[1] = end
    for tid in arena:  # buffers no step touches still need their bytes
        ranges.setdefault(plan.base(tid).id, [end, end])
    return {tid: (r[0], r[1]) for tid, r in ranges.items()}


def lower_bound(sizes: dict[str, int], live: dict[str, tuple[int, int]]) -> int:
    """Largest total aligned size of buffers live at the same step."""
    events: dict[int, int] = {}
    for tid, (first, last) in live.items():
        events[first] = events.get(first, 0) + sizes[tid]
        events[last + 1] = events.get(last + 1, 0) - sizes[tid]
    best = current = 0
    for point in sorted(events):
        current += events[point]
        best = max(best, current)
    return best


def first_fit(order: list[str], sizes: dict[str, int], live: dict[str, tuple[int, int]]) -> dict[str, int]:
    """Place buffers in `order`, each at the lowest offset free during its whole live range."""
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: dict[str, int] = {}
    for tid in order:
        first, last = live[tid]
        size = sizes[tid]
        busy = sorted((o, e) for o, e, f, l in placed if f <= last and first <= l)
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[tid] = offset
        placed.append((offset, offset + size, first, last))
    return offsets


def extent(offsets: dict[str, int], sizes: dict[str, int]) -> int:
    return max((offsets[t] + sizes[t] for t in offsets), default=0)


def plan_memory(plan: Plan, alignment: int = ALIGN, search_steps: int = 400) -> MemoryPlan:
    """Offsets for every arena tensor, the arena size and the lower bound it is measured against.

    First-fit in four heuristic orders; if none reaches the bound, a short deterministic local search
    (swap two buffers in the order, keep the swap unless the arena grows) tries to close the gap."""
    live = live_ranges(plan)
    sizes = {tid: align_up(max(plan.tensors[tid].nbytes, 1), alignment) for tid in live}
    bound = lower_bound(sizes, live)
    orders = [
        sorted(live, key=lambda t: (-sizes[t], live[t][0], t)),
        sorted(live, key=lambda t: (-(live[t][1] - live[t][0]), -sizes[t], t)),
        sorted(live, key=lambda t: (-sizes[t] * (live[t][1] - live[t][0] + 1), t)),
        sorted(live, key=lambda t: (live[t][0], -sizes[t], t)),
    ]
    placements = [(extent(offsets, sizes), i, offsets) for i, offsets in
                  enumerate(first_fit(order, sizes, live) for order in orders)]
    best_size, first, best = min(placements, key=lambda p: p[:2])
    best_order = orders[first]
    rng = random.Random(0)
    order = list(best_order)
    for _ in range(search_steps if 1 < len(order) <= SEARCH_MAX_BUFFERS else 0):
        if best_size <= bound:
            break
        i, j = rng.sample(range(len(order)), 2)
        order[i], order[j] = order[j], order[i]
        offsets = first_fit(order, sizes, live)
        if extent(offsets, sizes) <= best_size:
            best, best_size = offsets, extent(offsets, sizes)
        else:
            order[i], order[j] = order[j], order[i]
    all_offsets = {tid: best[plan.base(tid).id] + plan.elem_offset(tid) * np.dtype(plan.tensors[tid].dtype).itemsize
                   for tid in arena_tensors(plan)}
    return MemoryPlan(all_offsets, live, best_size, bound, alignment)
