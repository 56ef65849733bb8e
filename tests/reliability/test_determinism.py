"""Same model and options -> byte-identical output folders: across runs, hash seeds and concurrent compiles.

Only the measured timings (report.json `timing`, report.md's compile time) may differ.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

import onnx2gemmini as o2g
from tests.helpers import infer_outputs
from tests.reliability.common import REPO, save, tree_bytes
from tests.reliability.test_output_dir import _normalized


def _small_net():
    """Conv, ReLU, max pool, residual add, concat, global average, Gemm, Softmax: most of the planner."""
    r = np.random.default_rng(3)
    inits = {"W1": r.standard_normal((8, 3, 3, 3)).astype(np.float32),
             "W2": r.standard_normal((8, 8, 3, 3)).astype(np.float32),
             "B2": r.standard_normal(8).astype(np.float32),
             "Wf": r.standard_normal((16, 10)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["p1", "c2"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("Concat", ["r2", "p1"], ["cat"], axis=1),
             helper.make_node("GlobalAveragePool", ["cat"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "Wf"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["y"])]
    return infer_outputs(nodes, {"x": [1, 3, 16, 16]}, inits)


def _env(seed: str) -> dict:
    path = os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": path}


def test_concurrent_compiles_with_different_hash_seeds_are_identical(tmp_path):
    folders = [tmp_path / "a", tmp_path / "b"]
    for folder in folders:
        folder.mkdir()
        save(_small_net(), folder / "net.onnx")
    command = [sys.executable, "-m", "onnx2gemmini.cli", "net.onnx", "-o", "out", "-q"]
    procs = [subprocess.Popen(command, cwd=folder, env=_env(seed), stderr=subprocess.PIPE, text=True)
             for folder, seed in zip(folders, ("0", "4242"))]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    a, b = (tree_bytes(folder / "out") for folder in folders)
    assert len(a) >= 8 and set(a) == set(b)
    assert _normalized(a) == _normalized(b), [k for k in a if a[k] != b[k]]


@pytest.mark.parametrize("emit", [None, ("c",)])
def test_two_runs_in_one_process_are_identical(tmp_path, emit):
    trees = []
    for name in ("one", "two"):
        compiled = o2g.compile(_small_net(), command="onnx2gemmini net.onnx")
        trees.append(_normalized(tree_bytes(compiled.write(tmp_path / name, emit))))
    assert trees[0] == trees[1], [k for k in trees[0] if trees[0][k] != trees[1].get(k)]


def test_two_output_paths_differ_only_in_the_path_and_the_timings(tmp_path):
    """The same compile into two folders: every file, the annotated model included, is byte-identical once
    the output path the banners quote is masked and the measured timings are left out."""
    save(_small_net(), tmp_path / "net.onnx")
    trees = []
    for out in ("out_a", "out_b"):
        command = [sys.executable, "-m", "onnx2gemmini.cli", "net.onnx", "-o", out, "-q"]
        assert subprocess.run(command, cwd=tmp_path, env=_env("0"), timeout=300).returncode == 0
        tree = {name: data.replace(out.encode(), b"out_X") for name, data in tree_bytes(tmp_path / out).items()}
        trees.append(_normalized(tree))
    a, b = trees
    assert "model.annotated.onnx" in a and set(a) == set(b)
    assert a == b, [k for k in a if a[k] != b[k]]
