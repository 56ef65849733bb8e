"""`diff` at Polygraphy's level: saved outputs compared later, atol/rtol checks beside the LSB checks, the
smallest tolerance that would pass, mismatch rates, and the first divergent layer named."""
import json

import numpy as np
import pytest

import onnx2gemmini as o2g
from onnx2gemmini.cli import format_diff
from onnx2gemmini.compare import parse_tolerances, required_tolerance
from tests.test_cli import CALIB, EVAL, MODEL, assert_one_error_line, run


@pytest.fixture(scope="module")
def compiled():
    return o2g.compile(MODEL, calib=CALIB, num_calib=16)


def test_saved_outputs_compare_exactly_with_the_same_compile(compiled, tmp_path):
    saved = tmp_path / "outputs.npz"
    first = o2g.diff(compiled, data=EVAL, num_samples=12, save_outputs=saved)
    with np.load(saved) as archive:
        assert archive.files == ["logits"] and archive["logits"].shape == (12, 10)
    again = o2g.diff(compiled, data=EVAL, num_samples=12, load_outputs=saved)
    check = again["outputs"]["logits"]
    assert check["int8_vs_saved"]["mismatches"] == 0 and check["tolerance_check"]["passed"]
    assert again["verdict"]["passed"] and first["verdict"]["passed"]


def test_saved_outputs_catch_a_changed_compile(compiled, tmp_path):
    saved = tmp_path / "outputs.npz"
    o2g.diff(compiled, data=EVAL, num_samples=12, save_outputs=saved)
    other = o2g.diff(MODEL, calib=CALIB, num_calib=16, data=EVAL, num_samples=12, equalize=False,
                     load_outputs=saved)
    check = other["outputs"]["logits"]
    assert check["int8_vs_saved"]["mismatches"] > 0
    assert not other["verdict"]["passed"]
    assert any("saved outputs" in f for f in other["verdict"]["failures"])
    # the smallest tolerance reported is the one that passes
    needed = check["int8_vs_saved"]["required_atol"]
    assert o2g.diff(MODEL, calib=CALIB, num_calib=16, data=EVAL, num_samples=12, equalize=False,
                    load_outputs=saved, atol=needed)["verdict"]["passed"]


def test_required_atol_is_the_boundary_of_the_fp32_check(compiled):
    result = o2g.diff(compiled, data=EVAL, num_samples=12)
    needed = result["outputs"]["logits"]["fp32_vs_int8"]["required_atol"]
    assert needed == pytest.approx(result["outputs"]["logits"]["fp32_vs_int8"]["max_abs"])
    assert needed > 0
    assert o2g.diff(compiled, data=EVAL, num_samples=12, atol=needed)["verdict"]["passed"]
    below = o2g.diff(compiled, data=EVAL, num_samples=12, atol={"logits": needed * 0.999})
    assert not below["verdict"]["passed"]
    assert below["outputs"]["logits"]["tolerance_check"]["outside"] >= 1


def test_required_tolerance_of_known_values():
    ref = np.array([1.0, -2.0, 0.0, 4.0], np.float32)
    ours = np.array([1.5, -2.0, 0.0, 3.0], np.float32)
    assert required_tolerance(ref, ours) == {"required_atol": 1.0, "required_rtol": 0.5}
    assert required_tolerance(np.zeros(2), np.array([0.0, 1.0]))["required_rtol"] is None  # no rtol passes


def test_tolerance_specs():
    names = ["a", "b=c"]
    assert parse_tolerances(["0.5"], names, "--atol") == {"a": 0.5, "b=c": 0.5}
    assert parse_tolerances(["b=c=0.25"], names, "--atol") == {"b=c": 0.25}  # the last '=' splits
    assert parse_tolerances({"a": 1}, names, "atol") == {"a": 1.0}
    for bad in (["-1"], ["nan"], ["x=1"], ["a=oops"]):
        with pytest.raises(o2g.UsageError):
            parse_tolerances(bad, names, "--atol")


def test_cli_save_load_and_atol(tmp_path):
    saved = tmp_path / "out.npz"
    args = ["diff", MODEL, "--calib", CALIB, "--num-calib", "16", "--data", EVAL, "--num-samples", "8",
            "--workers", "1"]
    assert run(*args, "--save-outputs", saved).returncode == 0
    same = run(*args, "--load-outputs", saved)
    assert same.returncode == 0, same.stderr
    assert "int8 vs saved outputs: 0 of 80 values differ" in same.stdout
    tight = run(*args, "--atol", "logits=1e-9", "--json")
    assert tight.returncode == 1
    doc = json.loads(tight.stdout)
    assert doc["outputs"]["logits"]["tolerance_check"]["reference"] == "fp32"
    assert "rate" in run(*args).stdout.splitlines()[2]


def test_cli_refuses_to_overwrite_an_input_and_bad_saved_files(tmp_path):
    before = CALIB.read_bytes()
    proc = run("diff", MODEL, "--calib", CALIB, "--num-samples", "2", "--save-outputs", CALIB)
    assert_one_error_line(proc, 2, "input of this run")
    assert CALIB.read_bytes() == before
    assert_one_error_line(run("diff", MODEL, "--calib", CALIB, "--num-samples", "2", "--load-outputs", MODEL),
                          3, "not an .npz")
    np.savez(tmp_path / "other.npz", scores=np.zeros(3))
    assert_one_error_line(run("diff", MODEL, "--calib", CALIB, "--num-samples", "2", "--load-outputs",
                              tmp_path / "other.npz"), 3, "no saved values for output 'logits'")
    np.savez(tmp_path / "short.npz", logits=np.zeros((1, 10)))
    assert_one_error_line(run("diff", MODEL, "--calib", CALIB, "--num-samples", "2", "--load-outputs",
                              tmp_path / "short.npz"), 3, "shape")
    assert_one_error_line(run("diff", MODEL, "--calib", CALIB, "--num-samples", "2", "--save-outputs",
                              tmp_path / "missing" / "o.npz"), 2, "does not exist")


def test_text_names_the_first_divergent_layer():
    layer = {"name": "conv2", "op": "Conv", "sqnr_db": 30.0, "cosine": 0.99, "max_lsb_vs_ort_qdq": 1,
             "tolerance_lsb": 1, "mismatches_vs_ort_qdq": 3, "mismatch_rate": 0.03, "allowed_mismatches": 5}
    result = {"samples": 1, "layers": [dict(layer, name="conv1", max_lsb_vs_ort_qdq=0, mismatches_vs_ort_qdq=0,
                                            mismatch_rate=0.0), layer], "outputs": {},
              "verdict": {"passed": True, "failures": [], "first_divergent_layer": "conv2"}}
    text = format_diff(result)
    assert "first layer differing from onnxruntime QDQ: conv2 (1 LSB)" in text
    assert "3.000%" in text


def test_saved_outputs_keep_any_output_name(tmp_path):
    """Output names become archive keys whatever they are (np.savez would take 'file' as its own argument)."""
    from onnx2gemmini.compare import load_outputs, save_outputs
    values = {"file": np.arange(3.0), "a/b c": np.ones((2, 2), np.float32), "allow_pickle": np.zeros(1)}
    save_outputs(tmp_path / "o.npz", values)
    loaded = load_outputs(tmp_path / "o.npz", list(values))
    assert loaded.keys() == values.keys()
    for k in values:
        np.testing.assert_array_equal(loaded[k], values[k])


def _add_model():
    from onnx import helper
    from tests.helpers import make_model
    return make_model([helper.make_node("Add", ["a", "b"], ["y"], name="add")],
                      {"a": [1, 4, 16, 16], "b": [1, 4, 16, 16]}, {"y": [1, 4, 16, 16]}, {})


def _add_data(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    a = np.round(rng.normal(0, 3, (n, 4, 16, 16)) * 8) / 8  # clustered on a few values: rounding ties abound
    b = rng.normal(0, 1, (n, 4, 16, 16))
    a[:, 0, 0, 0] = b[:, 0, 0, 0] = 0.0  # a sum no rounding can move
    return {"a": a.astype(np.float32), "b": b.astype(np.float32)}


def test_a_resadds_differences_are_explained_value_by_value(monkeypatch):
    """Every value where the resadd differs from onnxruntime's Add is one its input rounding explains, so the
    layer passes however many there are; one difference anywhere else fails it (negative control: a resadd
    kernel off by one at a value no rounding can move)."""
    from onnx2gemmini import kernels
    from onnx2gemmini.compare import run_diff
    from onnx2gemmini.data import Dataset
    model = _add_model()
    compiled = o2g.compile(model, calib=_add_data(16, 0), calib_method="minmax")
    evaluation = Dataset({k: v[:, None] for k, v in _add_data(4, 1).items()}, None, "eval")
    result = run_diff(compiled, evaluation)
    layer = next(l for l in result["layers"] if l["name"] == "add")
    assert layer["tolerance_why"].startswith("resadd:")
    assert layer["mismatches_vs_ort_qdq"] > 0 and layer["explained_mismatches"] == layer["mismatches_vs_ort_qdq"]
    assert layer["allowed_mismatches"] == layer["explained_mismatches"]  # nothing beyond the explained ones
    assert result["verdict"]["passed"]

    plain = kernels.resadd

    def off_by_one(a, b, *args):
        out = plain(a, b, *args).copy()
        out.flat[0] += 1  # the (0, 0, 0, 0) value: 0 + 0
        return out

    monkeypatch.setattr(kernels, "resadd", off_by_one)
    broken = run_diff(compiled, evaluation)
    assert not broken["verdict"]["passed"]
    assert any("layer add:" in f for f in broken["verdict"]["failures"])
