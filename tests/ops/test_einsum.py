"""Einsum against onnxruntime: batched-matmul equations in any axis order run as Gemmini matmuls, bit for
bit (the golden writes the same MatMul, which onnxruntime runs as QLinearMatMul); others are refused."""
import pytest
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini.einsum import matmul_form
from tests.helpers import assert_matches_ort, infer_outputs

CASES = {
    # id: (equation, shape of a, shape of b)
    "maxvit_qk": ("B G H I D, B G H J D -> B G H I J", [1, 2, 2, 5, 4], [1, 2, 2, 6, 4]),
    "maxvit_v": ("B G H I J, B G H J D -> B G H I D", [1, 2, 2, 5, 6], [1, 2, 2, 6, 4]),
    "plain": ("ij,jk->ik", [3, 4], [4, 5]),
    "output_transposed": ("bij,bjk->bki", [2, 3, 4], [2, 4, 5]),
    "k_first": ("bki,bkj->bij", [2, 4, 3], [2, 4, 5]),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_einsum_matches_onnxruntime_exactly(case):
    equation, sa, sb = CASES[case]
    model = infer_outputs([helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)], {"a": sa, "b": sb})
    compiled, result = assert_matches_ort(model)
    assert any(s.kind == "matmul" for s in compiled.plan.steps)
    assert result["layers"][-1]["mismatches_vs_ort_qdq"] == 0 and result["verdict"]["exact_model"]


@pytest.mark.parametrize("equation", ["ii->i", "ij->ji", "ij,ij->ij", "bij,jk->bik...", "ij,kl->ijkl",
                                      "i,i->", "...ij,...jk->...ik"])
def test_other_equations_are_not_matmuls(equation):
    assert matmul_form(equation) is None


def test_a_non_matmul_equation_is_refused_by_name():
    model = infer_outputs([helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,ij->ij")],
                          {"a": [3, 4], "b": [3, 4]})
    with pytest.raises(o2g.UnsupportedError, match="is not a batched matrix product"):
        o2g.compile(model)
