"""Regenerate docs/supported_ops.md from the handler registry (the only way that file changes)."""
from pathlib import Path

from onnx2gemmini.support import support_markdown

if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / "docs" / "supported_ops.md"
    target.write_text(support_markdown())
    print(f"wrote {target}")
