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
], ids=["syntax", "dim", "unknown_key", "type", "base", "os_only"])
def test_bad_json_configs(tmp_path, content, fragment):
    p = tmp_path / "c.json"
    p.write_text(content)
    with pytest.raises(UsageError, match=fragment):
        load_config(str(p))
