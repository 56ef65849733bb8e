"""scripts/zoo_coverage.py writes its table between the page's markers and keeps the prose around it."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import zoo_coverage  # noqa: E402


def test_the_table_replaces_only_its_own_block(tmp_path):
    page = tmp_path / "coverage.md"
    page.write_text("# Title\n\nprose\n\n<!-- zoo-table: timm -->\nold timm\n<!-- end of zoo-table: timm -->\n"
                    "\n<!-- zoo-table: transformers -->\nold\n<!-- end of zoo-table: transformers -->\nmore prose\n")
    zoo_coverage.write_table(page, "transformers", "| new |\n")
    text = page.read_text()
    assert "| new |" in text and "old\n" not in text.split("zoo-table: transformers")[1]
    assert text.startswith("# Title\n\nprose\n") and "old timm" in text and text.endswith("more prose\n")


def test_a_page_without_markers_keeps_its_text(tmp_path):
    page = tmp_path / "coverage.md"
    page.write_text("# Title\n\nprose\n")
    zoo_coverage.write_table(page, "transformers", "| row |\n")
    text = page.read_text()
    assert text.startswith("# Title\n\nprose\n") and "| row |" in text
    zoo_coverage.write_table(page, "transformers", "| other |\n")
    assert page.read_text().count("zoo-table: transformers") == 2 and "| row |" not in page.read_text()


def test_the_transformers_list_covers_the_architectures_users_start_from():
    import zoo_transformers
    names = {m.name for m in zoo_transformers.MODELS}
    assert {"bert", "distilbert", "roberta", "albert", "electra", "mobilebert", "deberta_v2", "vit", "deit", "beit",
            "swin", "convnext", "mobilevit", "levit", "clip_vision", "clip_text", "whisper_encoder", "wav2vec2",
            "t5_encoder", "gpt2", "llama"} <= names


def test_an_update_replaces_the_measured_rows_only():
    page = ("<!-- zoo-table: timm -->\n| model | result |\n|---|---|\n| a\\_1 | refused: x |\n| b | compiled |\n"
            "<!-- end of zoo-table: timm -->\n")
    new = "| model | result |\n|---|---|\n| a\\_1 | compiled |\n| c | refused: y |\n"
    table = zoo_coverage.updated_table(page, "timm", new)
    assert table == "| model | result |\n|---|---|\n| a\\_1 | compiled |\n| b | compiled |\n| c | refused: y |\n"
    assert zoo_coverage.updated_table("no table", "timm", new) == new
