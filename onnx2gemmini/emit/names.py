"""The only ways a name, string or number from a model reaches generated text: one function per target.

A model is untrusted input. Its names end up in C comments and string literals, MLIR comments,
Makefile comments, Markdown tables and HTML; each function below maps any Unicode text to printable
ASCII that cannot leave the context it is printed in (end a comment, close a string, start a new line,
reorder what a reviewer sees with bidi controls, or form a trigraph). Everything outside printable
ASCII is spelled <U+XXXX>, so the text stays readable and the mapping is one way only.
"""
from __future__ import annotations

import html
import re

_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")
_IDENTIFIER = re.compile(r"[^A-Za-z0-9]+")


def ascii_text(text: object) -> str:
    """One line of printable ASCII: every other character (newlines, controls, bidi marks, any non-ASCII
    letter) becomes <U+XXXX>."""
    return _UNPRINTABLE.sub(lambda m: f"<U+{ord(m.group()):04X}>", str(text))


def c_comment(text: object) -> str:
    """Text inside a C block comment: no backslash (line splicing, and `*\\` must not become `*/`), no
    `*/` or `/*`, no `??` (trigraphs)."""
    s = ascii_text(text).replace("\\", "<U+005C>")
    while "*/" in s or "/*" in s or "??" in s:
        s = s.replace("*/", "* /").replace("/*", "/ *").replace("??", "? ?")
    return s


def c_string(text: object) -> str:
    """A C string literal with the UTF-8 bytes of `text`: printable ASCII as itself (`"`, `\\` and `?`
    escaped: no trigraphs), every other byte as a three-digit octal escape."""
    out = []
    for b in str(text).encode("utf-8", "surrogatepass"):
        ch = chr(b)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 0x20 <= b < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def c_identifier(text: object) -> str:
    """A C (and MLIR) identifier: ASCII letters, digits and single underscores, not starting with a
    digit, never empty."""
    s = _IDENTIFIER.sub("_", str(text)).strip("_") or "t"
    return "t" + s if s[0].isdigit() else s


def unique_identifiers(names) -> dict[str, str]:
    """name -> a distinct c_identifier for each (a numeric suffix where two names sanitize alike)."""
    ids: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        if name in ids:
            continue
        base = candidate = c_identifier(name)
        k = 2
        while candidate in used:
            candidate, k = f"{base}_{k}", k + 1
        used.add(candidate)
        ids[name] = candidate
    return ids


def mlir_comment(text: object) -> str:
    """Text after `//` in MLIR: one line of printable ASCII (backslashes spelled out too)."""
    return ascii_text(text).replace("\\", "<U+005C>")


def makefile_comment(text: object) -> str:
    """Text after `#` in a Makefile: one line, no backslash (it would continue the comment onto the next
    line)."""
    return ascii_text(text).replace("\\", "<U+005C>")


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def markdown(text: object) -> str:
    """Text in a Markdown table cell or paragraph: printable ASCII, Markdown's punctuation escaped, no
    HTML (angle brackets and ampersands as entities)."""
    s = html.escape(ascii_text(text), quote=False)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", s)


def html_text(text: object) -> str:
    """Text in HTML element content or a quoted attribute value."""
    return html.escape(ascii_text(text), quote=True)
