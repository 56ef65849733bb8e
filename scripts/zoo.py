"""The architectures users bring, built locally with random weights (nothing downloaded): torchvision's
classification models and the backbones of its detection and segmentation models, timm's families, and a
YOLOv8-style detector. Shared by tests/test_zoo.py (one small member per family) and
scripts/zoo_coverage.py (the whole sweep).

torchvision's PyPI wheels are built against PyPI's CUDA torch; with the CPU torch its C++ operators
(nms, roi_align, ...) do not load, and `import torchvision` fails while registering a fake kernel for
`nms`. The model definitions are plain Python and need none of those operators, so `torchvision_models()`
declares the two operator schemas that import needs when the extension is missing.
"""
from __future__ import annotations

import importlib.util
import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np


def _torch():
    import torch
    return torch


def torchvision_models():
    """torchvision.models, importable with the CPU torch (see the module docstring)."""
    torch = _torch()
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        raise ImportError("torchvision is not installed (pip install -e '.[test]')")
    extension = next(Path(spec.origin).parent.glob("_C*.so"), None)
    try:
        if extension is not None:
            torch.ops.load_library(str(extension))
        loaded = hasattr(torch.ops.torchvision, "nms")
    except (OSError, RuntimeError):
        loaded = False
    if not loaded and not getattr(torchvision_models, "_declared", False):
        library = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        torchvision_models._declared = library  # keep the registration alive
    import torchvision.models
    return torchvision.models


@dataclass(frozen=True)
class Arch:
    """One architecture: how to build it (a torch.nn.Module) and the input it is exported with."""

    name: str
    family: str
    build: Callable
    shape: tuple[int, ...]


def _tv(name: str, family: str, size: int = 64, **kwargs) -> Arch:
    def build():
        return getattr(torchvision_models(), name)(weights=None, **kwargs)
    return Arch(name, family, build, (1, 3, size, size))


def _tv_backbone(name: str, family: str, size: int = 64) -> Arch:
    """The backbone of a detection or segmentation model (what runs on the accelerator; heads with NMS stay
    on the host, as users expect)."""
    def build():
        torch = _torch()
        models = torchvision_models()
        if family == "segmentation":
            model = getattr(models.segmentation, name)(weights=None, weights_backbone=None, aux_loss=False)

            class Segment(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.model = model

                def forward(self, x):
                    return self.model(x)["out"]
            return Segment()
        detector = getattr(models.detection, name)(weights=None, weights_backbone=None)

        class Backbone(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.body = detector.backbone

            def forward(self, x):
                return tuple(self.body(x).values())
        return Backbone()
    return Arch(name, family, build, (1, 3, size, size))


def torchvision_families() -> list[Arch]:
    """The smallest member of every torchvision classification family, and detection/segmentation backbones."""
    return [
        _tv("alexnet", "alexnet", 224), _tv("convnext_tiny", "convnext", 64), _tv("densenet121", "densenet", 64),
        _tv("efficientnet_b0", "efficientnet", 64), _tv("efficientnet_v2_s", "efficientnet_v2", 64),
        _tv("googlenet", "googlenet", 64, aux_logits=False, init_weights=True),
        _tv("inception_v3", "inception", 96, aux_logits=False, init_weights=True),
        _tv("maxvit_t", "maxvit", 224), _tv("mnasnet0_5", "mnasnet", 64), _tv("mobilenet_v2", "mobilenet_v2", 64),
        _tv("mobilenet_v3_small", "mobilenet_v3", 64), _tv("regnet_x_400mf", "regnet", 64),
        _tv("resnet18", "resnet", 64), _tv("resnext50_32x4d", "resnext", 64),
        _tv("shufflenet_v2_x0_5", "shufflenet_v2", 64), _tv("squeezenet1_1", "squeezenet", 64),
        _tv("swin_t", "swin", 64), _tv("swin_v2_t", "swin_v2", 64), _tv("vgg11", "vgg", 224),
        _tv("vit_b_16", "vit", 32, image_size=32), _tv("wide_resnet50_2", "wide_resnet", 64),
        _tv_backbone("fasterrcnn_mobilenet_v3_large_fpn", "detection", 128),
        _tv_backbone("retinanet_resnet50_fpn", "detection", 128),
        _tv_backbone("lraspp_mobilenet_v3_large", "segmentation", 64),
        _tv_backbone("deeplabv3_mobilenet_v3_large", "segmentation", 64),
        _tv_backbone("fcn_resnet50", "segmentation", 64),
    ]


def _yolov8_style(decoded: bool = False, size: int = 64):
    """A YOLOv8n-style single-stage detector (width 1/16): Conv-BN-SiLU blocks, C2f blocks (Split, a chain of
    bottlenecks, Concat), SPPF (three 5x5 max-pools), a top-down/bottom-up neck with nearest upsampling,
    and decoupled heads whose box branch ends in DFL (softmax over 16 bins times their index). NMS stays
    outside the model. `decoded`: the head as ultralytics exports it, one output [n, 4 + classes, anchors]
    joining decoded boxes in pixels (centre x, y, width, height: 0..size) and class scores (0..1); otherwise
    two outputs, the DFL box distances and the scores."""
    torch = _torch()
    nn = torch.nn

    class ConvBnSilu(nn.Sequential):
        def __init__(self, c_in, c_out, k=1, s=1):
            super().__init__(nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False), nn.BatchNorm2d(c_out), nn.SiLU())

    class Bottleneck(nn.Module):
        def __init__(self, c, shortcut=True):
            super().__init__()
            self.cv1, self.cv2, self.add = ConvBnSilu(c, c, 3), ConvBnSilu(c, c, 3), shortcut

        def forward(self, x):
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C2f(nn.Module):
        def __init__(self, c_in, c_out, n=1, shortcut=True):
            super().__init__()
            self.c = c_out // 2
            self.cv1 = ConvBnSilu(c_in, 2 * self.c)
            self.cv2 = ConvBnSilu((2 + n) * self.c, c_out)
            self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

        def forward(self, x):
            y = list(self.cv1(x).split((self.c, self.c), 1))
            y.extend(m(y[-1]) for m in self.m)
            return self.cv2(torch.cat(y, 1))

    class Sppf(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.cv1, self.cv2 = ConvBnSilu(c, c // 2), ConvBnSilu(c * 2, c)
            self.m = nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            x = self.cv1(x)
            y1 = self.m(x)
            y2 = self.m(y1)
            return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))

    class Dfl(nn.Module):
        def __init__(self, bins=16):
            super().__init__()
            self.bins = bins
            self.register_buffer("index", torch.arange(bins, dtype=torch.float32).view(1, bins, 1, 1))

        def forward(self, x):  # [n, 4*bins, a] -> [n, 4, a]: the expected bin of each box side
            n, _, a = x.shape
            p = x.view(n, 4, self.bins, a).transpose(2, 1).softmax(1)
            return (p * self.index.view(1, self.bins, 1, 1)).sum(1)

    class Detector(nn.Module):
        def __init__(self, w=(8, 16, 32, 64), classes=4, bins=16):
            super().__init__()
            self.stem = nn.Sequential(ConvBnSilu(3, w[0], 3, 2), ConvBnSilu(w[0], w[1], 3, 2), C2f(w[1], w[1]))
            self.p3 = nn.Sequential(ConvBnSilu(w[1], w[2], 3, 2), C2f(w[2], w[2]))
            self.p4 = nn.Sequential(ConvBnSilu(w[2], w[3], 3, 2), C2f(w[3], w[3]), Sppf(w[3]))
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.top = C2f(w[3] + w[2], w[2], shortcut=False)
            self.down = ConvBnSilu(w[2], w[2], 3, 2)
            self.bottom = C2f(w[2] + w[3], w[3], shortcut=False)
            self.box = nn.ModuleList(nn.Sequential(ConvBnSilu(c, 16, 3), nn.Conv2d(16, 4 * bins, 1)) for c in w[2:])
            self.cls = nn.ModuleList(nn.Sequential(ConvBnSilu(c, 16, 3), nn.Conv2d(16, classes, 1)) for c in w[2:])
            self.dfl, self.bins = Dfl(bins), bins

            if decoded:  # anchor centres and strides of the two levels (strides 8 and 16), in pixels
                points, strides = [], []
                for stride in (8, 16):
                    cells = size // stride
                    ys, xs = np.meshgrid(np.arange(cells) + 0.5, np.arange(cells) + 0.5, indexing="ij")
                    points.append(np.stack((xs.ravel(), ys.ravel())))
                    strides.append(np.full(cells * cells, float(stride)))
                self.register_buffer("anchors", torch.tensor(np.concatenate(points, 1)[None], dtype=torch.float32))
                self.register_buffer("strides", torch.tensor(np.concatenate(strides)[None, None], dtype=torch.float32))

        def forward(self, x):
            p3 = self.p3(self.stem(x))
            p4 = self.p4(p3)
            n3 = self.top(torch.cat((self.up(p4), p3), 1))
            n4 = self.bottom(torch.cat((self.down(n3), p4), 1))
            boxes, scores = [], []
            for level, (box, cls) in zip((n3, n4), zip(self.box, self.cls)):
                boxes.append(box(level).flatten(2))
                scores.append(cls(level).flatten(2))
            distances, scores = self.dfl(torch.cat(boxes, 2)), torch.cat(scores, 2).sigmoid()
            if not decoded:
                return distances, scores
            left_top, right_bottom = distances.chunk(2, 1)  # ultralytics' dist2bbox(xywh=True) times the strides
            x1y1, x2y2 = self.anchors - left_top, self.anchors + right_bottom
            boxes = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * self.strides
            return torch.cat((boxes, scores), 1)

    return Detector()


def detectors() -> list[Arch]:
    return [Arch("yolov8_style", "yolo", _yolov8_style, (1, 3, 64, 64)),
            Arch("yolov8_decoded", "yolo", lambda: _yolov8_style(decoded=True), (1, 3, 64, 64))]


def export(arch: Arch, path: Path, seed: int = 0) -> Path:
    """torch.onnx.export at opset 17 with random weights and non-trivial BatchNorm statistics."""
    torch = _torch()
    torch.manual_seed(seed)
    torch.backends.mha.set_fastpath_enabled(False)  # the fused attention kernel has no ONNX export
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = arch.build().eval()
        with torch.no_grad():
            for m in module.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.2, 0.2)
                    m.running_var.uniform_(0.5, 1.5)
            buffer = io.BytesIO()
            torch.onnx.export(module, (torch.randn(*arch.shape),), buffer, dynamo=False, opset_version=17,
                              input_names=["x"])
    path.write_bytes(buffer.getvalue())
    return path


def calibration(arch: Arch, samples: int, seed: int) -> np.ndarray:
    """Smooth synthetic images (a sum of random low-frequency waves): closer to real inputs than noise."""
    rng = np.random.default_rng(seed)
    n, c, h, w = arch.shape
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    images = np.zeros((samples, n, c, h, w), np.float32)
    for _ in range(4):
        fy, fx, phase = rng.uniform(0.5, 4, (3, samples, 1, c, 1, 1))
        images += np.sin(2 * np.pi * (fy * yy + fx * xx) + 6.28 * phase).astype(np.float32)
    return images / 2
