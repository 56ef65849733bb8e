"""Emulator.run_batch and `diff --batch-size`: samples emulated together give each sample the bytes a run of
its own gives, for any batch size, grouping and number of workers."""
import json

import numpy as np
import pytest

import onnx2gemmini as o2g
from onnx2gemmini.compare import batch_size_for, run_diff
from onnx2gemmini.data import load_data
from onnx2gemmini.errors import UsageError
from onnx2gemmini.run import emulator
from onnx2gemmini.run.emulator import Emulator
from onnx2gemmini.segments import HANDOVER
from tests.emit.c_models import MODELS
from tests.helpers import random_dataset
from tests.test_cli import CALIB, EVAL, MODEL, assert_one_error_line, run
from tests.test_normalizer import IBERT, attention

# One of each step kind and buffer layout: convs with a batch and a fused pool, a 3-D matmul, resadd, global
# average, depthwise, concat inputs written in place (slices of one buffer), float32 outputs, activation x
# activation matmuls, integer ids with a mask, several inputs and outputs, CPU slices of NHWC maps.
KINDS = ["conv3x3_stride2_batch2_nobias", "conv_im2col_pool", "matmul_bias_3d", "add_resadd_relu",
         "global_average_rect", "depthwise_multiplier2", "concat_in_place", "dense_block", "float_outputs",
         "attention_matmuls", "embedding_lookups_int64_int32", "attention_mask_input_causal",
         "two_inputs_three_outputs", "slice_steps_nhwc"]


def feeds(model, n, seed):
    data = random_dataset(model, n, seed)
    return [data.sample(i) for i in range(n)]


def assert_same_as_one_by_one(compiled, samples):
    emu = Emulator(compiled.plan)
    one = [emu.run(s) for s in samples]
    many = emu.run_batch(samples)
    assert len(many) == len(one)
    for a, b in zip(one, many):
        assert a.keys() == b.keys()
        for tid in a:
            assert a[tid].dtype == b[tid].dtype and a[tid].shape == b[tid].shape
            np.testing.assert_array_equal(a[tid], b[tid], err_msg=tid)


@pytest.mark.parametrize("rows", [1, 64, 10**9], ids=["sample-by-sample", "groups", "one-call"])
@pytest.mark.parametrize("name", KINDS)
def test_a_batch_gives_each_sample_its_own_bytes(name, rows, monkeypatch):
    model = MODELS[name]()
    compiled = o2g.compile(model, calib=random_dataset(model, 2, 0))
    monkeypatch.setattr(emulator, "BATCH_ROWS", rows)
    assert_same_as_one_by_one(compiled, feeds(model, 5, 3))


def test_the_normalizers_softmax_in_a_batch():
    model = attention(biased=True)
    compiled = o2g.compile(model, calib=random_dataset(model, 4, 0), config=IBERT)
    assert_same_as_one_by_one(compiled, feeds(model, 3, 7))


def test_a_slice_written_without_the_sample_stride_is_caught(monkeypatch):
    """Negative control: samples sharing sample 0's buffer for their in-place concat inputs differ."""
    model = MODELS["concat_in_place"]()
    compiled = o2g.compile(model, calib=random_dataset(model, 2, 0))
    real = Emulator._batch_slice_view

    def shared(self, buffer, tid, n):
        view = real(self, buffer, tid, n)
        return np.lib.stride_tricks.as_strided(view, view.shape, (0, *view.strides[1:]))

    monkeypatch.setattr(Emulator, "_batch_slice_view", shared)
    with pytest.raises(AssertionError):
        assert_same_as_one_by_one(compiled, feeds(model, 3, 3))


def test_diff_is_the_same_document_for_any_batch_size():
    compiled = o2g.compile(MODEL, calib=CALIB, num_calib=16)
    data = load_data(EVAL, compiled.graph.inputs).head(11)
    seen = []
    one = run_diff(compiled, data, batch_size=1)
    four = run_diff(compiled, data, batch_size=4, progress=lambda n, total: seen.append((n, total)))
    assert sum(n for n, _ in seen) == 11 and {t for _, t in seen} == {11}
    assert json.dumps(four, default=float) == json.dumps(one, default=float)
    proc = run("diff", MODEL, "--calib", CALIB, "--num-calib", "16", "--data", EVAL, "--num-samples", "11",
               "--batch-size", "3", "--workers", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(json.dumps(one, default=float))


def test_the_default_batch_fits_the_activation_budget():
    assert batch_size_for(1 << 20, 8 << 30) == 8
    assert batch_size_for(100 << 20, 1 << 30) == (1 << 30) // (HANDOVER * (100 << 20)) == 5
    assert batch_size_for(3 << 30, 8 << 30) == 1  # a model checked in pieces: one sample at a time


@pytest.mark.parametrize("value", [0, -1, True, 2.5])
def test_a_batch_size_must_be_a_positive_integer(value):
    with pytest.raises(UsageError, match="--batch-size"):
        o2g.diff(MODEL, calib=CALIB, num_samples=1, batch_size=value)


def test_the_cli_refuses_a_zero_batch():
    assert_one_error_line(run("diff", MODEL, "--batch-size", "0"), 2, "--batch-size")
