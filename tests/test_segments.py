"""A model whose activations exceed `activation_bytes` runs in pieces (segments.py): the same values, the same
compile and diff, less memory held."""
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini import segments
from onnx2gemmini.errors import ModelError, UsageError
from onnx2gemmini.metrics import blocks
from onnx2gemmini.quant.calibrate import float_tensors
from onnx2gemmini.run.emulator import Emulator
from onnx2gemmini.segments import Pieces, Taker
from tests.helpers import infer_outputs, random_dataset, rng

BUNDLED = "models/digits_cnn.onnx"
CALIB = "models/digits_calib.npz"


def residual_model():
    """conv -> relu -> conv -> + skip -> relu -> conv: a value (the skip) lives across pieces."""
    r = rng(4)
    nodes = [helper.make_node("Conv", ["x", "W0"], ["a"], pads=[1] * 4, name="c0"),
             helper.make_node("Relu", ["a"], ["ar"], name="r0"),
             helper.make_node("Conv", ["ar", "W1"], ["b"], pads=[1] * 4, name="c1"),
             helper.make_node("Relu", ["b"], ["br"], name="r1"),
             helper.make_node("Conv", ["br", "W2"], ["c"], pads=[1] * 4, name="c2"),
             helper.make_node("Add", ["c", "ar"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["sr"], name="r2"),
             helper.make_node("Conv", ["sr", "W3"], ["y"], name="c3")]
    weights = {"W0": r.normal(size=(8, 3, 3, 3)), "W1": r.normal(size=(8, 8, 3, 3)) / 4,
               "W2": r.normal(size=(8, 8, 3, 3)) / 4, "W3": r.normal(size=(4, 8, 1, 1))}
    return infer_outputs(nodes, {"x": [1, 3, 16, 16]}, {k: v.astype(np.float32) for k, v in weights.items()})




def test_pieces_give_the_whole_models_values_bit_for_bit():
    model = residual_model()
    every = float_tensors(model)
    whole = Pieces(model, every)
    budget = segments.activation_bytes(model) * 4 // 5
    pieces = Pieces(model, every, budget)
    assert whole.whole and len(pieces.pieces) >= 3
    assert all(segments.HANDOVER * p.nbytes <= budget for p in pieces.pieces)
    fitting = segments.HANDOVER * segments.activation_bytes(model)
    assert not Pieces(model, every, fitting).pieces[1:]  # what fits is one piece
    assert any("ar" in p.inputs for p in pieces.pieces[1:])  # the skip is carried to a later piece
    sample = random_dataset(model).sample(0)
    expected = dict(zip(every, whole.run(every, sample)))
    streamed = {}
    for values in pieces.stream(sample):
        assert not set(values) & set(streamed)  # each value once
        streamed.update(values)
    assert set(streamed) == set(every)
    for name in every:
        np.testing.assert_array_equal(streamed[name], expected[name], err_msg=name)
    np.testing.assert_array_equal(pieces.run(["y"], sample)[0], expected["y"])


def test_the_piece_sizes_are_the_values_they_hold():
    """A piece's nbytes (from the inferred shapes) is what it is fed plus what it computes, measured."""
    model = residual_model()
    pieces = Pieces(model, float_tensors(model), segments.activation_bytes(model) * 4 // 5)
    sample = random_dataset(model).sample(0)
    carried = dict(sample)
    for piece in pieces.pieces:
        fed = sum(carried[i].nbytes for i in piece.inputs)
        values = dict(zip(piece.outputs, piece.sess.run(piece.outputs, {i: carried[i] for i in piece.inputs})))
        computed = sum(v.nbytes for v in values.values())
        assert piece.nbytes >= fed + computed
        carried.update(values)


def test_taker_hands_values_in_any_order_once():
    model = residual_model()
    pieces = Pieces(model, ["b", "s", "ar"], segments.activation_bytes(model) * 4 // 5)
    taker = Taker(pieces, random_dataset(model).sample(0))
    assert taker.take("s").shape == (1, 8, 16, 16)
    assert taker.take("ar").shape == (1, 8, 16, 16)  # computed earlier, kept until taken
    assert taker.take("b").shape == (1, 8, 16, 16)
    with pytest.raises(KeyError):
        taker.take("s")


def test_a_node_over_the_budget_is_refused_by_name():
    model = residual_model()
    with pytest.raises(ModelError, match=r"node 'c0' \(Conv\).*activation_bytes"):
        Pieces(model, float_tensors(model), 4096)


def test_a_compile_in_pieces_is_the_same_compile(tmp_path, monkeypatch):
    """The bundled model with activation_bytes below its activations: calibration, the report's per-layer
    SQNR and diff run in pieces and give byte-identical artifacts and the same diff."""
    cut = []
    real = segments.Pieces.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        cut.append(len(self.pieces))
    monkeypatch.setattr(segments.Pieces, "__init__", spy)
    whole = o2g.compile(BUNDLED, calib=CALIB)
    a = whole.write(tmp_path / "a")
    assert cut and max(cut) == 1
    cut.clear()
    small = {"activation_bytes": "40K"}
    pieces = o2g.compile(BUNDLED, calib=CALIB, limits=small)
    b = pieces.write(tmp_path / "b")
    assert len(cut) == 2 and min(cut) > 2  # calibration and the report's SQNR ran in pieces
    changed = subprocess.run(["diff", "-r", "-q", "-x", "report.*", str(a), str(b)], capture_output=True, text=True)
    assert changed.stdout == ""
    for report in ("report.json", "report.md"):
        keep = lambda text: [line for line in text.splitlines() if "_s\"" not in line and "compile time" not in line]  # noqa: E731
        assert keep((a / report).read_text()) == keep((b / report).read_text())
    cut.clear()
    one, two = o2g.diff(whole, CALIB), o2g.diff(pieces, CALIB, limits=small)
    assert cut == [1, cut[1]] and cut[1] > 2
    assert one["layers"] == two["layers"] and one["verdict"] == two["verdict"] and two["verdict"]["passed"]


def test_emulator_drops_what_nothing_reads_again():
    compiled = o2g.compile(residual_model(), calib=random_dataset(residual_model(), 4))
    plan = compiled.plan
    emulator = Emulator(plan)
    sample = random_dataset(residual_model(), 1, seed=7).sample(0)
    everything = emulator.run(sample, keep=True)
    alive = []
    out = emulator.run(sample, visit=lambda k, buffers: alive.append(set(buffers)))
    for tid in plan.outputs:
        np.testing.assert_array_equal(out[tid], emulator.get(everything, tid))
    assert max(len(a) for a in alive) < len(everything)
    first = plan.base(plan.steps[0].writes()[0]).id
    dropped = next(k for k, a in enumerate(alive[1:], 1) if first not in a)
    held = []
    emulator.run(sample, visit=lambda k, buffers: held.append(first in buffers), hold={first: dropped + 1})
    assert all(held[:dropped + 2])  # still there at the step it is held to


def test_output_aware_ranges_are_refused_in_pieces():
    """`--calib-method output` holds every activation of its samples at once: one error, not a swapping machine."""
    with pytest.raises(UsageError, match="--calib-method output.*activation_bytes"):
        o2g.compile(BUNDLED, calib=CALIB, calib_method="output", limits={"activation_bytes": "40K"})
    assert o2g.compile(BUNDLED, calib=CALIB, calib_method="output").plan


@pytest.mark.parametrize("how", ["run", "stream", "take"])
def test_a_piece_runs_holding_only_what_it_reads(monkeypatch, how):
    """When a piece starts, the values of earlier pieces still alive are at most the ones it or later pieces
    read (and, for stream and take, nothing the reader has let go of): memory stays one piece deep."""
    import weakref
    model = residual_model()
    pieces = Pieces(model, float_tensors(model), segments.activation_bytes(model) * 4 // 5)
    alive: dict[int, int] = {}
    held_at_start = []
    real = segments.ort_run

    def tracked(sess, names, feed):
        held_at_start.append(sum(alive.values()))
        out = real(sess, names, feed)
        for value in out:
            alive[id(value)] = value.nbytes
            weakref.finalize(value, alive.pop, id(value), None)
        return out
    monkeypatch.setattr(segments, "ort_run", tracked)
    sample = random_dataset(model).sample(0)
    if how == "run":
        pieces.run(["y"], sample)
    elif how == "stream":
        for values in pieces.stream(sample):
            del values
    else:
        taker = Taker(pieces, sample)
        for name in float_tensors(model):
            taker.take(name)
    sizes = segments._sizes(segments._value_infos(model))
    live = []  # per piece: the bytes of earlier pieces' values that it or a later piece reads
    for k in range(len(pieces.pieces)):
        made = {o for p in pieces.pieces[:k] for o in p.outputs}
        read = {i for p in pieces.pieces[k:] for i in p.inputs}
        live.append(sum(sizes[t] for t in made & read))
    assert len(held_at_start) == len(pieces.pieces) and max(live) > 0
    assert all(held <= need for held, need in zip(held_at_start, live)), (held_at_start, live)


def test_a_check_is_due_when_its_bytes_are_written_and_holds_what_it_reads():
    plan = o2g.compile(residual_model(), calib=random_dataset(residual_model(), 4)).plan
    emulator = Emulator(plan)
    written = {w: k for k, step in enumerate(plan.steps) for w in step.writes() if plan.tensors[w].slice_of is None
               and plan.tensors[w].view_of is None}
    last = max(written, key=written.get)
    first_input = plan.inputs[0]
    due, hold = emulator.checkpoints([[last, first_input], [first_input]])
    assert written[last] > 0 and due == {written[last]: [0], 0: [1]}
    assert hold[first_input] == written[last]  # read by the late check: held until it is due


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=4), st.integers(1, 60))
def test_blocks_cover_every_value_once_within_the_limit(shape, limit):
    shape = tuple(shape)
    seen = np.zeros(shape, np.int32)
    for ix in blocks(shape, limit):
        assert seen[ix].size <= limit
        seen[ix] += 1
    assert (seen == 1).all()


def test_large_layers_are_compared_block_by_block_with_the_same_result(monkeypatch):
    """diff's per-layer comparison and the report's per-layer SQNR cut a layer into blocks (a transformer's
    attention scores would otherwise need GB of float64 temporaries): the counts are the same and the sums
    the same up to float64 rounding, with blocks of a few values as with one block per layer."""
    from onnx2gemmini import compare, metrics, quality
    model = residual_model()
    compiled = o2g.compile(model, calib=random_dataset(model, 4))
    data = random_dataset(model, 2, seed=9)
    whole = o2g.diff(compiled, data)
    report = quality.from_calibration(compiled, data)
    cut = []

    def small(shape):
        cut.append(shape)
        return metrics.blocks(shape, 7)
    monkeypatch.setattr(compare, "blocks", small)
    monkeypatch.setattr(quality, "blocks", small)
    blockwise = o2g.diff(compiled, data)
    assert cut and all(np.prod(shape) > 7 for shape in cut)
    assert any(layer["op"] == "Add" for layer in whole["layers"])  # a resadd's explained mismatches too
    for a, b in zip(whole["layers"], blockwise["layers"]):
        assert a.keys() == b.keys()
        for key, value in a.items():
            assert b[key] == (pytest.approx(value, rel=1e-9) if isinstance(value, float) else value), key
    assert whole["verdict"] == blockwise["verdict"]
    cut.clear()
    for a, b in zip(report["layers"], quality.from_calibration(compiled, data)["layers"]):
        assert b["sqnr_db"] == pytest.approx(a["sqnr_db"], rel=1e-9)
    assert cut


def test_a_diff_over_the_limit_runs_in_one_process_by_default(monkeypatch):
    """Each process checking a model in pieces fills the activation limit: by default diff runs one."""
    from onnx2gemmini import compare
    asked = []
    real = compare.map_ordered

    def spy(setup, payload, items, workers, *args, **kwargs):
        asked.append(workers)
        return real(setup, payload, items, 1, *args, **kwargs)
    monkeypatch.setattr(compare, "map_ordered", spy)
    monkeypatch.setattr(compare, "MACS_PER_WORKER", 1)
    compiled = o2g.compile(BUNDLED, calib=CALIB)
    o2g.diff(compiled, CALIB, workers=None)
    o2g.diff(compiled, CALIB, workers=None, limits={"activation_bytes": "40K"})
    o2g.diff(compiled, CALIB, workers=2, limits={"activation_bytes": "40K"})
    assert asked == [None, 1, 2]
