"""CPU kernels over sliding windows of an NHWC int8 tensor: im2col, max/average pooling, depthwise conv."""
from __future__ import annotations

from dataclasses import dataclass

from .. import kernels
from ..tolerance import Tolerance
from . import costs
from .abi import CCall, CFunction, Float, In, Int, Out, TensorArg, window_struct
from .table import CallSite, CpuKernel, Window, cpu_kernel

X, Y = ("x", In("int8_t")), ("y", Out("int8_t"))
NHWC = (("batches", Int()), ("rows", Int()), ("cols", Int()), ("channels", Int()))
WINDOW = ("w", window_struct())


def _windowed(function: CFunction, site: CallSite, window: Window, *extra) -> CCall:
    x = site.inputs[0]
    return CCall(function, (x.arg(), site.outputs[0].arg(), *x.shape, window.struct(), *extra))


def _window_parts(op: str, site: CallSite, window: Window):
    n, _, _, c = site.inputs[0].shape
    return costs.window_terms(op, n, c, window.kernel, window.out)


IM2COL = CFunction("o2g_im2col", (X, Y, *NHWC, WINDOW))


@cpu_kernel("im2col", IM2COL)
@dataclass(frozen=True)
class Im2col(CpuKernel):
    """[N*OH*OW][KH*KW*C] patches (columns ordered kh, kw, c like Gemmini's conv weights) for a conv
    Gemmini's conv cannot take, whose matmul then runs on Gemmini."""

    window: Window

    def run(self, inputs, out_shapes):
        w = self.window
        return [kernels.im2col(inputs[0], w.kernel, w.strides, w.pads, w.dilations, w.out)]

    def calls(self, site: CallSite):
        return [_windowed(IM2COL, site, self.window)]

    def cost_parts(self, site: CallSite):
        return [_window_parts("im2col", site, self.window)]


MAXPOOL = CFunction("o2g_maxpool", (X, Y, *NHWC, WINDOW))


@cpu_kernel("maxpool", MAXPOOL)
@dataclass(frozen=True)
class Maxpool(CpuKernel):
    """ONNX MaxPool (padded positions never win)."""

    window: Window

    def run(self, inputs, out_shapes):
        w = self.window
        return [kernels.maxpool(inputs[0], w.kernel, w.strides, w.pads, w.dilations, w.out)]

    def calls(self, site: CallSite):
        return [_windowed(MAXPOOL, site, self.window)]

    def cost_parts(self, site: CallSite):
        return [_window_parts("maxpool", site, self.window)]


AVGPOOL = CFunction("o2g_avgpool", (X, Y, *NHWC, WINDOW, ("count_include_pad", Int())))
AVGPOOL_MAX_WINDOW = 1 << 17  # o2g_avgpool's integer rounding equals float32 division below this


@cpu_kernel("avgpool", AVGPOOL)
@dataclass(frozen=True)
class Avgpool(CpuKernel):
    """ONNX AveragePool on int8: the int32 sum over the count, rounded half to even."""

    window: Window
    count_include_pad: int = 0

    def run(self, inputs, out_shapes):
        w = self.window
        return [kernels.avgpool(inputs[0], w.kernel, w.strides, w.pads, w.dilations, w.out, self.count_include_pad)]

    def calls(self, site: CallSite):
        kh, kw = self.window.kernel
        if kh * kw >= AVGPOOL_MAX_WINDOW:
            raise ValueError(f"average-pool window {kh}x{kw} too large for the exact int8 kernel "
                             f"(at most {AVGPOOL_MAX_WINDOW - 1} positions)")
        return [_windowed(AVGPOOL, site, self.window, self.count_include_pad)]

    def cost_parts(self, site: CallSite):
        return [_window_parts("avgpool", site, self.window)]

    def golden(self, site: CallSite) -> Tolerance:
        # onnxruntime averages in float (sum * (1/count)); the exact mean differs where sum/count is a tie
        # or within float error of one: ties are sum = count/2 mod count, at most 1/count of the values.
        kh, kw = self.window.kernel
        return Tolerance(1, min(1.0, 2.0 / (kh * kw)), "average rounding: ties and float division")


DWCONV = CFunction("o2g_dwconv", (X, ("weights", In("int8_t")), ("bias", In("int32_t")), Y, *NHWC, WINDOW,
                                  ("multiplier", Int()), ("scale", Float()), ("relu", Int())))


@cpu_kernel("dwconv", DWCONV)
@dataclass(frozen=True)
class Dwconv(CpuKernel):
    """An exact int8 depthwise conv (weights [KH][KW][C*multiplier], int32 bias) with Gemmini's
    requantization, for depthwise convs Gemmini's tiled_conv_dw cannot take or would run slower."""

    window: Window
    multiplier: int
    scale: float
    relu: bool

    def run(self, inputs, out_shapes):
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        win = self.window
        return [kernels.depthwise_conv(x, w, bias, win.kernel, win.strides, win.pads, win.dilations, win.out,
                                       self.multiplier, self.scale, self.relu)]

    def calls(self, site: CallSite):
        x, w, y = site.inputs[0], site.inputs[1], site.outputs[0]
        bias = site.inputs[2].arg() if len(site.inputs) > 2 else TensorArg(None, (w.shape[-1],), "int32")
        return [CCall(DWCONV, (x.arg(), w.arg(), bias, y.arg(), *x.shape, self.window.struct(), self.multiplier,
                               self.scale, int(self.relu)))]

    def cost_parts(self, site: CallSite):
        n, h, w, c = site.inputs[0].shape
        win = self.window
        return [costs.dwconv_terms(n, h, w, c, self.multiplier, win.kernel, win.strides, win.pads, win.dilations,
                                   win.out)]
