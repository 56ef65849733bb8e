"""The support table is generated from the registry and kept in docs/."""
from pathlib import Path

from onnx2gemmini.ops.registry import all_handlers, lookup
from onnx2gemmini.support import support_markdown, support_table


def test_docs_supported_ops_is_current():
    doc = Path(__file__).resolve().parents[1] / "docs" / "supported_ops.md"
    assert doc.read_text() == support_markdown(), "run: python scripts/gen_supported_ops.py"


def test_every_handler_declares_mapping_and_limits():
    for row in support_table():
        assert row["gemmini"] and row["limits"], row


def test_newest_since_wins():
    conv = lookup("Conv", 17)
    assert conv is not None and conv.since <= 17
    assert lookup("Softmax", 12) is None  # Softmax's 2-D coercion (before 13) is not implemented
    assert lookup("NoSuchOp", 17) is None
    assert len({(h.op_type, h.since) for h in all_handlers()}) == len(all_handlers())


def test_every_op_names_the_module_that_holds_it():
    package = Path(__file__).resolve().parents[1] / "onnx2gemmini"
    for row in support_table():
        module = package / row["module"]
        assert module.is_file() and f'"{row["op"]}"' in module.read_text(), row
