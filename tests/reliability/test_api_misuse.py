"""Python API mistakes raise the library's own one-line errors (o2g.errors), never TypeError/KeyError, and
never a silently wrong answer."""
from __future__ import annotations

import json

import numpy as np
import pytest

import onnx2gemmini as o2g
from tests.reliability.common import conv_model, save

X = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def compiled():
    return o2g.compile(conv_model())


def _raises(error, fragment, call, *args, **kwargs):
    with pytest.raises(error) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert fragment in message and "\n" not in message, message
    return message


@pytest.mark.parametrize("kwargs,error,fragment", [
    ({"model": 123}, o2g.UsageError, "model: expected a path"),
    ({"model": None}, o2g.UsageError, "model: expected a path"),
    ({"calib": 3.5}, o2g.UsageError, "got float"),
    ({"config": 5}, o2g.UsageError, "config: expected"),
    ({"config": ["default"]}, o2g.UsageError, "config: expected"),
    ({"input_shape": 5}, o2g.UsageError, "input_shape"),
    ({"input_shape": {"x": "1x3"}}, o2g.UsageError, "positive integers"),
    ({"input_shape": {"x": [1, 3, 8, 8.0]}}, o2g.UsageError, "positive integers"),
    ({"num_calib": 0}, o2g.UsageError, "--num-calib"),
    ({"num_calib": -1}, o2g.UsageError, "--num-calib"),
    ({"num_calib": "8"}, o2g.UsageError, "--num-calib"),
    ({"num_calib": True}, o2g.UsageError, "--num-calib"),
    ({"calib_method": "magic"}, o2g.UsageError, "--calib-method"),
    ({"calib_method": None}, o2g.UsageError, "--calib-method"),
    ({"tiling": ["search"]}, o2g.UsageError, "--tiling"),
    ({"weight_scales": 1}, o2g.UsageError, "--weight-scales"),
    ({"limits": 7}, o2g.UsageError, "limits"),
    ({"limits": {"bogus": 1}}, o2g.UsageError, "unknown limit"),
    ({"limits": {"tensor_bytes": 100}}, o2g.ModelError, "tensor_bytes"),
], ids=lambda v: repr(v) if isinstance(v, dict) else None)
def test_compile_argument_mistakes(kwargs, error, fragment):
    kwargs = {"model": conv_model(), **kwargs}
    _raises(error, fragment, o2g.compile, **kwargs)


def test_num_calib_is_the_number_of_samples(tmp_path):
    """0 used to mean 8 random samples and -1 'all but one'; now 1..N are honoured and the rest refused."""
    assert o2g.compile(conv_model(), num_calib=3).quant.num_samples == 3
    np.savez(tmp_path / "d.npz", x=np.ones((5, 3, 8, 8), np.float32))
    assert o2g.compile(conv_model(), calib=tmp_path / "d.npz", num_calib=2).quant.num_samples == 2
    assert o2g.compile(conv_model(), calib=tmp_path / "d.npz", num_calib=50).quant.num_samples == 5


@pytest.mark.parametrize("inputs,error,fragment", [
    ([X], o2g.UsageError, "expected a dict"),
    (X, o2g.UsageError, "expected a dict"),
    ({}, o2g.DataError, "missing x"),
    ({"x": X, "extra": X}, o2g.DataError, "unknown extra"),
    ({"X": X}, o2g.DataError, "missing x; unknown X"),
    ({"x": X.reshape(1, 3, 64)}, o2g.DataError, "shape [1, 3, 64]"),
    ({"x": X.reshape(1, 8, 8, 3)}, o2g.DataError, "shape [1, 8, 8, 3]"),
    ({"x": X[0]}, o2g.DataError, "shape [3, 8, 8]"),
    ({"x": np.concatenate([X, X])}, o2g.DataError, "one sample"),
    ({"x": X.astype(object)}, o2g.DataError, "dtype object"),
    ({"x": np.full(X.shape, "a")}, o2g.DataError, "dtype <U1"),
    ({"x": np.where(X > 1, np.nan, X)}, o2g.DataError, "NaN"),
    ({"x": [[1, 2], [3]]}, o2g.DataError, "not an array of numbers"),
], ids=["list", "array", "empty", "extra_key", "wrong_case", "same_size_3d", "nhwc", "no_batch", "two_samples",
        "objects", "strings", "nan", "ragged"])
def test_run_refuses_what_it_would_silently_get_wrong(compiled, inputs, error, fragment):
    _raises(error, fragment, compiled.run, inputs)
    _raises(error, fragment, compiled.run_int8, inputs)


def test_run_accepts_exact_inputs_of_any_real_type(compiled):
    y = compiled.run({"x": X})["y"]
    assert y.shape == (1, 4, 8, 8) and y.dtype == np.float32
    ints = np.round(X * 3).astype(np.int32)
    np.testing.assert_array_equal(compiled.run({"x": ints})["y"], compiled.run({"x": ints.astype(np.float32)})["y"])
    np.testing.assert_array_equal(compiled.run({"x": X.tolist()})["y"], y)


def test_write_argument_mistakes(compiled, tmp_path):
    _raises(o2g.UsageError, "write: expected an output directory", compiled.write, 42)
    _raises(o2g.UsageError, "--emit", compiled.write, tmp_path / "o", emit="pdf")
    _raises(o2g.UsageError, "emit: expected", compiled.write, tmp_path / "o", emit=3)
    assert not (tmp_path / "o").exists()
    out = compiled.write(str(tmp_path / "o"), emit=["qdq"])
    assert json.loads((out / "report.json").read_text())["model"]["inputs"][0]["shape"] == [1, 3, 8, 8]


def test_diff_takes_the_same_data_forms(tmp_path):
    """o2g.diff reads evaluation data through the same validation (here: a list of per-sample dicts)."""
    samples = [{"x": np.full((1, 3, 8, 8), v, np.float32)} for v in (0.5, -1.0, 2.0)]
    assert o2g.diff(conv_model(), data=samples, calib=samples)["samples"] == 3
    _raises(o2g.DataError, "no array for model input(s) x", o2g.diff, conv_model(), data={"nope": X})


@pytest.mark.parametrize("num_samples", [0, -1, 2.5, "4", True], ids=["zero", "negative", "float", "text", "bool"])
def test_diff_num_samples_must_be_a_positive_integer(compiled, num_samples):
    """As the CLI's --num-samples: a usage error before any work, never a silent empty or reversed slice."""
    _raises(o2g.UsageError, "--num-samples: expected a positive integer", o2g.diff, compiled, data=X,
            num_samples=num_samples)


def test_errors_carry_cli_exit_codes(tmp_path):
    model = save(conv_model(), tmp_path / "m.onnx")
    for error, code, call in ((o2g.UsageError, 2, lambda: o2g.compile(model, num_calib=0)),
                              (o2g.DataError, 3, lambda: o2g.compile(model, calib={"x": np.full((2, 3, 8, 8),
                                                                                                np.inf)})),
                              (o2g.ModelError, 3, lambda: o2g.compile(tmp_path / "nope.onnx"))):
        with pytest.raises(error) as info:
            call()
        assert isinstance(info.value, o2g.O2GError) and info.value.exit_code == code
