"""Gemmini configurations: presets and JSON files."""
import json

import pytest

from onnx2gemmini.config import PRESETS, load_config
from onnx2gemmini.errors import UsageError


def test_default_matches_gemmini_params():
    c = load_config("default")
    assert (c.dim, c.bank_rows, c.sp_rows, c.acc_rows) == (16, 4096, 16384, 1024)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_validate(name):
    assert PRESETS[name].validate() is PRESETS[name]


def test_chip_and_large_chip_rows():
    assert (PRESETS["chip"].bank_rows, PRESETS["chip"].acc_rows) == (1024, 512)
    assert (PRESETS["large-chip"].dim, PRESETS["large-chip"].bank_rows, PRESETS["large-chip"].acc_rows) == (32, 1024, 512)


def test_json_config(tmp_path):
    p = tmp_path / "mine.json"
    p.write_text(json.dumps({"base": "default", "sp_kib": 128, "has_max_pool": False}))
    c = load_config(str(p))
    assert c.name == "mine" and c.sp_kib == 128 and not c.has_max_pool


@pytest.mark.parametrize("content,fragment", [
    ("{", "not valid JSON"), ('{"dim": 12}', "power of two"), ('{"bogus": 1}', "unknown keys"),
    ('{"sp_kib": "x"}', "must be int"), ('{"base": "nope"}', "unknown base"), ('{"dataflow": "OS"}', "WS"),
    ('{"dim": 2048}', "dim 2048 is above"), ('{"sp_kib": 100000000}', "sp_kib 100000000 is above"),
    ('{"base": {"a": 1}}', "unknown base"), ('"default"', "JSON object"),
], ids=["syntax", "dim", "unknown_key", "type", "base", "os_only", "dim_too_large", "sp_too_large", "base_dict",
        "not_an_object"])
def test_bad_json_configs(tmp_path, content, fragment):
    p = tmp_path / "c.json"
    p.write_text(content)
    with pytest.raises(UsageError, match=fragment):
        load_config(str(p))


@pytest.mark.parametrize("spec", [5, 1.5, ["default"], {"dim": 16}])
def test_config_spec_of_the_wrong_type(spec):
    with pytest.raises(UsageError, match="config: expected a preset name"):
        load_config(spec)


def test_config_path_object(tmp_path):
    p = tmp_path / "mine.json"
    p.write_text('{"dim": 8}')
    assert load_config(p).dim == 8
