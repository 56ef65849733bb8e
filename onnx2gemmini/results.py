"""Types of what `o2g.diff` returns: the CONTRACTS.md `diff --json` document, as TypedDicts.

Why TypedDicts and not classes: the result is the JSON document (scripts index it, `--json` prints it,
`Compiled.write(diff=...)` reads it), and a TypedDict gives editors and type checkers its keys without
changing what it is. Keys beyond these may appear (extend, don't break); `total=False` marks the ones
present only sometimes.
"""
from __future__ import annotations

from typing import NotRequired, TypedDict


class Fp32VsInt8(TypedDict):
    """One output, float model (onnxruntime) against the int8 result (emulator), over every sample."""

    max_abs: float
    cosine: float
    sqnr_db: float | None          # None: identical
    top1_agreement: float | None   # None: not a classifier-shaped output


class Int8VsQdq(TypedDict):
    """One output, int8 result against onnxruntime running model.qdq.onnx (the bit-exact golden)."""

    compared: int
    mismatches: int
    max_lsb: int


class Segment(TypedDict):
    """One input's part of an output made by a Concat (indices [start, stop) along `axis`), against fp32."""

    input: str
    axis: int
    start: int
    stop: int
    scale: float                   # the int8 scale of its values (its own when the output keeps them)
    sqnr_db: float | None
    max_abs: float


class Int8VsOriginal(TypedDict):
    """The int8 outputs against onnxruntime's run of the model as the user gave it (before any rewrite)."""
    max_abs: float
    cosine: float
    sqnr_db: float | None


class Fp32VsOriginal(TypedDict):
    """The rewritten graph's float outputs against the user's model: float rounding only, unless a rewrite
    changed the function; diff fails below `min_sqnr_db` (None: the original is quantized, not bounded)."""
    max_abs: float
    sqnr_db: float | None
    min_sqnr_db: float | None


class OutputDiff(TypedDict):
    fp32_vs_int8: Fp32VsInt8
    int8_vs_ort_qdq: Int8VsQdq
    int8_vs_original: NotRequired[Int8VsOriginal]  # when onnxruntime runs the original and it has the output
    fp32_vs_original: NotRequired[Fp32VsOriginal]
    original_not_compared: NotRequired[str]  # why the two above are absent (fidelity then judges against fp32)
    segments: NotRequired[list[Segment]]  # only for an output made by a Concat


class LayerDiff(TypedDict, total=False):
    """One layer (ONNX node with a plan step), checked in isolation on the emulator's own inputs."""

    name: str
    op: str
    sqnr_db: float | None          # against the float model, error of earlier layers included
    cosine: float
    max_lsb_vs_ort_qdq: int
    mismatches_vs_ort_qdq: int
    compared: int
    explained_mismatches: int      # a resadd's: where its input rounding may move the value (all allowed)
    tolerance_lsb: int             # the largest difference this layer's semantics allow
    mismatch_rate: float
    allowed_mismatches: int        # the explained ones plus the tolerance's budget
    tolerance_why: str


class LayerSensitivity(TypedDict):
    """One layer of `diff --sensitivity` (sensitivity.py): the layer quantized alone, every other layer float,
    its effect on the model outputs against fp32 over every sample. Listed most costly first."""

    name: str
    op: str
    sqnr_db: float | None          # output SQNR with only this layer quantized (worst output); None: exact
    noise_share: float             # its output noise power / the whole int8 model's (largest over outputs)
    sqnr_db_cost: float            # 10*log10(1 + noise_share) dB >= 0; 3.01: as noisy as the whole int8 model


class LosingLayer(TypedDict):
    """A layer whose SQNR against fp32 drops the most from its inputs' (fidelity.losing_layers)."""
    name: str
    op: str
    sqnr_db: float | None
    input_sqnr_db: float | None    # the worst of its inputs' (None: model inputs, exact)
    drop_db: float | None          # None: its inputs are exact, its own SQNR is the noise it adds


class Verdict(TypedDict, total=False):
    passed: bool                   # exact and accurate
    exact_model: bool
    failures: list[str]            # the exact half: layers and outputs against the golden, rewrites
    first_divergent_layer: str | None
    accurate: bool                 # the accuracy half (fidelity.py): every output's floors and reference met
    accuracy_failures: list[str]
    losing_layers: list[LosingLayer]  # after an accuracy failure
    remedies: list[str]               # after an accuracy failure: options to try, most direct first


class VsOriginal(TypedDict):
    """An output's int8 values against the original model's, over every sample."""
    sqnr_db: float | None
    cosine: float                  # pooled
    cosine_mean: float             # per sample, mean
    cosine_worst: float            # per sample, worst
    top1_agreement: float | None   # over the last axis (None: one value per row)


class Reference(TypedDict, total=False):
    """onnxruntime's own quantization of the original model (reference.py, `diff --reference`), beside ours,
    both against the original: figures, not a bound."""
    who: str
    made: bool
    why: str                       # when not made
    overridden_scales: int         # tensors given our activation scale
    sqnr_db: float | None          # its output against the original
    ours_sqnr_db: float | None


class WeightLayer(TypedDict):
    name: str
    worst_steps: float             # the largest |q * scale - w| / scale over the layer's weights
    bound_steps: float             # 0.5 for round to nearest, 1 for AdaRound (plus float slack)


class WeightCheck(TypedDict):
    """Every int8 weight against the float weight it stands for (weight_check.py)."""
    checked: int
    layers: list[WeightLayer]
    failures: list[str]
    unchecked: list[dict]          # {name, why}


class Fidelity(TypedDict):
    """One output judged against the user's original model (fidelity.py)."""
    kind: str                      # classification | decision | embedding | joined | map | state
    kind_why: str
    against: str                   # "the original model", or what stood in and why
    vs_original: VsOriginal
    floor: dict[str, float]        # metric (sqnr, cosine, top1) -> floor
    parts: list[dict]              # a joined output's parts: input, axis, start, stop, sqnr_db
    passed: bool
    failures: list[str]
    reference: Reference


class Golden(TypedDict):
    """Whether onnxruntime's integer kernels were exact on this CPU (ort_session.probe); the layers of a kernel
    family that was not are unverified: not compared, never FAILED."""
    exact: bool
    cpu: str
    unverified_layers: list[str]
    inexact_ops: list[str]


class Accuracy(TypedDict):
    fp32: float
    int8: float


class StatePair(TypedDict):
    output: str
    input: str


class Stream(TypedDict):
    """A streaming model's diff (--state): the samples are consecutive steps."""

    states: list[StatePair]
    steps: int
    judged_against: str            # the original model's own fp32 stream, or why not


class DiffResult(TypedDict, total=False):
    """`o2g.diff(...)`: per output, per layer, the verdict, and accuracy when the data has labels."""

    samples: int
    outputs: dict[str, OutputDiff]
    layers: list[LayerDiff]
    accuracy: Accuracy             # only with a `labels` array in the data
    sensitivity: list[LayerSensitivity]  # only when asked for (CONTRACTS.md), most costly first
    kept_float: list[str]          # only with keep_float: the layers run in float on the CPU, graph order
    stream: Stream                 # only with states: a stream of steps, each state carried
    verdict: Verdict
    golden: Golden
    fidelity: dict[str, Fidelity]  # per output: the accuracy half of the verdict
    weights: WeightCheck           # the accuracy half's check of the int8 weights
