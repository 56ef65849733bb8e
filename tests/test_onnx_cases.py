"""ONNX's own node test cases and pytorch-converted models for the supported ops, through the pipeline.

Each case is either compiled and checked (emulator == onnxruntime QDQ within the stated tolerance, and
the dequantized result close to the case's expected float output), or refused with a clean O2GError.
"""
import functools
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper, version_converter

import onnx2gemmini as o2g
from onnx2gemmini.data import Dataset
from onnx2gemmini.compare import run_diff
from onnx2gemmini.fidelity import NO_FLOORS
from onnx2gemmini.metrics import cosine

OPS = {"Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool", "Relu", "Clip", "Flatten",
       "Reshape", "Softmax", "Add", "Sum", "Identity", "Dropout", "Slice", "Pad", "Resize", "PRelu",
       "ConvTranspose"}
ACTIVATION_INPUTS = {"Add": 2, "Sum": 2}
MAX_ORT_OPSET = 25  # onnxruntime 1.32 runs up to this opset


@functools.lru_cache(maxsize=1)
def node_cases():
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    return {c.name: c for c in cases
            if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type in OPS and c.data_sets
            and all(vi.type.WhichOneof("value") == "tensor_type" for vi in c.model.graph.input)}


def freeze(model: onnx.ModelProto, inputs: list[np.ndarray]) -> tuple[onnx.ModelProto, dict]:
    """Inputs after the activations become initializers (weights, shapes, bounds), at a common opset."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    op = model.graph.node[0].op_type
    n_act = ACTIVATION_INPUTS.get(op, 1)
    graph_inputs = list(model.graph.input)
    feeds = {}
    del model.graph.input[:]
    for i, (vi, value) in enumerate(zip(graph_inputs, inputs)):
        if i < n_act:
            model.graph.input.append(vi)
            feeds[vi.name] = value
        else:
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(value), vi.name))
    opset = model.opset_import[0].version
    if opset > MAX_ORT_OPSET:
        model = version_converter.convert_version(model, MAX_ORT_OPSET)
    return model, feeds


def check_case(model, feeds, expected, accuracy=True):
    calib = Dataset({k: v[None] for k, v in feeds.items()}, None, "case")
    compiled = o2g.compile(model, calib=calib)
    result = run_diff(compiled, calib, floors=NO_FLOORS)
    assert result["verdict"]["passed"], result["verdict"]
    for layer in result["layers"]:
        assert layer["max_lsb_vs_ort_qdq"] <= layer["tolerance_lsb"]
    if not accuracy:
        return
    got = compiled.run(feeds)
    for name, ref in zip([o.name for o in model.graph.output], expected):
        ours = got[name]
        scale = compiled.plan.tensors[[t for t in compiled.plan.outputs
                                       if compiled.plan.tensors[t].onnx_name == name][0]].scale
        # quantization error: a few output LSBs, or a small share of the output's range
        bound = max(4 * scale, 0.03 * float(np.max(np.abs(ref))))
        assert np.max(np.abs(ours - ref)) <= bound, (name, np.max(np.abs(ours - ref)), bound)
        if ref.size > 4 and np.max(np.abs(ref)) > 0:
            assert cosine(ref, ours) > 0.99


def _refusal(name: str, case) -> str | None:
    """Why a case must be refused (None: it must compile and match)."""
    n_act = ACTIVATION_INPUTS.get(case.model.graph.node[0].op_type, 1)
    types = {vi.type.tensor_type.elem_type for vi in case.model.graph.input[:n_act]}
    if types - {onnx.TensorProto.FLOAT}:
        return "non-float"
    if name.startswith("test_training_dropout") and "zero_ratio" not in name:
        return "training"
    return None


@pytest.mark.parametrize("name", sorted(node_cases()))
def test_node_case(name):
    case = node_cases()[name]
    inputs, outputs = case.data_sets[0]
    try:
        model, feeds = freeze(case.model, inputs)
    except Exception as exc:  # the installed onnx cannot convert it: not our pipeline's concern
        pytest.skip(f"onnx version_converter: {str(exc).splitlines()[0][:100]}")
    try:
        check_case(model, feeds, outputs, accuracy=name not in INT8_UNREPRESENTABLE and name not in ORT_DIFFERS)
    except o2g.O2GError as exc:
        # refused cases must be refused cleanly, with the reason
        assert str(exc) and "\n" not in str(exc)
        assert _refusal(name, case) is not None or name in REFUSED, f"{name} refused: {exc}"
        return
    assert _refusal(name, case) is None and name not in REFUSED, f"{name} should have been refused"


# Forms the compiler refuses by design (one clean error each); everything else must compile and match.
REFUSED = {
    "test_sum_example": "three operands", "test_sum_one_input": "one operand",
    "test_averagepool_3d_default": "3-D",
    "test_averagepool_3d_dilations_small": "3-D",
    "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_False": "3-D",
    "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True": "3-D",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_False": "3-D",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True": "3-D",
    "test_maxpool_3d_default": "3-D", "test_maxpool_3d_dilations": "3-D",
    "test_maxpool_3d_dilations_use_ref_impl": "3-D", "test_maxpool_3d_dilations_use_ref_impl_large": "3-D",
    "test_maxpool_with_argmax_2d_precomputed_pads": "Indices output",
    "test_maxpool_with_argmax_2d_precomputed_strides": "Indices output",
    "test_dropout_default_mask": "mask output", "test_dropout_default_mask_ratio": "mask output",
    "test_training_dropout_zero_ratio_mask": "mask output",
    "test_gemm_default_matrix_bias": "matrix C", "test_gemm_transposeA": "transA",
    "test_gemm_all_attributes": "transA",
    "test_matmul_bcast": "batch dimensions differ", "test_matmul_1d_3d": "vector operand",
    "test_matmul_4d_1d": "vector operand", "test_matmul_1d_1d": "vector operand",
    "test_reshape_allowzero_reordered": "empty tensor", "test_slice_start_out_of_bounds": "empty tensor",
    "test_convtranspose_1d": "1-D", "test_convtranspose_3d": "3-D",
    **{f"test_resize_{n}": "antialias" for n in (
        "downsample_scales_linear_antialias", "downsample_sizes_linear_antialias",
        "downsample_scales_cubic_antialias", "downsample_sizes_cubic_antialias")},
    **{f"test_resize_{n}": "tf_crop_and_resize" for n in (
        "tf_crop_and_resize", "tf_crop_and_resize_axes_2_3", "tf_crop_and_resize_axes_3_2",
        "tf_crop_and_resize_extrapolation_value")},
    **{f"test_resize_{n}": "keep_aspect_ratio_policy" for n in (
        "downsample_sizes_nearest_not_larger", "downsample_sizes_nearest_not_smaller",
        "upsample_sizes_nearest_not_larger", "upsample_sizes_nearest_not_smaller")},
}

# Cases whose values no single int8 scale can represent (still checked bit for bit against onnxruntime).
INT8_UNREPRESENTABLE = {"test_softmax_large_number": "rows 0..3 and 10000..10003 share one scale"}

# Cases whose expected output onnxruntime (the golden) does not compute (still checked against onnxruntime).
ORT_DIFFERS = {"test_resize_downsample_scales_linear_align_corners":
               "onnxruntime's align_corners divides by the output size - 1 (1), the reference by 4 * 0.6 - 1",
               "test_resize_downsample_scales_cubic_align_corners":
               "onnxruntime's align_corners divides by the output size - 1 (2), the reference by 4 * 0.8 - 1"}


PYTORCH_CASES = ["test_Conv2d", "test_Conv2d_no_bias", "test_Conv2d_padding", "test_Conv2d_strided",
                 "test_Conv2d_dilated", "test_Linear", "test_Linear_no_bias", "test_MaxPool2d", "test_AvgPool2d",
                 "test_AvgPool2d_stride", "test_BatchNorm2d_eval", "test_ReLU", "test_Softmax",
                 "test_Conv2d_depthwise", "test_Conv2d_groups"]


def _pytorch_dir(name: str) -> Path:
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted" / name


@pytest.mark.parametrize("name", PYTORCH_CASES)
def test_pytorch_converted_case(name):
    d = _pytorch_dir(name)
    if not d.exists():
        pytest.skip(f"{name} is not in this onnx wheel")
    model = onnx.load(d / "model.onnx")
    sets = sorted(d.glob("test_data_set_*"))
    tensors = lambda s, kind: [numpy_helper.to_array(onnx.load_tensor(str(p)))  # noqa: E731
                               for p in sorted(s.glob(f"{kind}_*.pb"))]
    inputs, outputs = tensors(sets[0], "input"), tensors(sets[0], "output")
    feeds = {model.graph.input[0].name: inputs[0]}
    try:
        check_case(model, feeds, outputs)
    except o2g.UnsupportedError as exc:
        expected = {"test_Conv2d_depthwise": "group", "test_Conv2d_groups": "group",
                    "test_BatchNorm2d_eval": "BatchNormalization"}
        assert name in expected and expected[name] in str(exc), exc
