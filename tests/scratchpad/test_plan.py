"""A plan run with its Gemmini steps at address level: the MNIST-style first layer (quantize and output
transpose on the CPU, conv + ReLU + max-pool on Gemmini) shows the hazard under the functional model's
semantics and gives the emulator's bytes under the RTL's."""
from __future__ import annotations

import numpy as np

from onnx2gemmini.config import PRESETS
from onnx2gemmini import cpu
from onnx2gemmini.plan import Conv, CpuOp, Plan, Tensor
from onnx2gemmini.run.emulator import Emulator
from onnx2gemmini.scratchpad import PlanRunner, find_hazards


def mnist_plan() -> Plan:
    rng = np.random.default_rng(0)
    conv = Conv("conv", batch_size=1, in_row_dim=28, in_col_dim=28, in_channels=1, out_channels=32,
                out_row_dim=28, out_col_dim=28, padding=1, kernel_dim=3, input="x", weights="w", bias="b",
                output="y", act=1, scale=0.003, pool_size=2, pool_stride=2)
    tensors = {t.id: t for t in (
        Tensor("x_f32", "x", (1, 1, 28, 28), "float32", kind="input"),
        Tensor("x", "x", (1, 28, 28, 1), layout="NHWC", scale=0.008),
        Tensor("y", "y", (1, 14, 14, 32), layout="NHWC", scale=0.02),
        Tensor("y_out", "y", (1, 32, 14, 14), scale=0.02, kind="output"))}
    constants = {"w": rng.integers(-128, 128, (9, 32), dtype=np.int8),
                 "b": rng.integers(-3000, 3000, 32).astype(np.int32)}
    steps = (CpuOp("quantize", inputs=("x_f32",), outputs=("x",), params=cpu.Quantize(0.008, True)), conv,
             CpuOp("out", inputs=("y",), outputs=("y_out",), params=cpu.Transpose((0, 3, 1, 2))))
    return Plan("mnist", "0" * 64, 17, PRESETS["default"], tensors, constants, steps, ("x_f32",), ("y_out",))


def test_plan_runner():
    plan = mnist_plan()
    conv = plan.steps[1]
    feeds = {"x": np.random.default_rng(1).uniform(-1, 1, (1, 1, 28, 28)).astype(np.float32)}
    expected = Emulator(plan).run(feeds)["y_out"]

    spike = PlanRunner(plan, "spike")
    out = spike.run(feeds)["y_out"]
    assert spike.hazards == {"conv": find_hazards(conv, plan.config)} and spike.hazards["conv"]
    assert set(np.nonzero(out != expected)[1]) == {1, 2}            # NCHW: output channels 1 and 2

    rtl = PlanRunner(plan, "rtl")
    assert np.array_equal(rtl.run(feeds)["y_out"], expected) and rtl.hazards == {}


def test_full_width_matmul_at_address_level():
    """An LSTM's input projection keeps its int32 accumulators (full_C): at address level, mvouts with the
    full-width bit write the raw accumulators, tile by tile, exactly as the emulator's whole-call result."""
    import onnx2gemmini as o2g
    from onnx2gemmini.plan import Matmul
    from tests.helpers import random_dataset
    from tests.ops.test_recurrent import rnn_model

    model = rnn_model(seq=24, batch=3, size=40, hidden=32, direction="bidirectional")
    data = random_dataset(model, 4, 0)
    plan = o2g.compile(model, calib=data).plan
    projection = [s for s in plan.steps if isinstance(s, Matmul)]
    assert len(projection) == 1 and projection[0].full_C and plan.tensors[projection[0].C].dtype == "int32"
    assert projection[0].J > plan.config.dim and projection[0].I > plan.config.dim  # several output tiles
    feeds = data.sample(0)
    emulated = Emulator(plan).run(feeds, keep=True)
    runner = PlanRunner(plan, "rtl")
    ran = runner.run(feeds, keep=True)
    assert np.array_equal(ran[projection[0].C], emulated[projection[0].C])
    assert np.abs(emulated[projection[0].C]).max() > 127  # beyond int8: really the accumulators
    for tid in plan.outputs:
        assert np.array_equal(ran[tid], emulated[tid])
