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
