"""Model text made safe for a terminal (stdlib only).

A model's tokens are arbitrary text: a token holding `ESC ] 0 ; ... BEL` sets the terminal's
title, `ESC [ 2 J` clears the screen, a C1 `CSI` (U+009B) does the same on terminals that read
C1 controls, and a bidi override (U+202E) makes what follows on the line read backwards. When
the CLI writes model text to a terminal, `for_terminal` shows every such character as a visible
escape instead:

    C0 controls except \\n and \\t (ESC, BEL, \\r, backspace ...)   -> \\x1b, \\x07, \\r, \\x08
    DEL (U+007F) and the C1 controls (U+0080..U+009F)           -> \\x7f, \\x9b ...
    bidi embeddings / overrides / isolates (U+202A..U+202E,
    U+2066..U+2069)                                              -> \\u202e ...

Each character is replaced on its own, so a sequence split over several tokens is just as inert.
The bidi marks LRM / RLM / ALM (U+200E, U+200F, U+061C) stay: they only affect neighbouring
characters and real right-to-left text uses them. Output that is not a terminal (a pipe, a file)
and `--json` (whose encoder escapes control characters itself) are written unchanged.
"""
from __future__ import annotations

_NAMED = {"\r": "\\r", "\b": "\\x08"}


def _escape(c: str) -> str:
    o = ord(c)
    return _NAMED.get(c) or (f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")


UNSAFE = frozenset(chr(c) for c in range(0x20) if chr(c) not in "\n\t") \
    | frozenset(chr(c) for c in range(0x7F, 0xA0)) \
    | frozenset(map(chr, (0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069)))
_TABLE = {ord(c): _escape(c) for c in UNSAFE}


def for_terminal(text: str) -> str:
    """`text` with every terminal control character (see the module docstring) shown escaped."""
    return text.translate(_TABLE)


def writer(stream):
    """A function that writes model text to `stream`: escaped if it is a terminal, as is otherwise."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty:
        return lambda text: stream.write(for_terminal(text))
    return stream.write
