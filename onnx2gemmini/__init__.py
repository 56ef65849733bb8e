"""onnx2gemmini: compile ONNX models to int8 code for the Gemmini systolic-array accelerator.

    import onnx2gemmini as o2g
    compiled = o2g.compile("model.onnx", calib="data.npz", config="default")
    compiled.write("out/")
    y = compiled.run({"x": x})
    report = o2g.diff("model.onnx", data="data.npz")

A torch.nn.Module compiles too: o2g.compile(module, example_inputs=(x,), calib=...). docs/api.md has the
whole API.
"""
from .compiler import DEFAULT_WEIGHT_SCALES, Compiled, check_count, compile
from .errors import CheckFailed, DataError, ModelError, O2GError, OutputError, UnsupportedError, UsageError
from .results import DiffResult
from .version import __version__

__all__ = ["compile", "diff", "Compiled", "DiffResult", "O2GError", "UsageError", "ModelError",
           "UnsupportedError", "DataError", "CheckFailed", "OutputError", "__version__"]


def diff(model, data=None, calib=None, config=None, input_shape=None, num_calib=None,
         calib_method: str = "auto", num_samples: int | None = None, equalize: bool = True,
         tiling: str = "search", bias_correction: bool = True,
         weight_scales: str = DEFAULT_WEIGHT_SCALES, limits=None, example_inputs=None, workers: int | None = 1,
         ray: str | None = None, progress=None, atol=None, rtol=None, load_outputs=None,
         save_outputs=None, sensitivity: bool = False, keep_float=None, adaround: bool = False,
         batch_size: int | None = None, min_sqnr=None, min_cosine=None, min_top1=None,
         reference: bool = False, input_values=None, states=None) -> DiffResult:
    """Compile `model` and compare it with onnxruntime over `data` (CONTRACTS.md `diff --json`).

    `model` is what `compile` takes, or an already `Compiled` model (then the compile options are not
    used: it is compared as it was compiled). `data` defaults to `calib`; both take the same forms as
    `compile`'s `calib`. `limits` overrides size limits as in `compile` (e.g. {"data_samples": 10}); they
    apply to `data` too. Pass the result to `compiled.write(OUT, diff=...)` to put it in the reports.
    `workers` local processes (None: every core; one for a model over the `activation_bytes` limit) or Ray
    actors (`ray`: a cluster address or "auto") compare the samples, with the same result for any number;
    `progress(n, total)` is called as n more are done. `batch_size` samples are emulated together (default:
    up to 8, fewer for a model whose float values would pass the `activation_bytes` limit), with the same
    result for any batch size.
    Polygraphy-style checks: `atol`/`rtol` (a number, or {output: number}) check every output value
    elementwise, |ref - int8| <= atol + rtol*|ref|, against `load_outputs` (a file `save_outputs` wrote in
    an earlier diff; without a tolerance the check is exact) or else against fp32; a value outside fails.
    `sensitivity`: also quantize one layer at a time (the rest fp32) and list the layers by the output SQNR
    they cost, most costly first, under "sensitivity" (sensitivity.py).
    `keep_float`: as in `compile`, layers run in float on the CPU (pass the costliest of a sensitivity run).
    `adaround`: as in `compile`, weights rounded by their layer's output error.
    Fidelity to the user's original model (fidelity.py; `fidelity` in the result): each output is judged by
    its kind's figure against a floor; `min_sqnr`, `min_cosine`, `min_top1` change the floors (a number for
    every output, or {output: number or None}; None drops that floor). Below one, `verdict["accurate"]` is
    False and the verdict fails; so it does when an int8 weight is further from its float weight than its
    rounding allows (weight_check.py: a bug the golden would share). `reference`: also quantize the original
    model with onnxruntime's own quantizer, our activation scales given (reference.py), and report its figures.
    `input_values`: as in `compile`, inputs frozen to constants; the original model is fed the same values.
    `states`: as in `compile`, a streaming model's outputs fed back as inputs (a Compiled model brings its
    own): `data` is then one stream of consecutive steps. Two streams are carried side by side (stream.py):
    the int8 program's own, each step checked bit for bit against the golden on its inputs, and the original
    model's own fp32 stream, which fidelity is judged against (the accumulated drift).
    """
    from . import limits as size_limits
    from . import torch_export
    from .data import load_data, random_data
    from .compare import OutputChecks, check_save_path, load_outputs as load_saved, parse_tolerances, run_diff
    from .fidelity import parse_floors
    import onnx
    from . import stream

    check_count("--num-samples", num_samples)
    check_count("--batch-size", batch_size)
    with size_limits.applied(limits):
        if isinstance(model, Compiled):
            compiled = model
        else:
            compiled = compile(model, calib=calib, config=config, input_shape=input_shape, num_calib=num_calib,
                               calib_method=calib_method, equalize=equalize, tiling=tiling,
                               bias_correction=bias_correction, weight_scales=weight_scales,
                               example_inputs=example_inputs, keep_float=keep_float, adaround=adaround,
                               input_values=input_values, states=states)
        pairs = compiled.states
        inputs = [i for i in compiled.graph.inputs if i.name not in stream.state_inputs(pairs)]
        data, calib = torch_export.as_data(data), torch_export.as_data(calib)
        if data is not None:
            dataset = load_data(data, inputs)
        elif calib is not None:
            dataset = load_data(calib, inputs)
        else:
            dataset = random_data(inputs, seed=1)
        original_stream = None
        if pairs:  # the int8 stream carried by the emulator, the original's fp32 stream by onnxruntime
            shapes = {i.name: i.shape for i in compiled.graph.inputs}
            dataset = stream.filled(dataset.head(num_samples), compiled.run, pairs, shapes)[0]
            if compiled.loaded.original:
                original = onnx.ModelProto.FromString(compiled.loaded.original)
                original_stream = stream.filled(dataset, stream.onnx_step(original, compiled.loaded.input_values),
                                                pairs, shapes)[1]
        names = [o.name for o in compiled.graph.outputs]
        floors = parse_floors(min_sqnr, min_cosine, min_top1, names)
        checks = OutputChecks(parse_tolerances(atol, names, "atol"), parse_tolerances(rtol, names, "rtol"))
        if load_outputs is not None:
            checks.saved, checks.saved_source = load_saved(load_outputs, names), str(load_outputs)
        if save_outputs is not None:
            check_save_path(save_outputs, [*compiled.input_files(), data, calib, load_outputs])
        result = run_diff(compiled, dataset.head(num_samples), workers, ray, progress, checks, save_outputs,
                          batch_size, floors, reference, original_stream)
        if pairs:
            result["stream"] = {"states": [{"output": o, "input": i} for o, i in pairs],
                                "steps": result["samples"],
                                "judged_against": "the original model's own fp32 stream"
                                if original_stream is not None else "the original model could not be run"}
        if compiled.quant.float_layers:
            result["kept_float"] = [n.name for n in compiled.graph.nodes if n.name in compiled.quant.float_layers]
        if sensitivity:
            from .sensitivity import sensitivity as rank_layers
            result["sensitivity"] = rank_layers(compiled, dataset.head(num_samples))
        return result
