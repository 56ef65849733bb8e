"""Hugging Face transformers end to end (scripts/zoo_transformers.py; the whole sweep is
scripts/zoo_coverage.py --transformers): a BERT-style encoder and a GPT-2 decoder, random weights, exported
with token ids and an attention mask with padding, through the CLI: compile, `diff` against onnxruntime
(and the model as exported), the C program's self-test on this host and its bytes against the emulator."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

if os.environ.get("CI") != "true" and importlib.util.find_spec("transformers") is None:
    pytest.skip("needs transformers (test extra)", allow_module_level=True)

import zoo_transformers  # noqa: E402

import onnx2gemmini as o2g  # noqa: E402
from onnx2gemmini.run import hostc  # noqa: E402
from onnx2gemmini.run.emulator import Emulator  # noqa: E402


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "onnx2gemmini.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=900)


@pytest.mark.parametrize("name,form", [("bert", "padding"), ("gpt2", "causal")])
def test_text_transformer_end_to_end(name, form, tmp_path):
    model = zoo_transformers.find(name)
    path = zoo_transformers.export(model, tmp_path / f"{name}.onnx")
    calib, data = zoo_transformers.inputs(model, 8, 0), zoo_transformers.inputs(model, 4, 1)
    assert (data["attention_mask"] == 0).any(), "the evaluation data must pad some sequence"
    np.savez(tmp_path / "calib.npz", **calib)
    np.savez(tmp_path / "data.npz", **data)

    out = tmp_path / "out"
    compiled = cli(path, "--calib", tmp_path / "calib.npz", "-o", out, "-v")
    assert compiled.returncode == 0, compiled.stderr[-2000:]
    assert f"Add of a {form} mask from 'attention_mask'" in compiled.stderr

    diff = cli("diff", path, "--calib", tmp_path / "calib.npz", "--data", tmp_path / "data.npz")
    assert diff.returncode == 0 and "PASSED" in diff.stdout, diff.stdout[-3000:] + diff.stderr[-2000:]
    # the rewrite (masks fused into the softmaxes, embeddings as lookups) computes the exported model's function
    assert "the rewritten graph's fp32 vs the original: SQNR" in diff.stdout

    c_dir = out / "c"
    hostc.build(c_dir, ("model", "model-selftest"))
    selftest = subprocess.run(["./model-selftest"], cwd=c_dir, capture_output=True, text=True, timeout=300)
    assert selftest.returncode == 0 and "PASS (exact)" in selftest.stdout, selftest.stdout[-2000:]

    result = o2g.compile(path, calib=tmp_path / "calib.npz")
    plan = result.plan
    ops = {s.params.op for s in plan.steps if hasattr(s, "params")}
    assert {"embedding", "softmax_input_mask"} <= ops
    for i in range(2):  # ./model INPUT.bin OUTPUT.bin with integer ids and a padded mask
        sample = {k: v[i] for k, v in data.items()}
        got = hostc.run(c_dir, plan, sample)
        want = Emulator(plan).run(sample)
        for tid in plan.outputs:
            name_ = plan.tensors[tid].onnx_name
            np.testing.assert_array_equal(got[name_].reshape(-1), want[tid].reshape(-1))
