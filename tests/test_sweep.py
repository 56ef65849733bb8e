"""`onnx2gemmini sweep`: configurations from presets and a grid, one row per (model, config), the Pareto set."""
import csv
import json

import pytest

from onnx2gemmini.errors import UsageError
from onnx2gemmini.sweep import expand_configs, mark_pareto, parse_grid
from tests.test_cli import CALIB, MODEL, assert_one_error_line, run


def test_grid_times_presets():
    configs = expand_configs(["default", "chip"], parse_grid(["dim=8,16", "acc_kib=32"]))
    assert [c.name for c in configs] == ["default+dim=8+acc_kib=32", "default+dim=16+acc_kib=32",
                                         "chip+dim=8+acc_kib=32", "chip+dim=16+acc_kib=32"]
    assert [(c.dim, c.sp_kib, c.acc_kib) for c in configs] == [(8, 256, 32), (16, 256, 32), (8, 64, 32), (16, 64, 32)]


@pytest.mark.parametrize("spec,match", [("dim", "FIELD=V1"), ("colour=1", "FIELD=V1"), ("dim=8,x", "positive"),
                                        ("dim=0", "positive")])
def test_bad_grid(spec, match):
    with pytest.raises(UsageError, match=match):
        parse_grid([spec])


def test_grid_point_no_gemmini_can_have():
    with pytest.raises(UsageError, match="dim must be a power of two"):
        expand_configs(["default"], parse_grid(["dim=12"]))


def _row(config, memory, cycles, dram, status="ok"):
    return {"model": "m", "config": config, "sp_kib": memory, "acc_kib": 0, "est_cycles": cycles,
            "dram_bytes": dram, "status": status}


def test_pareto_keeps_what_nothing_beats():
    rows = [_row("small-slow", 64, 900, 50), _row("big-fast", 512, 100, 40), _row("big-slow", 512, 900, 50),
            _row("mid", 128, 500, 45), _row("same-as-mid", 128, 500, 45), _row("broken", 16, None, None, "error")]
    assert mark_pareto(rows) == {"m": ["small-slow", "big-fast", "mid", "same-as-mid"]}
    assert [r["pareto"] for r in rows] == [True, True, False, True, True, False]


def test_cli_sweep_writes_table_json_and_plot(tmp_path):
    out = tmp_path / "sweep"
    proc = run("sweep", MODEL, "--config", "default,chip", "--grid", "dim=8,16", "--calib", CALIB, "--num-calib",
               "4", "--workers", "1", "-o", out)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert [r["config"] for r in rows] == ["default+dim=8", "default+dim=16", "chip+dim=8", "chip+dim=16"]
    assert all(r["status"] == "ok" and int(r["dram_bytes"]) > 0 for r in rows)
    document = json.loads((out / "sweep.json").read_text())
    assert document["pareto"][str(MODEL)] == [r["config"] for r in rows if r["pareto"] == "True"]
    assert "chip+dim=16" in document["pareto"][str(MODEL)]  # least memory, fewest cycles
    svg = (out / "pareto.svg").read_text()
    assert svg.startswith("<svg") and "digits" not in svg  # models are numbered, never named, in the plot
    assert "chip+dim=16" in proc.stdout
    again = run("sweep", MODEL, "-o", out)
    assert_one_error_line(again, 2, "not empty")


def test_cli_sweep_errors(tmp_path):
    assert_one_error_line(run("sweep", MODEL, "--grid", "dim=7", "-o", tmp_path / "a"), 2, "power of two")
    assert_one_error_line(run("sweep", tmp_path / "missing.onnx", "-o", tmp_path / "b"), 3, "missing.onnx")
    assert_one_error_line(run("sweep", MODEL, "--config", "nosuch", "-o", tmp_path / "c"), 2, "nosuch")
    assert_one_error_line(run("sweep", MODEL, "--limit", "bogus=1", "-o", tmp_path / "d"), 2, "bogus")
    assert not any(tmp_path.iterdir())  # nothing written for a refused sweep
