"""onnx2gemmini: compile ONNX models to int8 code for the Gemmini systolic-array accelerator.

    import onnx2gemmini as o2g
    compiled = o2g.compile("model.onnx", calib="data.npz", config="default")
    compiled.write("out/")
    y = compiled.run({"x": x})
    report = o2g.diff("model.onnx", data="data.npz")
"""
from .compiler import Compiled, compile
from .errors import CheckFailed, DataError, ModelError, O2GError, OutputError, UnsupportedError, UsageError
from .version import __version__

__all__ = ["compile", "diff", "Compiled", "O2GError", "UsageError", "ModelError", "UnsupportedError",
           "DataError", "CheckFailed", "OutputError", "__version__"]


def diff(model, data=None, calib=None, config=None, input_shape=None, num_calib=None,
         calib_method: str = "mse", num_samples: int | None = None, equalize: bool = True,
         tiling: str = "search", bias_correction: bool = True,
         weight_scales: str = "tensor", limits=None) -> dict:
    """Compile `model` and compare it with onnxruntime over `data` (CONTRACTS.md `diff --json`).

    `limits` overrides size limits as in `compile` (e.g. {"data_samples": 10}); they apply to `data` too.
    """
    from . import limits as size_limits
    from .data import load_data, random_data
    from .compare import run_diff

    with size_limits.applied(limits):
        compiled = compile(model, calib=calib, config=config, input_shape=input_shape, num_calib=num_calib,
                           calib_method=calib_method, equalize=equalize, tiling=tiling,
                           bias_correction=bias_correction, weight_scales=weight_scales)
        inputs = compiled.graph.inputs
        if data is not None:
            dataset = load_data(data, inputs)
        elif calib is not None:
            dataset = load_data(calib, inputs)
        else:
            dataset = random_data(inputs, seed=1)
        return run_diff(compiled, dataset.head(num_samples))
