"""The accuracy half of `diff`'s verdict: does the int8 model still do the user's job?

The golden proves that the code computes our quantization exactly; it cannot say whether that quantization
keeps the model's meaning, and a bug shared by the emulator and the golden passes it. So each output is also
judged against the user's original model, with the figure its users read, against a floor:

* classification (a class axis last: logits or probabilities): top-1 agreement with the original;
* decisions (a Sigmoid's few probabilities per sample, e.g. a voice-activity detector's): agreement of each
  yes/no at 0.5 with the original, floored like top-1 agreement;
* embeddings and features (a transformer's hidden states, a pooled vector): cosine, per sample;
* an output a Concat joins with per-part scales (a detector's boxes and class scores): each part's SQNR;
* anything else (maps, regressions): SQNR;
* a streaming model's state (--state, stream.py): figures only, no floor of its own (what it carries shows in
  the outputs it feeds, step after step).

Why these floors (the README's accuracy section has the table):
* SQNR 10 dB for maps, regressions and each part of a joined output: on the benchmark's real detectors and
  maps (scripts/bench_real_models.py, seed 0) the outputs at 11.3 dB and above kept their task (the text
  detector at 11.3 dB: 36 of 38 boxes, map IoU 0.92; the captcha detector at 23.1 dB: 41 of 42), the two
  below 7 dB lost it (the 960 px text detector at 6.9 dB: 85 of 103 boxes, 21 spurious; the layout detector
  at 1.2 dB: none of 33). YOLOv8n's class scores are a part of its joined output, judged by the same floor.
* cosine 0.99 (mean over samples) for embeddings: about 17 dB; the goal the project holds its transformers
  to, above what onnxruntime's dynamic quantization (per-token scales at run time) keeps on the trained
  sentence encoders of scripts/bench_transformers.py (0.965, 0.973). Our static int8 of all-MiniLM-L6 keeps
  0.77 and passed diff before this module.
* top-1 agreement 0.95 for classifiers: every classifier of the benchmark (seed 0), ours and onnxruntime's, keeps
  0.98 or more; 0.95 flags a model that changes one decision in twenty. It fails only when the shortfall is
  beyond sampling noise (the one-sided 95% Wilson bound of the agreement below the floor), so 16 samples with
  one flip do not fail a model, and 500 with 40 flips (0.92) do.

Each floor is the user's to change per output (`--min-sqnr/--min-cosine/--min-top1 [OUTPUT=]V`, `none` to
drop one). Below a floor the verdict is ACCURACY FAILED, distinct from an exactness failure, and names the
layers whose SQNR drops the most and the remedies the compiler offers.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import onnx

from .metrics import cosine, sqnr_db
from .per_output import per_output

DEFAULT_FLOORS = {"classification": {"top1": 0.95}, "decision": {"top1": 0.95}, "embedding": {"cosine": 0.99},
                  "joined": {"sqnr": 10.0}, "map": {"sqnr": 10.0},
                  # a streaming model's state output (--state): its drift is judged through the outputs it feeds
                  "state": {}}
STATE_WHY = "fed back as an input at the next step (--state): judged through the outputs it feeds; no floor"
METRICS = ("sqnr", "cosine", "top1")
OPTIONS = {"sqnr": "--min-sqnr", "cosine": "--min-cosine", "top1": "--min-top1"}
# One-sided 95%: a top-1 agreement fails only when its Wilson upper bound is below the floor.
WILSON_Z = 1.6449
# Names that say "a vector of features", not "scores over classes".
EMBEDDING_NAME = re.compile(r"embed|hidden|pool|feature|vector|encod|sentence", re.I)
CLASS_OPS = frozenset({"Softmax", "LogSoftmax"})
# A Sigmoid's few probabilities per sample are yes/no decisions (a voice-activity detector's speech
# probability); more are a map (a mask, a detector's score grid).
DECISION_VALUES = 16
VIEW_OPS = frozenset({"Squeeze", "Unsqueeze", "Reshape", "Flatten", "Identity"})
# What ends a sentence or image encoder: a mean over tokens (masked: a sum divided by the count), a norm.
POOLING_OPS = frozenset({"Div", "ReduceMean", "ReduceSum", "LpNormalization", "GlobalAveragePool"})


@dataclass(frozen=True)
class Floors:
    """The user's floors: metric -> {output name, or None for every output: value, or None to drop it}."""

    given: dict = field(default_factory=dict)

    def for_output(self, name: str, kind: str) -> dict[str, float]:
        floors = dict(DEFAULT_FLOORS[kind])
        for metric in METRICS:
            chosen = self.given.get(metric, {})
            for key in (None, name):  # one output's floor over the every-output one
                if key in chosen:
                    if chosen[key] is None:
                        floors.pop(metric, None)
                    else:
                        floors[metric] = chosen[key]
        return floors


# No floor on any output: for models whose accuracy nobody claims (random weights prove coverage, not
# accuracy); the weight check (weight_check.py) still applies.
NO_FLOORS = Floors({metric: {None: None} for metric in METRICS})


def parse_floors(sqnr=None, cosine=None, top1=None, names: list[str] = ()) -> Floors:
    """Floors in per_output's forms (a number, or `none` to drop the floor; {output: number or None})."""
    given = {}
    for metric, spec in (("sqnr", sqnr), ("cosine", cosine), ("top1", top1)):
        if spec is not None:
            given[metric] = dict(per_output(spec, names, OPTIONS[metric], lambda text, m=metric: _floor(text, m)))
    return Floors(given)


def _floor(text, metric: str) -> float | None:
    if text is None or str(text).strip().lower() == "none":
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or (metric != "sqnr" and not 0.0 <= value <= 1.0):
        raise ValueError(("a finite number (dB)" if metric == "sqnr" else "a number in [0, 1]") + " or 'none'")
    return value


def output_kind(original: onnx.ModelProto | None, graph, name: str, shape: tuple[int, ...],
                joined: bool) -> tuple[str, str]:
    """(kind, why) of a model output, from its shape, the op that makes it in the user's model, and its name."""
    if joined:
        return "joined", "a Concat joins parts of their own scales"
    producer = _producer(original, graph, name)
    op = producer.op_type if producer is not None else ""
    if op in CLASS_OPS and len(shape) >= 2 and shape[-1] >= 2 and _last_axis(producer, len(shape)):
        return "classification", f"a {op} over its last axis"
    if _through_views(graph, name) == "Sigmoid" and 0 < math.prod(shape) <= DECISION_VALUES:
        return "decision", f"{math.prod(shape)} Sigmoid probabilit{'y' if math.prod(shape) == 1 else 'ies'} per " \
                           f"sample: yes/no decisions at 0.5"
    if EMBEDDING_NAME.search(name):
        return "embedding", f"its name '{name}' says features"
    if len(shape) == 2 and shape[-1] >= 16 and op in POOLING_OPS:
        return "embedding", f"[batch, {shape[-1]}] from a {op}: a pooled vector"
    if len(shape) == 2 and shape[-1] >= 2 and op in ("Gemm", "MatMul", "Add", "Flatten", "Reshape", "Squeeze"):
        return "classification", f"[batch, {shape[-1]}] from a {op}: scores over classes"
    if len(shape) == 3 and shape[-1] >= 16 and op in ("LayerNormalization", "Add", "Gemm", "MatMul", "Div", "Mul"):
        return "embedding", f"[batch, tokens, {shape[-1]}] from a {op}: per-token features"
    return "map", "a map or regression"


def _through_views(graph, name: str) -> str:
    """The op that computes `name` in the rewritten graph (where the user's model's If branches are folded),
    past reshapes and squeezes; "" without one."""
    node = None if graph is None else graph.producer(name)
    while node is not None and node.op_type in VIEW_OPS and node.inputs:
        node = graph.producer(node.inputs[0])
    return "" if node is None else node.op_type


def _producer(original, graph, name):
    if original is not None:
        for node in original.graph.node:
            if name in node.output:
                return node
    return graph.producer(name)


def _last_axis(node, rank: int) -> bool:
    attrs = getattr(node, "attrs", None)
    if attrs is not None:  # a graph Node
        axis = attrs.get("axis", -1)
    else:
        axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
    return axis % rank == rank - 1


def wilson_upper(agree: int, n: int, z: float = WILSON_Z) -> float:
    """The one-sided upper Wilson bound of a proportion `agree`/`n`."""
    if n == 0:
        return 1.0
    p = agree / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z * z / n))


def judge_output(name: str, kind: str, why: str, floors: dict[str, float], ref: list[np.ndarray],
                 ours: list[np.ndarray], parts: list[dict] | None = None) -> dict:
    """One output's figures against the original (per sample, then pooled) and its floors."""
    r = np.concatenate([np.atleast_1d(v).astype(np.float64) for v in ref])
    q = np.concatenate([np.atleast_1d(v).astype(np.float64) for v in ours])
    per_sample = [cosine(np.asarray(a), np.asarray(b)) for a, b in zip(ref, ours)]
    figures = {"sqnr_db": sqnr_db(r, q), "cosine": cosine(r, q),
               "cosine_mean": float(np.mean(per_sample)) if per_sample else 1.0,
               "cosine_worst": float(np.min(per_sample)) if per_sample else 1.0, "top1_agreement": None}
    if kind == "decision":  # each probability a yes/no at 0.5
        same = (r > 0.5) == (q > 0.5)
        figures.update(top1_agreement=float(np.mean(same)), top1_compared=int(same.size),
                       top1_upper=wilson_upper(int(np.sum(same)), int(same.size)))
    elif r.ndim >= 2 and r.shape[-1] >= 2:
        a = r.reshape(-1, r.shape[-1]).argmax(-1)
        b = q.reshape(-1, q.shape[-1]).argmax(-1)
        figures.update(top1_agreement=float(np.mean(a == b)), top1_compared=int(a.size),
                       top1_upper=wilson_upper(int(np.sum(a == b)), int(a.size)))
    failures = []
    for metric, floor in floors.items():
        failures += _below(name, metric, floor, figures, parts)
    return {"kind": kind, "kind_why": why, "vs_original": figures, "floor": floors, "parts": parts or [],
            "passed": not failures, "failures": failures}


def _below(name: str, metric: str, floor: float, figures: dict, parts) -> list[str]:
    if metric == "sqnr":
        judged = [(f"output {name} [{p['start']}:{p['stop']}] ({p['input']})", p["sqnr_db"]) for p in parts] \
            if parts else [(f"output {name}", figures["sqnr_db"])]
        return [f"{where}: SQNR {value:.2f} dB against the original, below the floor {floor:g} dB"
                for where, value in judged if value is not None and value < floor]
    if metric == "cosine":
        value = figures["cosine_mean"]
        return [] if value >= floor else [f"output {name}: cosine {value:.4f} (mean per sample; worst "
                                          f"{figures['cosine_worst']:.4f}) against the original, below the floor "
                                          f"{floor:g}"]
    agreement = figures.get("top1_agreement")
    if agreement is None or figures["top1_upper"] >= floor:
        return []
    return [f"output {name}: top-1 agreement {agreement:.2%} with the original over {figures['top1_compared']} "
            f"decisions (at most {figures['top1_upper']:.2%} at 95%), below the floor {floor:.2%}"]


def losing_layers(layers: list[dict], graph, count: int = 5) -> list[dict]:
    """The layers whose SQNR against fp32 drops the most from their inputs' (the noise each adds), from diff's
    per-layer rows: the place to look first, and the candidates for --keep-float. A layer's input SQNR is
    found through the nodes without a row of their own (views: reshapes, transposes, in-place concats)."""
    rows_by_node = {row["name"]: row for row in layers}

    def upstream(tensor: str, seen: frozenset = frozenset()) -> float:
        """The SQNR a tensor carries: its layer's, or the worst of its producer's inputs' (inf: exact)."""
        node = graph.producer(tensor)
        if node is None or node.name in seen or tensor in graph.initializers:
            return math.inf
        if node.name in rows_by_node:
            value = rows_by_node[node.name]["sqnr_db"]
            return math.inf if value is None else value
        return min((upstream(i, seen | {node.name}) for i in node.inputs if i), default=math.inf)

    rows = []
    for node in graph.nodes:
        row = rows_by_node.get(node.name)
        if row is None:
            continue
        value = math.inf if row["sqnr_db"] is None else row["sqnr_db"]
        before = min((upstream(i) for i in node.inputs if i and i not in graph.initializers), default=math.inf)
        if not math.isfinite(value):
            continue  # exact: it adds no noise
        drop = before - value if math.isfinite(before) else None
        rows.append({"name": row["name"], "op": row["op"], "sqnr_db": row["sqnr_db"],
                     "input_sqnr_db": before if math.isfinite(before) else None, "drop_db": drop})
    # fed by the model inputs alone, a layer is ranked by how far it falls below what int8 can hold
    rows.sort(key=lambda r: -(r["drop_db"] if r["drop_db"] is not None else INT8_FULL_SCALE_DB - r["sqnr_db"]))
    return rows[:count]


# The SQNR of a full-scale uniform signal rounded to int8 (6.02 x 7 bits + 1.76 dB): a layer fed by the model
# inputs alone is ranked among the others as dropping from it.
INT8_FULL_SCALE_DB = 43.9


KEEPABLE = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
# Steps whose int8 outputs sit between the matmuls of a transformer block (what --keep-float cannot reach).
BETWEEN_MATMULS = frozenset({"LayerNormalization", "Add", "ElementwiseChain", "Softmax", "Gather"})


def remedies(losers: list[dict], compiled) -> list[str]:
    """What the compiler offers against the loss, most direct first."""
    keep = [r["name"] for r in losers if r["op"] in KEEPABLE][:3]
    out = []
    if keep:
        out.append(f"--keep-float {','.join(keep)} (run the costliest matmuls and convs in float on the CPU)")
    between = [r["op"] for r in losers[:3] if r["op"] in BETWEEN_MATMULS]
    if between:
        out.append(f"none of this version's options reaches the int8 tensors between matmuls where most of the loss "
                   f"is ({', '.join(dict.fromkeys(between))}): activations with a few outlier channels (a transformer's "
                   "embeddings, residual stream, GELU and LayerNorm outputs) that one int8 scale per tensor cannot "
                   "hold")
    out.append("--sensitivity (rank every layer by the output SQNR it costs alone)")
    if compiled.quant.weight_group == 0:
        out.append("--weight-scales groups or channel (a weight scale per DIM output channels, or per channel; more "
                   "Gemmini calls; scripts/bench_transformers.py: all-MiniLM-L6's cosine 0.77 -> 0.85, the 3-layer "
                   "paraphrase encoder's unchanged)")
    elif compiled.quant.weight_group != 1:
        out.append("--weight-scales channel (one weight scale per output channel; more Gemmini calls)")
    if compiled.quant.method != "minmax":
        out.append("--calib-method minmax (ranges that clip nothing; for outliers that matter)")
    out.append("more or more representative --calib samples")
    return out
