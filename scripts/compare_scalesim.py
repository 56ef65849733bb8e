"""Check the cost model's compute cycles against SCALE-Sim, layer by layer, on the same array and tiling.

Usage:  python scripts/compare_scalesim.py [--model resnet50|mobilenet_v2|PATH.onnx] [--config NAME]
                                          [--memory] [--json] [--keep DIR]

Needs PyPI `scalesim` (3.0.0 was used). Nothing is downloaded at run time: `resnet50` is onnx's light
ResNet-50 (shipped in the onnx wheel), `mobilenet_v2` is torchvision's MobileNetV2 architecture (width
1.0, 224x224) rebuilt here with torch and random weights (cycles do not depend on the weights).

What is compared, like with like:
* ours: the cost model's *compute* cycles of every Gemmini call that does MACs on the array
  (`onnx2gemmini.tiling.compute_shapes`, the array work of the call's tiles; the report's est_cycles
  add the DMA and its overlap, which this check leaves out on both sides);
* SCALE-Sim: the cycles its weight-stationary array is busy on the same work, cut the same way, with no
  memory stall: the rows of its WS demand matrices (`scalesim.compute.systolic_compute_ws`, its
  COMPUTE_REPORT's total minus stall cycles, plus one). Every class of identical Gemmini loop
  instructions becomes one GEMM layer of the SCALE-Sim topology: M = the A rows (output pixels) streamed
  past each weight block, N = the tile's output channels, K = its reduction length (krows*kcols*kchs of a
  conv tile; kernel taps of a depthwise channel), and its cycles count once per such tile.
The config file gives SCALE-Sim the same array (DIM x DIM, dataflow ws), half the scratchpad each for its
ifmap and filter SRAMs, the accumulator's DIM*ACC_ROWS values as its ofmap SRAM (SCALE-Sim counts
1-byte words) and dma_bus_bits/8 words per cycle for each of its three DRAM interfaces (Gemmini shares
one bus). Those only matter with --memory, which also runs SCALE-Sim's memory simulation and prints its
stall cycles beside our est_cycles: slow (a Python loop per simulated cycle, about a minute per
100,000 cycles), so best kept to small models.

The difference of the two counts splits exactly into four terms, printed per layer (percent of
SCALE-Sim's cycles) and named in the reason of every layer more than 20% apart:
  fold     SCALE-Sim stops the array 2*DIM+DIM-2 cycles per DIMxDIM weight fold (load the weights, drain)
  fill     ours: LOOP_OVERHEAD_BLOCKS*DIM fill/drain cycles per loop instruction (tile)
  blocks   weight blocks ours feeds beyond SCALE-Sim's dense folds (kernel columns packed per
           scratchpad row, channel blocks per kernel tap, 1x1 weights per depthwise tap)
  rows     ours: A rows fed beyond the M streamed (runs shorter than DIM; a block's last compute)
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import onnx

import onnx2gemmini as o2g
from onnx2gemmini.config import load_config
from onnx2gemmini.tiling import compute_shapes

REPORT_THRESHOLD = 0.20   # layers further apart than this get a reason
TERM_SHOWN = 0.05         # terms below this share of SCALE-Sim's cycles are left out of a reason
TERMS = {"fold": "SCALE-Sim loads weights and drains per fold (Gemmini preloads the next block meanwhile)",
         "fill": "our fill/drain per tile",
         "blocks": "Gemmini's weight blocks vs SCALE-Sim's dense K",
         "rows": "our runs shorter than DIM"}


# --- the models -----------------------------------------------------------------------------------

def resnet50_path() -> Path:
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"


def mobilenet_v2_module():
    """torchvision's MobileNetV2 (width 1.0): the same layers, without torchvision (whose compiled ops
    need a torch build of their own), so that only torch is needed."""
    import torch
    from torch import nn

    def conv_bn(c_in, c_out, kernel, stride, groups=1, relu=True):
        layers = [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(c_out)]
        return nn.Sequential(*layers, nn.ReLU6()) if relu else nn.Sequential(*layers)

    class InvertedResidual(nn.Module):
        def __init__(self, c_in, c_out, stride, expand):
            super().__init__()
            hidden = c_in * expand
            layers = [conv_bn(c_in, hidden, 1, 1)] if expand != 1 else []
            layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden), conv_bn(hidden, c_out, 1, 1, relu=False)]
            self.block = nn.Sequential(*layers)
            self.residual = stride == 1 and c_in == c_out

        def forward(self, x):
            return x + self.block(x) if self.residual else self.block(x)

    torch.manual_seed(0)
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]
    layers, c_in = [conv_bn(3, 32, 3, 2)], 32
    for expand, c_out, repeats, stride in settings:
        for i in range(repeats):
            layers.append(InvertedResidual(c_in, c_out, stride if i == 0 else 1, expand))
            c_in = c_out
    layers += [conv_bn(c_in, 1280, 1, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000)]
    return nn.Sequential(*layers).eval()


def export_mobilenet_v2(directory: Path) -> Path:
    import torch
    path = directory / "mobilenet_v2.onnx"
    with torch.no_grad():
        torch.onnx.export(mobilenet_v2_module(), (torch.randn(1, 3, 224, 224),), str(path), dynamo=False,
                          opset_version=17, input_names=["x"], output_names=["y"])
    return path


def model_path(name: str, directory: Path) -> Path:
    """The ONNX file for a model name (resnet50, mobilenet_v2) or a path."""
    if name == "resnet50":
        return resnet50_path()
    if name == "mobilenet_v2":
        return export_mobilenet_v2(directory)
    return Path(name)


# --- our side -------------------------------------------------------------------------------------

@dataclass
class Layer:
    """One Gemmini call that does MACs on the array, with both counts."""
    name: str
    call: str
    shapes: tuple
    ours: int
    est_cycles: int
    scalesim: int = 0
    scalesim_total: int | None = None      # with memory stalls (--memory only)
    terms: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.ours / self.scalesim if self.scalesim else float("nan")


def array_layers(plan) -> list[Layer]:
    """Every Gemmini step with array work: its tile classes (which add up to the cost model's
    compute_cycles; tests/test_cost_model.py), our compute cycles and the report's est_cycles."""
    layers = []
    for i, step in enumerate(plan.steps):
        shapes = compute_shapes(step, plan.config) if step.target == "gemmini" else None
        if not shapes:
            continue
        ours = sum(s.cycles for s in shapes)
        est = plan.costs[i]["est_cycles"] if plan.costs and plan.costs[i] else ours
        layers.append(Layer(step.node, step.kind, shapes, ours, est))
    return layers


def gemm_key(shape) -> tuple[int, int, int]:
    """The GEMM SCALE-Sim simulates for one tile class: (M, N, K)."""
    return shape.rows, shape.cols, shape.depth


# --- SCALE-Sim's side -----------------------------------------------------------------------------

def scalesim_config(config) -> str:
    """A SCALE-Sim 3 config for the same array: see the module docstring for the mapping."""
    dim, bw = config.dim, config.dma_bus_bits // 8
    half_spad_kib = config.sp_rows * dim // 2 // 1024
    acc_values_kib = max(1, config.acc_rows * dim // 1024)
    return f"""[general]
run_name = o2g_{config.name}

[architecture_presets]
ArrayHeight : {dim}
ArrayWidth : {dim}
IfmapSramSzkB : {half_spad_kib}
FilterSramSzkB : {half_spad_kib}
OfmapSramSzkB : {acc_values_kib}
IfmapOffset : 0
FilterOffset : 10000000
OfmapOffset : 20000000
Bandwidth : {bw}
Dataflow : ws
ReadRequestBuffer : 32
WriteRequestBuffer : 32

[layout]
IfmapCustomLayout : False
IfmapSRAMBankBandwidth : {bw}
IfmapSRAMBankNum : 1
IfmapSRAMBankPort : 2
FilterCustomLayout : False
FilterSRAMBankBandwidth : {bw}
FilterSRAMBankNum : 1
FilterSRAMBankPort : 2

[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth : USER
UseRamulatorTrace : False
"""


def write_inputs(directory: Path, config, keys: list) -> tuple[Path, Path, Path]:
    """config, GEMM topology (one layer per distinct tile GEMM) and an empty layout file."""
    cfg, topo, layout = directory / "gemmini.cfg", directory / "tiles.csv", directory / "layout.csv"
    cfg.write_text(scalesim_config(config))
    topo.write_text("Layer, M, N, K,\n" + "".join(f"t{i}, {m}, {n}, {k},\n" for i, (m, n, k) in enumerate(keys)))
    layout.write_text("Layer name, unused,\n")   # read, but used only with custom layouts (off)
    return cfg, topo, layout


def load_scalesim(cfg: Path, topo: Path, layout: Path):
    """SCALE-Sim's top-level object with our files parsed (its own loaders)."""
    from scalesim.scale_sim import scalesim
    sim = scalesim(save_disk_space=True, verbose=False, config=str(cfg), topology=str(topo), layout=str(layout),
                   input_type_gemm=True)
    if sim.config.get_dataflow() != "ws":
        raise RuntimeError("SCALE-Sim did not read the weight-stationary dataflow from the config")
    return sim


def compute_cycles(sim) -> list[int]:
    """SCALE-Sim's stall-free cycles per topology layer: the rows of its WS demand matrices (one row per
    cycle the array is fed), built by its own operand-matrix and systolic-compute classes."""
    from scalesim.compute.operand_matrix import operand_matrix
    from scalesim.compute.systolic_compute_ws import systolic_compute_ws
    cycles = []
    for layer in range(sim.topo.get_num_layers()):
        operands = operand_matrix()
        operands.set_params(layer_id=layer, config_obj=sim.config, topoutil_obj=sim.topo, layoututil_obj=sim.layout)
        _, ifmap = operands.get_ifmap_matrix()
        _, filt = operands.get_filter_matrix()
        _, ofmap = operands.get_ofmap_matrix()
        array = systolic_compute_ws()
        array.set_params(config_obj=sim.config, ifmap_op_mat=ifmap, filter_op_mat=filt, ofmap_op_mat=ofmap)
        demand, _, _ = array.get_demand_matrices()
        cycles.append(int(demand.shape[0]))
    return cycles


def patch_numpy_scalars() -> None:
    """SCALE-Sim 3.0.0's memory model calls int() on one-element arrays, a TypeError from NumPy 2.4 on
    (upstream SCALE-Sim PR #162 makes the same change): give those two modules a max() that returns a
    scalar."""
    import numpy as np
    import scalesim.memory.double_buffered_scratchpad_mem as dbsp
    import scalesim.memory.read_buffer as rb

    def scalar_max(*args):
        values = args[0] if len(args) == 1 else args
        return np.max([np.max(v) for v in values])

    rb.max = dbsp.max = scalar_max


def full_run(sim, directory: Path) -> list[tuple[int, int]]:
    """SCALE-Sim's whole simulation (compute and memory): (total cycles, stall cycles) per layer."""
    patch_numpy_scalars()
    sim.run_scale(top_path=str(directory))
    return [(int(o.get_compute_report_items()[1]), int(o.get_compute_report_items()[2]))
            for o in sim.runner.single_layer_sim_object_list]


# --- the comparison -------------------------------------------------------------------------------

def expected_scalesim(shape, dim: int) -> int:
    """SCALE-Sim's WS count in closed form: per DIMxDIM fold, DIM rows to load the weights, M streamed,
    DIM-1 to drain and DIM-1 of skew."""
    return folds(shape, dim) * (shape.rows + 3 * dim - 2)


def folds(shape, dim: int) -> int:
    return -(-shape.depth // dim) * -(-shape.cols // dim)


def split_difference(layer: Layer, dim: int) -> dict[str, int]:
    """ours - SCALE-Sim as exact terms over the tile classes (their sum is the difference when SCALE-Sim
    follows its closed form; `other` holds any remainder)."""
    terms = defaultdict(int)
    for s in layer.shapes:
        f = folds(s, dim)
        terms["fold"] -= s.count * f * (3 * dim - 2)
        terms["fill"] += s.count * s.overhead
        terms["blocks"] += s.count * (s.blocks - f) * s.rows
        terms["rows"] += s.count * s.blocks * (s.block_cycles - s.rows)
    terms["other"] = layer.ours - layer.scalesim - sum(terms.values())
    return dict(terms)


def reason(layer: Layer) -> str:
    """The terms that make up a difference above REPORT_THRESHOLD, largest first ('' otherwise)."""
    if abs(layer.ratio - 1) <= REPORT_THRESHOLD:
        return ""
    big = sorted(((v, k) for k, v in layer.terms.items() if abs(v) >= TERM_SHOWN * layer.scalesim),
                 key=lambda x: -abs(x[0]))
    return "; ".join(f"{TERMS.get(k, k)} {100 * v / layer.scalesim:+.0f}%" for v, k in big)


def compare(plan, directory: Path, memory: bool = False) -> list[Layer]:
    """Both counts for every array layer of the plan (SCALE-Sim run once per distinct tile GEMM)."""
    layers = array_layers(plan)
    keys = sorted({gemm_key(s) for layer in layers for s in layer.shapes})
    sim = load_scalesim(*write_inputs(directory, plan.config, keys))
    per_key = dict(zip(keys, compute_cycles(sim)))
    full = dict(zip(keys, full_run(sim, directory))) if memory else {}
    for layer in layers:
        layer.scalesim = sum(s.count * per_key[gemm_key(s)] for s in layer.shapes)
        if memory:
            layer.scalesim_total = sum(s.count * full[gemm_key(s)][0] for s in layer.shapes)
        layer.terms = split_difference(layer, plan.config.dim)
    return layers


def totals(layers: list[Layer]) -> dict:
    ours, theirs = sum(x.ours for x in layers), sum(x.scalesim for x in layers)
    far = [x for x in layers if abs(x.ratio - 1) > REPORT_THRESHOLD]
    return {"layers": len(layers), "ours": ours, "scalesim": theirs, "ratio": ours / theirs,
            "beyond_20pct": len(far)}


def print_table(layers: list[Layer], model: str, config) -> None:
    print(f"model {model}, config {config.name}: DIM {config.dim}, weight stationary; compute cycles without "
          "memory stalls on both sides (ours: cost model, ESTIMATE; SCALE-Sim: its WS array model)")
    memory = any(x.scalesim_total is not None for x in layers)
    head = f"{'layer':8} {'call':8} {'ours':>10} {'SCALE-Sim':>10} {'ratio':>6}"
    head += f" {'our est':>10} {'SS+stall':>10}" if memory else ""
    print(head + "  reason (terms of ours - SCALE-Sim, % of SCALE-Sim)")
    for x in layers:
        line = f"{x.name[:8]:8} {x.call:8} {x.ours:10,} {x.scalesim:10,} {x.ratio:6.2f}"
        line += f" {x.est_cycles:10,} {x.scalesim_total:10,}" if memory else ""
        print(line + "  " + reason(x))
    t = totals(layers)
    print(f"\n{t['layers']} layers: ours {t['ours']:,} vs SCALE-Sim {t['scalesim']:,} = {t['ratio']:.3f}x; "
          f"{t['beyond_20pct']} layers differ by more than {REPORT_THRESHOLD:.0%}")


def as_json(layers: list[Layer], model: str, config) -> dict:
    return {"model": model, "config": config.name, "totals": totals(layers),
            "layers": [{"name": x.name, "call": x.call, "ours": x.ours, "scalesim": x.scalesim,
                        "ratio": x.ratio, "est_cycles": x.est_cycles, "scalesim_total": x.scalesim_total,
                        "terms": x.terms, "reason": reason(x),
                        "gemms": [list(gemm_key(s)) + [s.count] for s in x.shapes]} for x in layers]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help="resnet50, mobilenet_v2 or an ONNX file")
    ap.add_argument("--config", default="default")
    ap.add_argument("--memory", action="store_true", help="also run SCALE-Sim's (slow) memory simulation")
    ap.add_argument("--json", action="store_true", help="machine-readable output only")
    ap.add_argument("--keep", metavar="DIR", help="write SCALE-Sim's files to DIR (default: a temporary dir)")
    args = ap.parse_args(argv)
    config = load_config(args.config)
    with tempfile.TemporaryDirectory(prefix="o2g_scalesim_") as tmp:
        directory = Path(args.keep) if args.keep else Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        plan = o2g.compile(str(model_path(args.model, directory)), num_calib=1, config=config).plan
        layers = compare(plan, directory, args.memory)
    if args.json:
        print(json.dumps(as_json(layers, args.model, config), indent=1))
    else:
        print_table(layers, args.model, config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
