"""Range estimators: minmax, percentile, mse."""
import numpy as np
import pytest
from onnx import helper

from onnx2gemmini.quant.calibrate import calibrate
from onnx2gemmini.data import Dataset
from onnx2gemmini.errors import UsageError
from tests.helpers import infer_outputs


def identity_model():
    return infer_outputs([helper.make_node("Relu", ["x"], ["y"])], {"x": [1, 100_000]})


def data_with_outlier():
    x = np.random.default_rng(0).uniform(-1, 1, (4, 1, 100_000)).astype(np.float32)
    x[0, 0, 0] = 50.0
    return Dataset({"x": x}, None, "t")


def test_minmax_takes_the_outlier():
    assert calibrate(identity_model(), data_with_outlier(), "minmax")["x"] == pytest.approx(50.0)


@pytest.mark.parametrize("method,upper", [("percentile", 5.0), ("mse", 20.0)])
def test_robust_methods_clip_the_outlier(method, upper):
    # mse: 400k values in [-1, 1] plus one 50: rounding noise 2.07 t^2 vs clipping (50 - t)^2 -> t ~ 16.3
    amax = calibrate(identity_model(), data_with_outlier(), method)
    assert 0.5 < amax["x"] < upper
    assert amax["y"] <= calibrate(identity_model(), data_with_outlier(), "minmax")["y"]


def test_unknown_method():
    with pytest.raises(UsageError, match="calib-method"):
        calibrate(identity_model(), data_with_outlier(), "magic")


def conv_model():
    """Conv -> Relu -> Conv: ReLU zeros, a mean tensor, several outputs."""
    r = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "W1"], ["a"], pads=[1] * 4), helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "W2"], ["y"])]
    inits = {"W1": r.normal(size=(6, 3, 3, 3)).astype(np.float32), "W2": r.normal(size=(4, 6, 1, 1)).astype(np.float32)}
    return infer_outputs(nodes, {"x": [1, 3, 8, 8]}, inits)


def conv_data(n=6):
    return Dataset({"x": np.random.default_rng(3).normal(size=(n, 1, 3, 8, 8)).astype(np.float32)}, None, "t")


def run_float(model, data, tensors):
    """{tensor: float array} per sample, from a plain onnxruntime session."""
    from onnx2gemmini.ort_session import session
    sess = session(model, tensors)
    for i in range(data.num_samples):
        yield dict(zip(tensors, sess.run(tensors, data.sample(i))))


def plain_means(model, data, tensors):
    """Per-channel means along axis 1 and along the last axis, each sample's mean averaged over samples."""
    per = list(run_float(model, data, tensors))
    return {t: {"axis1": np.mean([v[t].astype(np.float64).mean(axis=tuple(a for a in range(v[t].ndim) if a != 1))
                                  for v in per], axis=0),
                "last": np.mean([v[t].astype(np.float64).reshape(-1, v[t].shape[-1]).mean(axis=0) for v in per],
                                axis=0)} for t in tensors}


def two_pass_reference(model, data, method):
    """The estimator as two plain passes (largest |x|, then np.histogram of every |x|), sample by sample."""
    from onnx2gemmini.quant.calibrate import float_tensors
    from onnx2gemmini.quant.estimators import BINS, threshold

    tensors = float_tensors(model)
    amax = {t: 0.0 for t in tensors}
    for values in run_float(model, data, tensors):
        for t, v in values.items():
            amax[t] = max(amax[t], float(np.max(np.abs(v))))
    hist = {t: np.zeros(BINS, np.int64) for t in tensors}
    zeros = {t: 0 for t in tensors}
    for values in run_float(model, data, tensors):
        for t, v in values.items():
            hist[t] += np.histogram(np.abs(v), bins=BINS, range=(0.0, amax[t]))[0]
            zeros[t] += int(np.count_nonzero(v == 0))
    return {t: threshold(method, hist[t], amax[t], zeros[t]) for t in tensors}


@pytest.mark.parametrize("method", ["percentile", "mse", "entropy"])
def test_one_pass_equals_two_plain_passes(method, monkeypatch):
    from onnx2gemmini.quant import calibrate as cal

    model, data = conv_model(), conv_data()
    expected = two_pass_reference(model, data, method)
    one = cal.statistics(model, data, method, threads=3)
    assert one.passes == 1 and one.amax == expected
    monkeypatch.setattr(cal, "KEEP_BYTES", 0)  # too little memory: the histograms take a second pass
    two = cal.statistics(model, data, method, threads=1)
    assert two.passes == 2 and two.amax == expected


def test_means_and_ranges_from_the_same_pass_do_not_depend_on_threads():
    from onnx2gemmini.quant.calibrate import statistics

    model, data = conv_model(), conv_data(9)
    runs = [statistics(model, data, "mse", ["a", "ar", "y"], ["x", "ar"], threads=n) for n in (1, 2, 4)]
    assert set(runs[0].amax) == {"a", "ar", "y"}
    for other in runs[1:]:
        assert other.amax == runs[0].amax
        for t in ("x", "ar"):
            for k in ("axis1", "last"):
                assert np.array_equal(other.means[t][k], runs[0].means[t][k])
    reference = plain_means(model, data, ["x", "ar"])
    for t in ("x", "ar"):
        for k in ("axis1", "last"):
            np.testing.assert_allclose(runs[0].means[t][k], reference[t][k], rtol=1e-12)


def pooled_or_summed(reader: str):
    """x -> PRelu -> r, read by a 2x2 MaxPool or by a 1x1 Conv (a weighted sum)."""
    nodes = [helper.make_node("PRelu", ["x", "slope"], ["r"])]
    nodes.append(helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]) if reader == "pool"
                 else helper.make_node("Conv", ["r", "W"], ["y"]))
    inits = {"slope": np.full((1, 1, 1), 0.25, np.float32), "W": np.ones((1, 1, 1, 1), np.float32)}
    return infer_outputs(nodes, {"x": [1, 1, 128, 128]}, inits)


def tail_in_many_samples(samples=10):
    """|x| with a Laplace tail in every sample: the few values mse clips as a tail of the histogram are in
    most samples (the level 80% of them reach: 2.34; mse's threshold: 2.04)."""
    x = np.random.default_rng(4).laplace(0, 0.2, (samples, 1, 1, 128, 128)).astype(np.float32)
    return Dataset({"x": np.abs(x)}, None, "t")


def one_sample_outlier(samples=10):
    x = np.random.default_rng(5).uniform(-1, 1, (samples, 1, 1, 128, 128)).astype(np.float32)
    x[0, 0, 0, 3, 7] = 50.0
    return Dataset({"x": x}, None, "t")


def test_a_max_pool_keeps_the_level_most_samples_reach():
    from onnx2gemmini.quant.calibrate import POOLED_SHARE, statistics
    data = tail_in_many_samples()
    tops = [float(np.abs(data.sample(i)["x"]).max()) for i in range(data.num_samples)]
    floor = float(np.quantile(tops, POOLED_SHARE))
    pooled = statistics(pooled_or_summed("pool"), data, "mse").amax
    summed = statistics(pooled_or_summed("sum"), data, "mse").amax
    assert summed["x"] == summed["r"] < 0.9 * floor  # mse alone clips what most samples reach; a sum's input
    for t in ("x", "r", "y"):  # the pool, what it reads, and through the PReLU the tensor before it
        assert pooled[t] == floor


def test_a_max_pool_still_lets_mse_clip_a_one_sample_outlier():
    from onnx2gemmini.quant.calibrate import statistics
    data = one_sample_outlier()
    pooled = statistics(pooled_or_summed("pool"), data, "mse").amax
    summed = statistics(pooled_or_summed("sum"), data, "mse").amax
    assert pooled["r"] == summed["r"] < 30.0  # clipped: the floor (about 1) does not bind
    assert statistics(pooled_or_summed("pool"), data, "minmax").amax["r"] == pytest.approx(50.0)


def test_the_floor_is_mses_only():
    """percentile is the 99.99th percentile whatever reads the tensor (output-aware judges the plain mse
    threshold among its candidates: estimators.candidates)."""
    from onnx2gemmini.quant.calibrate import POOLED_SHARE, statistics
    data = tail_in_many_samples()
    floor = float(np.quantile([float(data.sample(i)["x"].max()) for i in range(data.num_samples)], POOLED_SHARE))
    plain = {m: statistics(pooled_or_summed("sum"), data, m).amax["r"] for m in ("mse", "percentile", "minmax")}
    assert floor not in plain.values()
    assert plain["percentile"] < floor
    assert statistics(pooled_or_summed("pool"), data, "percentile").amax["r"] == plain["percentile"]


def test_a_pool_fused_into_its_conv_keeps_the_floor():
    """passes/fuse_maxpool.py moves Conv -> Relu -> MaxPool into one node, whose float model
    (golden.build_float) ends in Identity copies: the node's output is still a pool's output."""
    import onnx2gemmini as o2g
    from onnx2gemmini.quant.calibrate import POOLED_SHARE, pooled_tensors
    from onnx2gemmini.ort_session import session
    from onnx2gemmini.golden import build_float
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    model = infer_outputs(nodes, {"x": [1, 1, 128, 128]}, {"W": np.ones((2, 1, 1, 1), np.float32)})
    data = tail_in_many_samples()
    compiled = o2g.compile(model, calib=data, calib_method="mse", equalize=False,
                           bias_correction=False)
    (node,) = [n for n in compiled.graph.nodes if n.op_type == "Conv"]
    assert node.fused.pool is not None and node.outputs == ["y"]
    assert "y" in pooled_tensors(build_float(compiled.graph))
    sess = session(model, ["y"])
    tops = [float(np.abs(sess.run(["y"], data.sample(i))[0]).max()) for i in range(data.num_samples)]
    assert compiled.quant.amax["y"] == float(np.quantile(tops, POOLED_SHARE))
