"""Control characters made visible before text read from storage reaches a terminal.

A job's error message, traceback, result or even task name is written by whoever can
enqueue or run code; printed raw, an escape sequence in it can clear an operator's
screen, retitle the window, rewrite the line before it (``\\r``) or reorder what follows
(Unicode bidirectional controls). The CLI tables and the worker's text log show such
characters as escapes instead: ``\\x1b``, ``\\r``, ``\\u202e``.
"""

from __future__ import annotations

import re

__all__ = ["json_safe", "printable"]

_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
"""C0 controls but tab and newline, DEL, C1 controls (``\\x9b`` is a CSI on its own), and
the Unicode line separators and bidirectional controls."""
_UNSAFE = re.compile(f"[{_CONTROLS}]")
_UNSAFE_OR_LINE = re.compile(f"[{_CONTROLS}\t\n]")
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    c = match.group()
    named = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(c)
    if named is not None:
        return named
    code = ord(c)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, *, lines: bool = True) -> str:
    """``text`` with every control character written as an escape (``\\x1b``).

    Args:
        text: Any text, e.g. an error message read from storage.
        lines: keep newlines and tabs (a traceback); ``False`` escapes them too.
    """
    pattern = _UNSAFE if lines else _UNSAFE_OR_LINE
    return pattern.sub(_escape, text) if pattern.search(text) else text


def json_safe(text: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``, which escapes C0 controls
    itself) with DEL, C1 and bidirectional controls written as ``\\uXXXX`` escapes too:
    the same JSON value, harmless on a terminal."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
