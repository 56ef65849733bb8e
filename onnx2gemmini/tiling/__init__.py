"""Tiling of a Plan's Gemmini calls, and what each call costs (the `tiling` stage of DESIGN.md).

Why it exists: gemmini.h's `*_auto` heuristics fill the scratchpad greedily but ignore how often each
operand is re-read; choosing the tiles ourselves moves fewer bytes over the DMA. This module is the
plan-level face of the package's modules (each with one job):

  geometry  a conv as gemmini.h's tiled_conv sees it; tile names and spans
  baseline  gemmini.h's heuristics, transcribed (the baseline and the report's baseline_* figures)
  capacity  scratchpad/accumulator rows, exactly as gemmini.h counts them
  cost      DMA bytes (exact) and cycles (an ESTIMATE) of a call under given tiles
  search    the fewest estimated cycles within gemmini.h's bytes (then the fewest bytes); never above baseline
  dw        depthwise convs: Gemmini's tiled_conv_dw against the CPU kernel

Tiles are dicts at the Plan boundary, named as gemmini.h names them: tile_I/tile_J/tile_K (DIM blocks)
for matmuls; batches/porows/pocols/pochs/krows/kcols/kchs (elements; pooled rows/cols) for convs.
"""
from __future__ import annotations

import dataclasses

from ..cpu.costs import cycles as cpu_cycles
from ..normalizer import SOFTMAX
from ..plan import Conv, ConvDw, CpuOp, GlobalAverage, Matmul, Plan, Resadd
from .baseline import (baseline_conv_tiles, baseline_global_average_tile, baseline_matmul_tiles,
                              baseline_resadd_tiles)
from .capacity import conv_fits, conv_rows, matmul_fits, matmul_rows
from .cost import TileShape, conv_cost, global_average_cost, matmul_cost, resadd_cost
from .geometry import CONV_TILE_NAMES, MATMUL_TILE_NAMES, ConvGeometry, tiles_dict, tiles_tuple
from .dw import dw_cost, dw_shape
from .search import choose_conv_tiles, choose_matmul_tiles

__all__ = [
    "ConvGeometry", "apply_tiles", "baseline_conv_tiles", "baseline_global_average_tile",
    "baseline_matmul_tiles", "baseline_resadd_tiles", "baseline_tiles", "choose_conv_tiles",
    "choose_matmul_tiles", "choose_tiles", "attach_costs", "compute_shapes", "conv_fits", "conv_rows", "cost",
    "matmul_fits", "matmul_rows", "plan_costs", "step_costs", "TileShape",
]


def _tunable(step) -> bool:
    """Matmul and Conv steps take explicit tiles (tiled_matmul / tiled_conv); a conv with input dilation
    is left to gemmini.h (the cost model does not cover it; our handlers never emit one)."""
    return isinstance(step, Matmul) or (isinstance(step, Conv) and step.input_dilation == 1)


def baseline_tiles(step, config) -> dict | None:
    """What gemmini.h's `*_auto` call would choose for this step, as a tiles dict (None: CPU step)."""
    if isinstance(step, Matmul):
        return tiles_dict(MATMUL_TILE_NAMES, baseline_matmul_tiles(step.I, step.J, step.K, config))
    if isinstance(step, Conv):
        return tiles_dict(CONV_TILE_NAMES, baseline_conv_tiles(ConvGeometry.of(step), config))
    if isinstance(step, Resadd):
        return tiles_dict(("tile_I", "tile_J"), baseline_resadd_tiles(step.I, step.J, config))
    if isinstance(step, GlobalAverage):
        return {"channel_tile_size": baseline_global_average_tile(step.channels, config)}
    return None


def choose_tiles(step, config, hazards=None) -> dict | None:
    """Our tiles for a Matmul/Conv step (None for any other step: those keep gemmini.h's tiling), among
    the tiles for which `hazards(step, tiles)` finds nothing (scratchpad.find_hazards)."""
    if not _tunable(step):
        return None
    names = MATMUL_TILE_NAMES if isinstance(step, Matmul) else CONV_TILE_NAMES
    allowed = (lambda t: not hazards(step, tiles_dict(names, t))) if hazards else None
    if isinstance(step, Matmul):
        if step.act == SOFTMAX:  # the normalizer's statistics span a whole row: one tile along J
            whole_j, hazard_free = -(-step.J // config.dim), allowed
            allowed = lambda t: t[1] == whole_j and (hazard_free is None or hazard_free(t))  # noqa: E731
        t = choose_matmul_tiles(step.I, step.J, step.K, config, step.D is not None, allowed, step.c_bytes)
    else:
        t = choose_conv_tiles(ConvGeometry.of(step), config, step.bias is not None, allowed)
    return tiles_dict(names, t)


def cost(step, tiles, config) -> dict | None:
    """Cost of one Gemmini step under `tiles` (a dict, a tuple in gemmini.h's order, or None for the
    baseline): dram_bytes (exact), dram_breakdown, est_cycles, compute_cycles, dma_cycles, ideal_cycles,
    utilization (ESTIMATES), num_tiles. None for CPU steps."""
    if isinstance(step, Matmul):
        t = tiles_tuple(MATMUL_TILE_NAMES, tiles) if tiles else baseline_matmul_tiles(step.I, step.J, step.K, config)
        c = matmul_cost(step.I, step.J, step.K, t, config, step.D is not None, step.c_bytes)
        return c if step.act != SOFTMAX else _with_statistics_passes(c, step, config)
    if isinstance(step, Conv):
        g = ConvGeometry.of(step)
        if g.input_dilation != 1:
            return None
        t = tiles_tuple(CONV_TILE_NAMES, tiles) if tiles else baseline_conv_tiles(g, config)
        return conv_cost(g, t, config, step.bias is not None)
    if isinstance(step, Resadd):
        return resadd_cost(step.I, step.J, config, tiles_tuple(("tile_I", "tile_J"), tiles) if tiles else None)
    if isinstance(step, GlobalAverage):
        return global_average_cost(step.batches, step.channels, step.dim, config,
                                   tiles["channel_tile_size"] if tiles else None)
    return None


def _with_statistics_passes(c: dict, step: Matmul, config) -> dict:
    """A normalizer read-out (SOFTMAX) reads each row's accumulator blocks twice more before writing them (a
    MAX and a SUM_EXP pass, Gemmini's loop_ws schedule); counted here as one accumulator row read per cycle,
    with nothing else overlapping: an ESTIMATE like the rest, not measured on hardware."""
    extra = 2 * step.I * -(-step.J // config.dim)
    est = c["est_cycles"] + extra
    return {**c, "est_cycles": est, "utilization": (c["ideal_cycles"] / est) if est else 0.0}


def compute_shapes(step, config) -> tuple[TileShape, ...] | None:
    """The array work of a Gemmini step under its tiles (else gemmini.h's), class by class, as the cost
    model counts it: for checking the model against an independent simulator. None when the step does
    no MACs on the array (or the cost model does not cover it)."""
    if isinstance(step, ConvDw):
        return (dw_shape(step, config),)
    if not isinstance(step, (Matmul, Conv)):
        return None
    c = cost(step, getattr(step, "tiles", None), config)
    return None if c is None else c["shapes"]


def step_costs(step, config) -> dict | None:
    """The report figures of one step: its tiles (step.tiles, else what gemmini.h picks) against
    gemmini.h's baseline. None for CPU steps (and for the convs the cost model does not cover)."""
    if isinstance(step, ConvDw):
        return dw_cost(step, config)
    base_tiles = baseline_tiles(step, config)
    if base_tiles is None:
        return None
    tiles = getattr(step, "tiles", None) or base_tiles
    ours, base = cost(step, tiles, config), cost(step, base_tiles, config)
    if ours is None or base is None:
        return None
    return {"tiles": tiles, "baseline_tiles": base_tiles,
            "dram_bytes": ours["dram_bytes"], "baseline_dram_bytes": base["dram_bytes"],
            "est_cycles": ours["est_cycles"], "baseline_est_cycles": base["est_cycles"],
            "utilization": ours["utilization"], "baseline_utilization": base["utilization"],
            "ideal_cycles": ours["ideal_cycles"], "dram_breakdown": ours["dram_breakdown"],
            "baseline_dram_breakdown": base["dram_breakdown"]}


def cpu_step_costs(step: CpuOp, plan: Plan) -> dict | None:
    """A CPU step's estimate: the instructions its C calls retire on the host core (CpuKernel.instructions,
    from the cost table measured on Spike) times the config's cpu_cpi, at least 1 cycle. No DRAM or
    utilization figures: the core works from its own memory, not through Gemmini's DMA. None only for a
    kernel without a cost (none today: tests/test_cpu_costs.py checks every kernel has one)."""
    instructions = step.params.instructions(plan.call_site(step))
    if instructions is None:
        return None
    cycles = cpu_cycles(instructions, plan.config.cpu_cpi)
    return {"tiles": None, "baseline_tiles": None, "dram_bytes": None, "baseline_dram_bytes": None,
            "est_cycles": cycles, "baseline_est_cycles": cycles, "utilization": None, "baseline_utilization": None,
            "cpu_instructions": round(instructions)}


def plan_costs(plan: Plan) -> list[dict | None]:
    """step_costs of every step (cpu_step_costs of a CPU step), in plan order, under the plan's own config."""
    return [cpu_step_costs(step, plan) if isinstance(step, CpuOp) else step_costs(step, plan.config)
            for step in plan.steps]


def attach_costs(plan: Plan) -> Plan:
    """The plan with every step's cost figures (Plan.costs), which the report prints as they are."""
    return dataclasses.replace(plan, costs=tuple(plan_costs(plan)))


TILINGS = ("search", "auto")


def apply_tiles(plan: Plan, config=None, mode: str = "search", hazards=None) -> Plan:
    """A new Plan whose Gemmini steps carry the tiles they run with. `config` defaults to the plan's.

    mode "search": every Matmul/Conv gets our tiles (explicit-tile calls); "auto": gemmini.h's *_auto
    heuristic stays, except where its tiles are hazardous. `hazards(step, tiles) -> list` (bound to
    scratchpad.find_hazards) keeps every chosen tile free of scratchpad hazards: a write that clobbers
    rows still to be read (spec/gemmini.md §3.10). Where gemmini.h's own tiles have one, the step records
    it in `heuristic_hazard` (so no back end falls back to them) and gets explicit safe tiles in either
    mode. Steps that already have tiles keep them (set on purpose). Raises ValueError for a hazard a step
    cannot avoid (no explicit-tile entry point)."""
    config = config or plan.config
    steps = []
    for step in plan.steps:
        if step.target != "gemmini" or getattr(step, "tiles", None):
            steps.append(step)
            continue
        base = baseline_tiles(step, config)
        found = hazards(step, base) if hazards and base else []
        if _tunable(step) and (mode == "search" or found):
            why = f"gemmini.h's own tiles {base} would read clobbered scratchpad data ({found[0]})" if found else ""
            steps.append(dataclasses.replace(step, tiles=choose_tiles(step, config, hazards), heuristic_hazard=why))
        elif found:
            raise ValueError(f"{step.node}: gemmini.h's tiles would read clobbered scratchpad rows ({found[0]}) "
                             f"and {step.kind} takes no explicit tiles")
        else:
            steps.append(step)
    return dataclasses.replace(plan, steps=tuple(steps))
