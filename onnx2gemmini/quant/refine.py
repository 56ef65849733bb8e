"""Per-tensor range choices judged at the model outputs: the second half of the default calibration ("auto").

Why: the whole-model candidates (selection.py) give every tensor the range of one estimator. A model can
want different ones: a sparse, large-valued tensor feeding a sigmoid map wants its peaks (minmax) where a
tensor a tanh saturates wants its outliers clipped, and judged at the next layer each clip looks right. So
after the choice, a greedy pass walks the scale units (the tensors that share one scale) in graph order and
tries, for each, the other estimators' ranges (alone, and with every unchanged unit upstream of it), scored
as the choice is: the mean output SQNR on held-out samples, each fold's ranges fitted on its own samples.
A change is kept when it gains at least MIN_GAIN_DB. The units tried are the MAX_UNITS whose estimators
disagree most (ranges at least SPREAD apart), and at most MAX_TRIALS trials run.

The search judges on half the folds' held-out samples (the even folds) and the result is confirmed on the
other half, through the compiled arithmetic itself (the emulated plan, as selection.py judges) rebuilt with
the changed ranges: the samples that decide are not the ones that chose (on a 2-class text-direction
classifier, 32 samples judged by the same samples that chose 5 changes "gained" 12.6 dB, and 0.6 dB on
evaluation data). Unconfirmed, the chosen estimator's ranges stand. Each half holds at least two samples:
the held-out choice needs selection.MIN_SAMPLES (4), which makes four folds of at least one sample each.
With few calibration samples (below selection.FEW_SAMPLES, `few_samples`) the confirmed gain must also
exceed its standard error (the jackknife over the confirming samples, as the choice's one-standard-error
rule): the confirming half then holds fewer than eight samples, and on the benchmark's development split
(8 calibration samples) the 0.1 dB bar alone kept changes that cost MTCNN O-Net 1.95 dB and the digits nets
up to 0.33 dB on evaluation data; the rule in turn dropped changes worth 0.39 dB on the 320 px PP-OCR
detector there, and on the published 8-sample table YOLOv8n's (+1.85 dB confirmed, standard error 3.23),
worth 1.69 dB. Not with more samples: the same rule dropped YOLOv8n's changes to mse's
ranges (+1.56 dB confirmed, within its standard error), worth 2.6 dB on evaluation data, and the published
tables (16 samples and more) keep such changes for YOLOv8n (+1.05 to +2.62 dB confirmed).

The trials run on a stand-in for the compiled arithmetic: each fold's QDQ model with every calibrated
scale fed as an input, so a trial needs no new onnxruntime session, only one run per held-out sample (the
ops then run in float between Q and DQ, within float32 rounding of the int8 arithmetic; biases keep the
fold's float values).
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import ModelError
from ..golden import build_qdq, scale_name
from ..graph import Graph
from ..numerics import scale_for
from ..ort_session import run, session
from .quantize import ScaleUnit, scale_units, segment_scales

MAX_UNITS = 8       # units tried, at most
MAX_TRIALS = 16     # trials, at most (each: one stand-in run per searched held-out sample)
MIN_GAIN_DB = 0.1   # a change, and the refinement as a whole, must gain at least this much
SPREAD = 1.25       # a unit is tried when some estimator's range is this far from the chosen one's


@dataclass(frozen=True)
class Refinement:
    """The per-unit changes found ({first calibrated tensor of the unit: estimator}), the units tried, the
    held-out SQNR the compiled arithmetic (the emulated plan) gives them on the confirming folds, its gain
    there over the chosen estimator's and that gain's standard error, whether they were kept, and the
    stand-in's SQNR on the searched folds (None: nothing to try)."""

    changes: dict[str, str] = field(default_factory=dict)
    tried: int = 0
    sqnr_db: float | None = None
    gain_db: float | None = None
    kept: bool = False
    search_db: float | None = None  # on the searched folds (the others confirm)
    gain_se_db: float | None = None  # the standard error of gain_db (jackknife over the confirming samples)

    def report(self) -> dict:
        """report.json's `calibration.refined` (CONTRACTS.md)."""
        return {"units_tried": self.tried, "kept": self.kept,
                "changes": [{"tensor": t, "method": m} for t, m in self.changes.items()],
                "heldout_sqnr_db": None if self.sqnr_db is None else round(self.sqnr_db, 2),
                "gain_db": None if self.gain_db is None else round(self.gain_db, 2),
                "gain_se_db": None if self.gain_se_db is None else round(self.gain_se_db, 2),
                "search_sqnr_db": None if self.search_db is None else round(self.search_db, 2)}


def apply(ranges: dict[str, float], changes: dict[ScaleUnit, str], ranges_by) -> dict[str, float]:
    """`ranges` with each changed unit's calibrated tensors given their estimator's ranges
    (`ranges_by(method)`)."""
    out = dict(ranges)
    for unit, method in changes.items():
        other = ranges_by(method)
        for t in unit.calibrated:
            out[t] = other.get(t, out.get(t, 0.0))
    return out


def unit_amax(unit: ScaleUnit, ranges: dict[str, float]) -> float:
    return max((ranges.get(t, 0.0) for t in unit.calibrated), default=0.0)


def refine(graph: Graph, handlers, found, heldout, table, chosen: str, candidates: tuple[str, ...], *,
           few_samples: bool) -> tuple[dict[ScaleUnit, str], Refinement]:
    """The per-unit estimator changes to `chosen`'s ranges that the held-out samples confirm (empty when
    none), and the report of the search. `table(ranges, means, name)` builds a QuantTable; `few_samples`:
    the confirmed gain must also exceed its standard error (the module docstring)."""
    search = list(range(0, len(heldout.splits), 2))
    confirm = list(range(1, len(heldout.splits), 2))
    units, segmented = scale_units(graph, handlers)
    others = [m for m in candidates if m != chosen]
    everything = {m: found.ranges(m) for m in candidates}
    tried = _most_disputed(units, everything, chosen, others)
    if not tried:
        return {}, Refinement()
    stand_ins = [_StandIn(graph, table, found, heldout, f, chosen, candidates, segmented) for f in search]
    if any(s.sess is None for s in stand_ins):
        return {}, Refinement(tried=len(tried))
    upstream = _upstream(graph, units, tried)
    changes: dict[ScaleUnit, str] = {}
    budget = MAX_TRIALS
    with ThreadPoolExecutor(found.threads) as pool:
        current = _score(pool, stand_ins, heldout, changes, search)
        if current == -math.inf:
            return {}, Refinement(tried=len(tried))
        for unit in tried:
            trials = []
            for m in others:
                if not _distinct(unit, everything, m, changes.get(unit, chosen)):
                    continue
                trials.append({**changes, unit: m})
                # and with every unit upstream that is still the chosen one's: a clip further up
                # (the input of a chain of convolutions) can hide what this unit's range would keep
                cone = {u: m for u in upstream[unit] if u not in changes and _distinct(u, everything, m, chosen)}
                if cone:
                    trials.append({**changes, **cone, unit: m})
            trials = trials[:budget]
            budget -= len(trials)
            scores = [_score(pool, stand_ins, heldout, t, search) for t in trials]
            if scores and max(scores) >= current + MIN_GAIN_DB:
                best = int(np.argmax(scores))
                changes, current = trials[best], scores[best]
    names = {u.calibrated[0]: m for u, m in changes.items()}
    if not changes:
        return {}, Refinement(tried=len(tried))
    mine = heldout.exact_noise(graph, table, lambda fit: apply(found.ranges(chosen, fit), changes,
                                                               lambda m: found.ranges(m, fit)),
                               f"{chosen}+refined", confirm)
    base = heldout.exact_noise(graph, table, lambda fit: found.ranges(chosen, fit), chosen, confirm)
    if mine is None or base is None:
        return {}, Refinement(names, len(tried), search_db=current)
    exact = heldout.score(list(mine.sum(axis=0)), confirm)
    gain = exact - heldout.score(list(base.sum(axis=0)), confirm)
    error = heldout.lead_error(mine, base, confirm)
    kept = gain >= MIN_GAIN_DB and (gain > error or not few_samples)
    return (changes if kept else {}), Refinement(names, len(tried), exact, gain, kept, current, error)


def _most_disputed(units: list[ScaleUnit], everything: dict, chosen: str, others: list[str]) -> list[ScaleUnit]:
    """The MAX_UNITS units whose other estimators' ranges lie furthest from the chosen one's (at least
    SPREAD), in graph order."""
    spread = []
    for k, unit in enumerate(units):
        mine = unit_amax(unit, everything[chosen])
        far = max((abs(math.log(unit_amax(unit, everything[m]) / mine)) for m in others
                   if mine > 0 and unit_amax(unit, everything[m]) > 0), default=0.0)
        if far >= math.log(SPREAD):
            spread.append((-far, k))
    picked = sorted(k for _, k in sorted(spread)[:MAX_UNITS])
    return [units[k] for k in picked]


def _upstream(graph: Graph, units: list[ScaleUnit], of: list[ScaleUnit]) -> dict[ScaleUnit, list[ScaleUnit]]:
    """Each unit of `of`: the units upstream (whose tensors its tensors are computed from), in graph order."""
    producer = {o: n for n in graph.nodes for o in n.outputs if o}
    unit_of = {t: u for u in units for t in u.scaled}
    order = {u: k for k, u in enumerate(units)}
    found = {}
    for unit in of:
        seen, frontier, above = set(unit.scaled), list(unit.scaled), set()
        while frontier:
            node = producer.get(frontier.pop())
            for i in (node.inputs if node is not None else ()):
                if i and i not in seen and i not in graph.initializers:
                    seen.add(i)
                    frontier.append(i)
                    if i in unit_of and unit_of[i] != unit:
                        above.add(unit_of[i])
        found[unit] = sorted(above, key=order.get)
    return found


def _distinct(unit: ScaleUnit, everything: dict, method: str, current: str) -> bool:
    return scale_for(unit_amax(unit, everything[method])) != scale_for(unit_amax(unit, everything[current]))


def _score(pool, stand_ins, heldout, changes: dict, folds: list[int]) -> float:
    """The mean held-out SQNR of the stand-ins (of `folds`) with `changes`, the folds in parallel, summed in
    fold order; -inf when onnxruntime refuses to run them (a fused kernel's parameter check)."""
    totals = [0.0] * len(heldout.units)
    try:
        for power in pool.map(lambda s: s.noise(changes), stand_ins):
            totals = [a + b for a, b in zip(totals, power)]
    except ModelError:
        return -math.inf
    return heldout.score(totals, folds)


class _StandIn:
    """One fold's QDQ model with its calibrated scales as inputs: a trial of other ranges is a run."""

    def __init__(self, graph: Graph, table, found, heldout, fold: int, chosen: str, candidates, segmented):
        fit = heldout.splits[fold][0]
        self.graph, self.heldout, self.fold, self.segmented = graph, heldout, fold, segmented
        self.ranges = {m: found.ranges(m, fit) for m in candidates}  # this fold's, per estimator
        self.base = table(self.ranges[chosen], found.means(fit), chosen)
        model = build_qdq(graph, self.base)
        held = {i.name for i in model.graph.initializer}
        self.fed = {scale_name(t): t for t in self.base.scales if scale_name(t) in held}
        self.sess = _session_with_inputs(model, set(self.fed), found.sess.whole)

    def feeds(self, changes: dict) -> dict[str, np.ndarray]:
        scales = dict(self.base.scales)
        for unit, method in changes.items():
            s = scale_for(unit_amax(unit, self.ranges[method]))
            for t in unit.scaled:
                scales[t] = s
        arrays = {t: np.asarray(scales[t], np.float32) for t in scales}
        for node in self.segmented:
            out = node.outputs[0]
            _, per_index = segment_scales(self.graph, node, scales)
            arrays[out] = np.asarray(per_index if out in self.base.axis_scales else max(per_index), np.float32)
        return {n: arrays[t] for n, t in self.fed.items()}

    def noise(self, changes: dict) -> list[float]:
        scale_feeds = self.feeds(changes)
        return self.heldout.noise(self.fold, [run(self.sess, self.heldout.outputs, {**s, **scale_feeds})
                                              for s in self.heldout.samples[self.fold]])


def _session_with_inputs(model: onnx.ModelProto, names: set[str], arena: bool = True):
    """A session of `model` with the initializers `names` turned into float inputs; None when onnxruntime
    will not build it. `arena=False` for a model run in pieces: the stand-ins live side by side, and each
    would keep its run's peak."""
    kept, inputs = [], list(model.graph.input)
    for init in model.graph.initializer:
        if init.name in names:
            inputs.append(helper.make_tensor_value_info(init.name, TensorProto.FLOAT,
                                                        list(numpy_helper.to_array(init).shape)))
        else:
            kept.append(init)
    graph = helper.make_graph(list(model.graph.node), model.graph.name, inputs, list(model.graph.output), kept)
    fed = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    try:
        return session(fed, arena=arena)
    except ModelError:
        return None
