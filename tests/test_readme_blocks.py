"""The README's blocks that quote the tool's output are what the tool prints today (scripts/readme_blocks.py
writes them; this fails when a change moves a figure and the README was not regenerated)."""
import sys

import pytest

from tests.doc_blocks import REPO

sys.path.insert(0, str(REPO / "scripts"))
import readme_blocks  # noqa: E402


@pytest.mark.parametrize("block", readme_blocks.BLOCKS, ids=lambda b: b.name)
def test_readme_block_is_current(block):
    text = readme_blocks.README.read_text()
    assert readme_blocks._span(text, block.name).group(0) == readme_blocks.render(block), \
        f"README block {block.name!r} is stale: run python scripts/readme_blocks.py"


def test_check_names_a_stale_block(tmp_path, monkeypatch):
    """Negative control: a changed figure in a copy of the README is caught."""
    copy = tmp_path / "README.md"
    copy.write_text(readme_blocks.README.read_text().replace("compared 519 samples", "compared 518 samples"))
    monkeypatch.setattr(readme_blocks, "README", copy)
    monkeypatch.setattr(sys, "argv", ["readme_blocks.py", "--check"])
    monkeypatch.setattr(readme_blocks, "BLOCKS", tuple(b for b in readme_blocks.BLOCKS if b.name == "diff"))
    assert readme_blocks.main() == 1
