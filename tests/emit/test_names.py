"""emit/names.py: one escaping function per target language; model text never escapes its context."""
from hypothesis import given
from hypothesis import strategies as st

from onnx2gemmini.emit import names

HOSTILE = ["*\\ __attribute__((constructor)) static void f(void){ system(\"touch PWNED\"); } /\\*",
           "a */ int x; /*", "??/\nnext", "\u202eevil\u2066", "tab\tvt\x0bff\x0cnul\x00", "| x | `y` <b>",
           "# comment \\\nrule:", "é漢字🙂"]


def test_identifiers():
    assert names.c_identifier("/features/features.0/Conv_output_0") == "features_features_0_Conv_output_0"
    assert names.c_identifier("0abc") == "t0abc" and names.c_identifier("***") == "t"
    ids = names.unique_identifiers(["a.b", "a-b", "a_b", "*/"])
    assert len(set(ids.values())) == 4 and all("__" not in v for v in ids.values())


def _printable_ascii(s: str) -> bool:
    return all(0x20 <= ord(c) < 0x7F for c in s)


@given(st.text())
def test_c_comment_cannot_end_or_splice(text):
    s = names.c_comment(text)
    assert _printable_ascii(s) and "*/" not in s and "/*" not in s and "\\" not in s and "??" not in s


@given(st.text())
def test_c_string_round_trips_the_utf8_bytes(text):
    lit = names.c_string(text)
    assert lit.startswith('"') and lit.endswith('"') and _printable_ascii(lit) and "??" not in lit
    assert _c_unescape(lit[1:-1]) == text.encode("utf-8", "surrogatepass")


def _c_unescape(body: str) -> bytes:
    """The bytes of a C string literal's body that uses only the escapes c_string writes."""
    out, i = bytearray(), 0
    while i < len(body):
        if body[i] != "\\":
            out.append(ord(body[i]))
            i += 1
        elif body[i + 1] in '"\\?':
            out.append(ord(body[i + 1]))
            i += 2
        else:
            out.append(int(body[i + 1:i + 4], 8))
            i += 4
    return bytes(out)


@given(st.text())
def test_line_comments_stay_on_one_line(text):
    for fn in (names.mlir_comment, names.makefile_comment):
        s = fn(text)
        assert _printable_ascii(s) and "\\" not in s


@given(st.text())
def test_markdown_cannot_break_a_table_or_inject_html(text):
    s = names.markdown(text)
    assert _printable_ascii(s) and "<" not in s and ">" not in s
    assert "|" not in s.replace("\\|", "")


def test_the_observed_payloads():
    for text in HOSTILE:
        assert "*/" not in names.c_comment(text)
        assert "\u202e" not in names.c_comment(text) and "<U+202E>" in names.c_comment("\u202e")
    assert names.c_comment("*\\") == "*<U+005C>"   # once turned back into `*/` by the old sanitizer
