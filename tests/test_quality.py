"""quality.py: the reports' per-layer SQNR measured at write time is diff's per-layer SQNR on the same samples."""
from __future__ import annotations

import numpy as np
import pytest

import onnx2gemmini as o2g
from onnx2gemmini import quality
from onnx2gemmini.data import Dataset
from tests.reliability.test_determinism import _small_net

DATA = np.random.default_rng(5).standard_normal((6, 1, 3, 16, 16)).astype(np.float32)


def test_calibration_sqnr_is_diffs_sqnr_on_the_same_samples():
    compiled = o2g.compile(_small_net(), calib=DATA)
    assert compiled.calib_head.num_samples == quality.STATS_SAMPLES
    measured = quality.from_calibration(compiled, compiled.calib_head)
    result = o2g.diff(compiled, data=DATA[:quality.STATS_SAMPLES])
    assert measured["source"] == "calibration" and measured["samples"] == quality.STATS_SAMPLES
    assert [l["name"] for l in measured["layers"]] == [l["name"] for l in result["layers"]]
    for ours, theirs in zip(measured["layers"], result["layers"]):
        if theirs["sqnr_db"] is None:
            assert ours["sqnr_db"] is None
        else:
            assert ours["sqnr_db"] == pytest.approx(theirs["sqnr_db"], abs=1e-3)
    assert any(l["sqnr_db"] is not None and l["sqnr_db"] < 60 for l in measured["layers"])


def test_the_kept_samples_are_a_copy():
    """A slice would keep the whole calibration set alive as long as the Compiled object."""
    compiled = o2g.compile(_small_net(), calib=DATA)
    kept = compiled.calib_head.inputs["x"]
    assert kept.base is None and not np.shares_memory(kept, DATA)


def test_no_data_no_figures():
    compiled = o2g.compile(_small_net(), calib=DATA)
    assert quality.from_calibration(compiled, None)["layers"] == []
    empty = Dataset({"x": DATA[:0]}, None, "empty")
    assert quality.from_calibration(compiled, empty)["source"] is None


def test_large_models_are_measured_on_fewer_samples(monkeypatch):
    compiled = o2g.compile(_small_net(), calib=DATA)
    macs = sum(s.macs for s in compiled.plan.steps if hasattr(s, "macs"))
    monkeypatch.setattr(quality, "STATS_MACS", 2 * macs)
    assert quality.from_calibration(compiled, compiled.calib_head)["samples"] == 2
    monkeypatch.setattr(quality, "STATS_MACS", 1)
    assert quality.from_calibration(compiled, compiled.calib_head)["samples"] == 1


def test_a_channels_last_tensor_with_a_scale_per_channel():
    """A 4-D concat joining ranges at their own scales, written in place by Gemmini in NHWC: the report's
    SQNR reads its per-channel scales along the storage's channel axis (it crashed on the H axis before), and
    equals diff's."""
    from tests.emit.c_models import MODELS, OPTIONS
    from tests.helpers import random_dataset
    model = MODELS["concat_in_place"]()
    data = random_dataset(model, 4, 11)
    compiled = o2g.compile(model, calib=data, **OPTIONS.get("concat_in_place", {}))
    held = [t for t in compiled.plan.tensors.values() if t.layout == "NHWC" and t.scale_axis is not None]
    assert held and all(np.shape(t.scales()) == (1, 1, 1, t.shape[3]) for t in held)
    measured = quality.from_calibration(compiled, data)
    result = o2g.diff(compiled, data=data)
    for ours, theirs in zip(measured["layers"], result["layers"]):
        if theirs["sqnr_db"] is not None:
            assert ours["sqnr_db"] == pytest.approx(theirs["sqnr_db"], abs=1e-3), (ours, theirs)
