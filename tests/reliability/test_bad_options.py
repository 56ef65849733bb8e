"""Bad options and --config files: one `error:` line, exit 2, before any work and without an output folder."""
from __future__ import annotations

import pytest

from onnx2gemmini import limits
from onnx2gemmini.errors import UsageError
from tests.reliability.common import assert_one_error, conv_model, leftovers, save


def _config(content: bytes):
    def build(tmp):
        (tmp / "c.json").write_bytes(content)
        return ["--config", tmp / "c.json"]
    return build


def _config_dir(tmp):
    (tmp / "c.json").mkdir()
    return ["--config", tmp / "c.json"]


CORPUS = {
    # id: (build(tmp) -> extra args, fragments of the error line)
    "config_not_utf8": (_config(b'{"dim": 16, "name": "\xff\xfe"}'), ["c.json", "not UTF-8"]),
    "config_syntax": (_config(b'{"dim": 16,'), ["c.json", "not valid JSON"]),
    "config_base_is_a_list": (_config(b'{"base": ["default"]}'), ["unknown base preset"]),
    "config_5000_digit_int": (_config(b'{"dim": ' + b"1" * 5000 + b"}"), ["c.json", "not usable JSON"]),
    "config_deep_nesting": (_config(b"[" * 100_000 + b"]" * 100_000), ["c.json", "JSON"]),
    "config_huge_file": (_config(b" " * (2 << 20) + b"{}"), ["c.json", "larger than"]),
    "config_dim_too_large": (_config(b'{"dim": 65536}'), ["dim 65536 is above"]),
    "config_bool_for_int": (_config(b'{"sp_kib": true}'), ["'sp_kib' must be int"]),
    "config_is_a_directory": (_config_dir, ["cannot read"]),
    "input_shape_20_digits": (lambda tmp: ["--input-shape", "x=1x3x99999999999999999999x8"], ["max_dim"]),
    "input_shape_negative": (lambda tmp: ["--input-shape", "x=1x3x-8x8"], ["positive integers"]),
    "input_shape_fixed_dim": (lambda tmp: ["--input-shape", "x=1x3x9x8"], ["dimension 8 is fixed"]),
    "limit_unknown_name": (lambda tmp: ["--limit", "bogus=1"], ["unknown limit 'bogus'", "model_bytes"]),
    "limit_no_equals": (lambda tmp: ["--limit", "tensor_bytes"], ["NAME=VALUE"]),
    "limit_bad_value": (lambda tmp: ["--limit", "tensor_bytes=lots"], ["tensor_bytes=lots"]),
    "limit_zero": (lambda tmp: ["--limit", "data_samples=0"], ["must be positive"]),
    "limit_negative": (lambda tmp: ["--limit", "data_samples=-5"], ["data_samples=-5"]),
    "num_calib_zero": (lambda tmp: ["--num-calib", "0"], ["num-calib"]),
    "emit_unknown": (lambda tmp: ["--emit", "c,pdf"], ["--emit"]),
}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_bad_option_is_one_error_line(cli, tmp_path, case):
    build, fragments = CORPUS[case]
    model = save(conv_model(), tmp_path / "m.onnx")
    assert_one_error(cli(model, "-o", tmp_path / "out", *build(tmp_path)), 2, *fragments)
    assert leftovers(tmp_path, "out") == []


def test_limit_values_and_overrides(cli, tmp_path):
    assert limits.parse_limits(["tensor_bytes=2G", "data_samples=5000", "max_dim=none"]) == limits.DEFAULTS.replace(
        tensor_bytes=2 << 30, data_samples=5000, max_dim=limits.UNLIMITED)
    assert limits.parse_size("512MiB", "x") == 512 << 20 and limits.parse_size("4k", "x") == 4096
    with pytest.raises(UsageError):
        limits.parse_limits({"tensor_bytes": True})
    model = save(conv_model(), tmp_path / "m.onnx")
    # a raised limit lets through what the default stops, and the option is shared by compile/inspect/diff
    assert cli(model, "--limit", "activation_bytes=1K", "-o", tmp_path / "a").code == 3
    assert cli(model, "--limit", "activation_bytes=1K", "--limit", "activation_bytes=none", "-q",
               "-o", tmp_path / "a").code == 0
    for command in ("inspect", "diff"):
        assert_one_error(cli(command, model, "--limit", "nope=1"), 2, "unknown limit")


def test_limits_are_scoped_to_the_call():
    with limits.applied({"tensor_bytes": 10}) as inner:
        assert limits.current() is inner and inner.tensor_bytes == 10
        with limits.applied(["max_dim=7"]):
            assert limits.current().tensor_bytes == 10 and limits.current().max_dim == 7
    assert limits.current() == limits.DEFAULTS
