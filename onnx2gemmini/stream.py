"""Streaming models: `--state OUT=IN` says output OUT is fed back as input IN at the next call.

Why: a voice-activity detector, a keyword spotter or a noise suppressor runs on one chunk of audio at a time
and carries its recurrent state from call to call. Its calibration and evaluation data are streams: the
samples are consecutive steps, and each step's state input is the state the model returned at the step
before (zeros at the first, unless the data's first sample gives one). So:

* calibration sees the states the float model really produces on the stream (`carried` with the float
  model), not the zeros or noise a data file would hold;
* `diff` carries two streams side by side: the int8 program's own (each step reads the state the emulator
  returned, so the int8 error that accumulates is in what is compared, and each step is still checked bit
  for bit against the golden on the same inputs) and the user's original model's own fp32 stream, against
  which fidelity is judged (the accumulated drift, not one step's error);
* the generated programs carry the state between calls (the C and MLIR stream API).

The carry is the output's real value (int8 times its scale, in float32, as the C program dequantizes it),
quantized again as the input at the next step.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .data import Dataset
from .errors import UsageError
from .per_output import named

StatePairs = tuple[tuple[str, str], ...]  # (output, input) pairs


def parse(specs) -> StatePairs:
    """`OUT=IN` strings (or one such string), or a {output: input} mapping -> ((output, input), ...)."""
    mapping, specs = named(specs, "--state", "states", "OUTPUT=INPUT", last=False)
    items = [(str(k), str(v)) for k, v in mapping.items()] if mapping is not None else []
    for spec, out, inp in specs:
        if not out or not inp.strip():
            raise UsageError(f"--state {spec!r}: expected OUTPUT=INPUT (the output fed back as that input "
                             f"at the next step)")
        items.append((out, inp.strip()))
    for kind, names in (("output", [o for o, _ in items]), ("input", [i for _, i in items])):
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise UsageError(f"--state: the {kind} '{repeated[0]}' is given twice")
    return tuple(items)


def check(pairs: StatePairs, inputs: dict[str, tuple[tuple[int, ...], np.dtype]],
          outputs: dict[str, tuple[int, ...]], frozen=()) -> None:
    """Each pair an output and a float input of the compiled model with the same shape; else one UsageError.
    `inputs`: name -> (shape, dtype); `outputs`: name -> shape; `frozen`: inputs --input-value froze."""
    for out, inp in pairs:
        if out not in outputs:
            raise UsageError(f"--state {out}={inp}: the model has no output '{out}' "
                             f"(outputs: {', '.join(outputs)})")
        if inp in frozen:
            raise UsageError(f"--state {out}={inp}: '{inp}' is frozen by --input-value; a state changes each step")
        if inp not in inputs:
            raise UsageError(f"--state {out}={inp}: the model has no input '{inp}' "
                             f"(inputs: {', '.join(inputs) or 'none'})")
        shape, dtype = inputs[inp]
        if np.dtype(dtype).kind != "f":
            raise UsageError(f"--state {out}={inp}: input '{inp}' holds {np.dtype(dtype).name}; a state is float")
        if tuple(outputs[out]) != tuple(shape):
            raise UsageError(f"--state {out}={inp}: output shape {_text(outputs[out])} differs from the input's "
                             f"{_text(shape)}")


def _text(shape) -> str:
    return "x".join(map(str, shape)) or "a scalar"


def state_inputs(pairs: StatePairs) -> frozenset:
    return frozenset(inp for _, inp in pairs)


def carried(step: Callable[[dict], dict], samples: list[dict], pairs: StatePairs,
            shapes: dict[str, tuple[int, ...]]) -> tuple[list[dict], list[dict]]:
    """Run `step` (one sample's feeds -> {output: float values}) over the stream `samples` in order, each
    state input set to its output's value at the step before, zeros at the first. Returns (the samples with
    their states, each step's outputs)."""
    state = {inp: np.zeros(shapes[inp], np.float32) for _, inp in pairs}
    fed, produced = [], []
    for sample in samples:
        sample = {**sample, **state}
        outputs = step(sample)
        fed.append(sample)
        produced.append(outputs)
        state = {inp: np.asarray(outputs[out], np.float32).reshape(shapes[inp]) for out, inp in pairs}
    return fed, produced


def filled(data: Dataset, step: Callable[[dict], dict], pairs: StatePairs,
           shapes: dict[str, tuple[int, ...]]) -> tuple[Dataset, list[dict]]:
    """`data` (the stream's other inputs) with every state input carried by `step` (`carried`), and each
    step's outputs."""
    samples = [data.sample(i) for i in range(data.num_samples)]
    fed, produced = carried(step, samples, pairs, shapes)
    inputs = dict(data.inputs)
    for _, inp in pairs:
        inputs[inp] = np.stack([s[inp] for s in fed]).astype(np.float32)
    return Dataset(inputs, data.labels, data.source), produced


def onnx_step(model, feeds_from: dict | None = None) -> Callable[[dict], dict]:
    """One step of an ONNX model in onnxruntime (float): {output name: value}; `feeds_from` adds constant
    feeds (the inputs --input-value froze, which the user's original model still reads)."""
    from .ort_session import run, session
    sess = session(model)
    names = [o.name for o in sess.get_outputs()]
    wanted = [i.name for i in sess.get_inputs()]
    extra = dict(feeds_from or {})

    def step(sample: dict) -> dict:
        feeds = {n: extra[n] if n in extra else sample[n] for n in wanted}
        return dict(zip(names, run(sess, names, feeds)))
    return step


# The generated programs' self-test runs this many steps of the calibration stream before the checked one.
SELFTEST_WARMUP = 3


@dataclass(frozen=True)
class StreamCase:
    """A streaming model's self-test (the C and MLIR programs): the (output index, input index) pairs of the
    plan, and the inputs of the steps before the checked sample's, which the program runs first through its
    stream API (their state inputs are ignored: the program carries its own)."""

    pairs: tuple[tuple[int, int], ...]
    warmup: tuple[dict, ...]

    def state_inputs(self) -> frozenset:
        return frozenset(i for _, i in self.pairs)


def selftest_case(plan, pairs: StatePairs, steps: list[dict], run_step: Callable[[dict], dict]
                  ) -> tuple[dict, StreamCase]:
    """(the checked sample, the StreamCase) from the first steps of a stream (`steps`, their state inputs
    ignored): the int8 program's own carry (`run_step`, the emulator) fills every state, so the state the
    program carries into the last step must equal the sample's bit for bit."""
    names = [plan.tensors[t].onnx_name for t in plan.inputs]
    outputs = [plan.tensors[t].onnx_name for t in plan.outputs]
    shapes = {plan.tensors[t].onnx_name: plan.tensors[t].onnx_shape for t in plan.inputs}
    fed, _ = carried(run_step, steps, pairs, shapes)
    index = tuple((outputs.index(out), names.index(inp)) for out, inp in pairs)
    return fed[-1], StreamCase(index, tuple(fed[:-1]))
