"""Bad model files: each is one `error:` line, exit 3, no output folder; nothing large is allocated first."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnx2gemmini as o2g
from tests.helpers import make_model
from tests.reliability.common import WEIGHTS, assert_one_error, conv_model, conv_nodes, leftovers, save


def _file(content: bytes):
    def build(tmp):
        (tmp / "m.onnx").write_bytes(content)
        return tmp / "m.onnx"
    return build


def _directory(tmp):
    (tmp / "d.onnx").mkdir()
    return tmp / "d.onnx"


def _nan_weights(tmp):
    w = WEIGHTS.copy()
    w[1, 2, 0, 0] = np.nan
    return save(conv_model(w), tmp / "m.onnx")


def _inf_weights(tmp):
    w = WEIGHTS.copy()
    w[0, 0, 0, 0] = -np.inf
    return save(conv_model(w), tmp / "m.onnx")


def _nan_constant_node(tmp):
    """The weights come from a Constant node (lifted to an initializer named after its output)."""
    w = WEIGHTS.copy()
    w[3, 0, 1, 1] = np.nan
    nodes = [helper.make_node("Constant", [], ["Wc"], value=numpy_helper.from_array(w))] + [
        helper.make_node("Conv", ["x", "Wc"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    return save(make_model(nodes, {"x": [1, 3, 8, 8]}, {"y": [1, 4, 8, 8]}), tmp / "m.onnx")


def _short_payload(tmp):
    model = conv_model()
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:100]
    return save(model, tmp / "m.onnx")


def _huge_declared_initializer(tmp):
    model = conv_model()
    del model.graph.initializer[0].dims[:]
    model.graph.initializer[0].dims.extend([1_000_000, 1_000_000, 3, 3])
    return save(model, tmp / "m.onnx")


def _huge_declared_input(tmp):
    return save(make_model(conv_nodes(), {"x": [1, 3, 100_000, 100_000]}, {"y": [1, 4, 100_000, 100_000]},
                           {"W": WEIGHTS}), tmp / "m.onnx")


def _large_realistic_input(tmp):
    """1x3x8000x8000 (768 MB): within tensor_bytes, but 8 random calibration samples are 5.7 GiB."""
    return save(make_model(conv_nodes(), {"x": [1, 3, 8000, 8000]}, {"y": [1, 4, 8000, 8000]}, {"W": WEIGHTS}),
                tmp / "m.onnx")


def _sparse_huge_file(tmp):
    path = tmp / "m.onnx"
    with open(path, "wb") as f:
        f.truncate(3 << 30)  # sparse: nothing is written, 3 GiB are declared
    return path


def _dynamic_model(tmp):
    return save(make_model(conv_nodes(), {"x": [-1, 3, -1, -1]}, {"y": [-1, 4, -1, -1]}, {"W": WEIGHTS}),
                tmp / "m.onnx")


CORPUS = {
    # id: (build(tmp) -> model path, extra args, fragments of the error line)
    "missing": (lambda tmp: tmp / "nope.onnx", [], ["no such file"]),
    "empty": (_file(b""), [], ["empty file"]),
    "garbage": (_file(b"\x08\x07garbage\xff\xff"), [], ["not an ONNX model"]),
    "directory": (_directory, [], ["is a directory"]),
    "dev_zero": (lambda tmp: "/dev/zero", [], ["/dev/zero", "not a regular file"]),
    "sparse_3GiB": (_sparse_huge_file, [], ["model_bytes", "3 GiB"]),
    "nan_weights": (_nan_weights, [], ["initializer 'W'", "NaN"]),
    "inf_weights": (_inf_weights, [], ["initializer 'W'", "infinite"]),
    "nan_constant_node": (_nan_constant_node, [], ["initializer 'Wc'", "NaN"]),
    "short_payload": (_short_payload, [], ["initializer 'W'", "does not match its shape"]),
    "huge_declared_initializer": (_huge_declared_initializer, [], ["initializer 'W'", "tensor_bytes"]),
    "huge_declared_input": (_huge_declared_input, [], ["input 'x'", "1x3x100000x100000", "tensor_bytes"]),
    "large_input_random_calib": (_large_realistic_input, [], ["random calibration data", "data_bytes"]),
    "dynamic_dims_unfixed": (_dynamic_model, [], ["input 'x'", "dimension 2", "--input-shape x=1x3xNxN"]),
    "model_bytes_limit": (lambda tmp: save(conv_model(), tmp / "m.onnx"), ["--limit", "model_bytes=100"],
                          ["model_bytes"]),
    "activation_bytes_limit": (lambda tmp: save(conv_model(), tmp / "m.onnx"), ["--limit", "activation_bytes=1K"],
                               ["activation_bytes"]),
    "max_dim_limit": (lambda tmp: save(conv_model(), tmp / "m.onnx"), ["--limit", "max_dim=4"],
                      ["input 'x'", "max_dim"]),
}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_bad_model_is_one_error_line(cli, tmp_path, memory_cap, case):
    build, args, fragments = CORPUS[case]
    model = build(tmp_path)
    assert_one_error(cli(model, "-o", tmp_path / "out", *args), 3, *fragments)
    assert leftovers(tmp_path, "out") == []


def test_limits_apply_to_inspect_and_diff(cli, tmp_path):
    model = save(conv_model(), tmp_path / "m.onnx")
    assert_one_error(cli("inspect", model, "--limit", "tensor_bytes=100"), 3, "initializer 'W'", "tensor_bytes")
    assert_one_error(cli("diff", model, "--limit", "activation_bytes=1K"), 3, "activation_bytes")
    assert cli("inspect", model, "--limit", "tensor_bytes=1M", "-q").code == 0


def test_infinite_clip_bound_is_allowed(tmp_path):
    """An infinite scalar means something as a Clip bound: only weights must be finite."""
    nodes = conv_nodes()[:1] + [helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    model = make_model(nodes, {"x": [1, 3, 8, 8]}, {"y": [1, 4, 8, 8]},
                       {"W": WEIGHTS, "lo": np.float32(0), "hi": np.float32(np.inf)})
    compiled = o2g.compile(model)
    y = compiled.run({"x": np.ones((1, 3, 8, 8), np.float32)})["y"]
    assert y.min() >= 0 and np.isfinite(y).all()


@pytest.mark.parametrize("dims,args,opset", [
    ([-1, 3, -1, -1], ["--input-shape", "x=1x3x48x192"], 17),  # paddle2onnx writes -1 for dynamic dims
    ([-1, 3, -1, -1], ["--input-shape", "x=1x3x48x192"], 12),  # ... and the opset converter must not see -1
    ([-1, 3, 8, 8], [], 17),                                   # a -1 batch defaults to 1, as a dim_param one
    (["N", 3, 8, 8], ["--input-shape", "x=1x3x8x8"], 17),      # a dim_param batch given explicitly
], ids=["minus_one_everywhere", "minus_one_opset12", "minus_one_batch", "dim_param"])
def test_non_positive_dims_are_dynamic(cli, tmp_path, dims, args, opset):
    out_dims = [dims[0], 4] + dims[2:]
    model = make_model(conv_nodes(), {"x": dims}, {"y": out_dims}, {"W": WEIGHTS}, opset=opset)
    result = cli(save(model, tmp_path / "m.onnx"), "-o", tmp_path / "out", "-q", *args)
    assert result.code == 0, result.err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    shape = [int(d) for d in args[1].split("=")[1].split("x")] if args else [1, 3, 8, 8]
    assert report["model"]["inputs"][0]["shape"] == shape


@pytest.mark.parametrize("dims,out_dims,where", [
    ([0, 3, 8, 8], [0, 4, 8, 8], "input 'x' has a zero-sized dimension (0x3x8x8)"),
    ([1, 3, 0, 8], [1, 4, 0, 8], "input 'x' has a zero-sized dimension (1x3x0x8)"),
    ([1, 3, 8, 8], [1, 4, 8, 0], "output 'y' has a zero-sized dimension (1x4x8x0)"),
], ids=["batch", "height", "output"])
def test_zero_sized_dims_are_one_error(cli, tmp_path, dims, out_dims, where):
    """A dimension of 0 is an empty tensor, not a dynamic one (that is a name or -1): refused, for every command."""
    model = make_model(conv_nodes(), {"x": dims}, {"y": out_dims}, {"W": WEIGHTS}, check=False)
    path = save(model, tmp_path / "m.onnx")
    assert_one_error(cli(path, "-o", tmp_path / "out"), 3, where, "empty tensor")
    assert not (tmp_path / "out").exists()
    assert_one_error(cli("inspect", path), 3, where)


def _external(tmp, payload=WEIGHTS.tobytes(), **entries):
    """The conv model with W in an external file; `entries` are its external_data keys (None: omitted)."""
    (tmp / "w.bin").write_bytes(payload)
    model = conv_model()
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in {"location": "w.bin", **entries}.items():
        if value is not None:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
    return save(model, tmp / "m.onnx")


@pytest.mark.parametrize("entries,fragment", [
    ({"location": "nope.bin"}, "missing or outside"),
    ({"location": "../w.bin"}, "missing or outside"),
    ({"offset": -4}, "outside the file"),
    ({"offset": 10**6}, "outside the file"),
    ({"length": 10**12}, "outside the file"),
    ({"offset": "12abc"}, "not integers"),
    ({"length": 400}, "need 432"),
], ids=["missing", "escapes_folder", "negative_offset", "offset_past_end", "length_past_end", "not_integer",
        "wrong_length"])
def test_bad_external_data(cli, tmp_path, entries, fragment):
    (tmp_path.parent / "w.bin").write_bytes(WEIGHTS.tobytes())  # what "../w.bin" would reach
    model = _external(tmp_path, **entries)
    assert_one_error(cli(model, "-o", tmp_path / "out"), 3, "initializer 'W'", fragment)
    assert leftovers(tmp_path, "out") == []


def test_good_external_data_matches_inline_weights(tmp_path):
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = o2g.compile(conv_model()).run({"x": x})["y"]
    with_range = o2g.compile(_external(tmp_path, offset=0, length=432)).run({"x": x})["y"]
    np.testing.assert_array_equal(with_range, want)
    # no length: the tensor's own size is read, not the rest of a longer file
    without_length = o2g.compile(_external(tmp_path, payload=WEIGHTS.tobytes() + b"\0" * 64)).run({"x": x})["y"]
    np.testing.assert_array_equal(without_length, want)


def test_external_data_counts_against_model_bytes(tmp_path):
    model = _external(tmp_path, payload=WEIGHTS.tobytes())
    size = model.stat().st_size
    with pytest.raises(o2g.ModelError, match="with its external data.*model_bytes"):
        o2g.compile(model, limits={"model_bytes": size + 100})
    assert o2g.compile(model, limits={"model_bytes": size + 432}).plan


def test_the_cli_compiles_past_the_activation_limit(cli, tmp_path):
    """What the load step used to refuse (all activations over the limit) compiles; one node over it does not."""
    assert cli("models/digits_cnn.onnx", "--calib", "models/digits_calib.npz", "--limit", "activation_bytes=40K", "-q", "-o", tmp_path / "a").code == 0
    result = cli("models/digits_cnn.onnx", "--limit", "activation_bytes=2K", "-o", tmp_path / "b")
    assert result.code == 3 and "activation_bytes" in result.err and "node" in result.err
