"""GBNF, llama.cpp's grammar format, parsed into expression trees (stdlib only).

The syntax is llama.cpp's (grammars/README.md, src/llama-grammar.cpp), and so are its corner cases:
  rule      name ::= alternates, ended by a newline (or the end); names are [a-zA-Z0-9_-]+
  alternates  seq ("|" seq)*; a newline after "|" continues the rule; an empty seq is allowed
  seq       items separated by spaces; a newline ends the seq except inside ( ), where it is space
  items     "literal"  [class]  [^class]  .  name  ( alternates )  <[id]>  <text>  !<...>
  postfix   *  +  ?  {m}  {m,}  {m,n}   (m > 2000: an error; n > 2000: no upper bound, as llama.cpp)
  escapes   \\xHH \\uHHHH \\UHHHHHHHH \\t \\r \\n \\\\ \\" \\[ \\] \\-  (anything else is an error)
  classes   ranges a-z; a "-" just before "]" is literal; chars are code points (UTF-8 text)
  comments  # to the end of the line, anywhere space is allowed
A later definition of a rule replaces an earlier one (as in llama.cpp). Every referenced rule must
be defined and the root rule must exist. Errors are GrammarError with the line and column.

Expressions are tuples:
  ("seq", [e...])  ("alt", [e...])  ("chars", ((lo, hi), ...))  code point ranges, sorted, merged
  ("ref", name, (line, col))  ("rep", e, min, max or None)  ("token", ref, negated) with ref an int id
  or the token's text (resolved against a vocabulary later)
"""
from __future__ import annotations

MAX_CODE_POINT = 0x10FFFF
MAX_REPETITION = 2000          # llama.cpp's MAX_REPETITION_THRESHOLD
ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


class GrammarError(ValueError):
    """A grammar that cannot be used: says what is wrong and, for GBNF text, where (line, column)."""

    def __init__(self, message: str, line: int | None = None, col: int | None = None):
        self.line, self.col = line, col
        super().__init__(f"{message} (line {line}, column {col})" if line is not None else message)


def normalize(ranges) -> tuple:
    """Sorted, merged code point ranges; empty ranges (lo > hi) dropped."""
    out = []
    for lo, hi in sorted(r for r in ranges if r[0] <= r[1]):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def complement(ranges) -> tuple:
    out, lo = [], 0
    for a, b in normalize(ranges):
        if a > lo:
            out.append((lo, a - 1))
        lo = b + 1
    if lo <= MAX_CODE_POINT:
        out.append((lo, MAX_CODE_POINT))
    return tuple(out)


ANY_CHAR = ("chars", ((0, MAX_CODE_POINT),))


def is_word(c: str) -> bool:
    return len(c) == 1 and c.isascii() and (c.isalnum() or c in "-_")


class Parser:
    def __init__(self, text: str):
        if not isinstance(text, str):
            raise GrammarError(f"a GBNF grammar is text, not {type(text).__name__}")
        self.src = text
        self.pos = 0
        self.rules: dict = {}
        self.refs: list = []                 # (name, (line, col)) of every reference

    # ------------------------------------------------------------ helpers
    def where(self, pos: int | None = None) -> tuple:
        pos = self.pos if pos is None else pos
        line = self.src.count("\n", 0, pos) + 1
        return line, pos - (self.src.rfind("\n", 0, pos) + 1) + 1

    def error(self, message: str, pos: int | None = None):
        line, col = self.where(pos)
        return GrammarError(message, line, col)

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.src[i] if i < len(self.src) else ""

    def found(self) -> str:
        c = self.peek()
        return "the end of the grammar" if not c else repr(c)

    def space(self, newline_ok: bool):
        s, n = self.src, len(self.src)
        while self.pos < n:
            c = s[self.pos]
            if c == "#":
                while self.pos < n and s[self.pos] != "\r" and s[self.pos] != "\n":
                    self.pos += 1
            elif c == " " or c == "\t" or (newline_ok and (c == "\r" or c == "\n")):
                self.pos += 1
            else:
                break

    def name(self) -> str:
        start = self.pos
        while is_word(self.peek()):
            self.pos += 1
        if self.pos == start:
            raise self.error(f"expected a rule name, found {self.found()}")
        return self.src[start:self.pos]

    def integer(self) -> int:
        start = self.pos
        while self.peek().isdigit() and self.peek().isascii():
            self.pos += 1
        if self.pos == start:
            raise self.error(f"expected an integer, found {self.found()}")
        return int(self.src[start:self.pos])

    def char(self) -> int:
        """One character of a literal or class: a code point (escapes decoded)."""
        start = self.pos
        c = self.peek()
        if not c:
            raise self.error("unexpected end of the grammar inside a literal or class")
        if c != "\\":
            self.pos += 1
            return ord(c)
        e = self.peek(1)
        if e in HEX_ESCAPES:
            k = HEX_ESCAPES[e]
            digits = self.src[self.pos + 2:self.pos + 2 + k]
            if len(digits) != k or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"expected {k} hex digits after \\{e}", start)
            self.pos += 2 + k
            return int(digits, 16)
        if e in ESCAPES:
            self.pos += 2
            return ord(ESCAPES[e])
        raise self.error(f"unknown escape \\{e}" if e else "unexpected end of the grammar after \\", start)

    # ------------------------------------------------------------ grammar
    def parse(self) -> dict:
        self.space(True)
        while self.pos < len(self.src):
            self.rule()
        if not self.rules:
            raise GrammarError("the grammar has no rules")
        for name, at in self.refs:
            if name not in self.rules:
                raise GrammarError(f"undefined rule {name!r}", *at)
        return self.rules

    def rule(self):
        name = self.name()
        self.space(False)
        if self.src[self.pos:self.pos + 3] != "::=":
            raise self.error(f"expected ::= after the rule name {name!r}, found {self.found()}")
        self.pos += 3
        self.space(True)
        self.rules[name] = self.alternates(nested=False)
        c = self.peek()
        if c == "\r":
            self.pos += 2 if self.peek(1) == "\n" else 1
        elif c == "\n":
            self.pos += 1
        elif c:
            raise self.error(f"expected a newline or the end of the grammar, found {self.found()}")
        self.space(True)

    def alternates(self, nested: bool):
        alts = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.space(True)
            alts.append(self.sequence(nested))
        return alts[0] if len(alts) == 1 else ("alt", alts)

    def sequence(self, nested: bool):
        items = []
        while True:
            c = self.peek()
            start = self.pos
            if not c:
                break
            if c == '"':
                self.pos += 1
                cps = []
                while self.peek() != '"':
                    if not self.peek():
                        raise self.error("unterminated literal: no closing \"", start)
                    cps.append(self.char())
                self.pos += 1
                items.append(("seq", [("chars", ((cp, cp),)) for cp in cps]))
            elif c == "[":
                self.pos += 1
                negated = self.peek() == "^"
                if negated:
                    self.pos += 1
                ranges = []
                while self.peek() != "]":
                    if not self.peek():
                        raise self.error("unterminated character class: no closing ]", start)
                    lo = self.char()
                    hi = lo
                    if self.peek() == "-" and self.peek(1) != "]":
                        if not self.peek(1):
                            raise self.error("unterminated character class: no closing ]", start)
                        self.pos += 1
                        hi = self.char()
                    ranges.append((lo, hi))
                self.pos += 1
                items.append(("chars", complement(ranges) if negated else normalize(ranges)))
            elif c in "<!":
                negated = c == "!"
                if negated:
                    self.pos += 1
                items.append(("token", self.token(), negated))
            elif is_word(c):
                at = self.where()
                name = self.name()
                self.refs.append((name, at))
                items.append(("ref", name, at))
            elif c == "(":
                self.pos += 1
                self.space(True)
                inner = self.alternates(nested=True)
                if self.peek() != ")":
                    raise self.error(f"expected ) to close the group opened at line {self.where(start)[0]}, "
                                     f"column {self.where(start)[1]}, found {self.found()}")
                self.pos += 1
                items.append(inner)
            elif c == ".":
                self.pos += 1
                items.append(ANY_CHAR)
            elif c in "*+?{":
                if not items:
                    raise self.error(f"{c} needs a preceding item to repeat")
                self.pos += 1
                if c == "{":
                    lo, hi = self.braces()
                else:
                    lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                items[-1] = ("rep", items[-1], lo, hi)
            else:
                break
            self.space(nested)
        return items[0] if len(items) == 1 else ("seq", items)

    def braces(self):
        start = self.pos - 1
        self.space(True)
        lo = self.integer()
        self.space(True)
        if self.peek() == "}":
            hi = lo
        elif self.peek() == ",":
            self.pos += 1
            self.space(True)
            hi = self.integer() if self.peek().isdigit() else None
            self.space(True)
            if self.peek() != "}":
                raise self.error(f"expected }} to close the repetition, found {self.found()}")
        else:
            raise self.error(f"expected , or }} in the repetition, found {self.found()}")
        self.pos += 1
        if lo > MAX_REPETITION:
            raise self.error(f"{{{lo},...}}: more than {MAX_REPETITION} repetitions", start)
        if hi is not None and hi > MAX_REPETITION:
            hi = None                      # llama.cpp: a maximum past the threshold means no maximum
        if hi is not None and hi < lo:
            raise self.error(f"{{{lo},{hi}}}: the maximum is below the minimum", start)
        return lo, hi

    def token(self):
        start = self.pos
        if self.peek() != "<":
            raise self.error(f"expected < after !, found {self.found()}")
        self.pos += 1
        if self.peek() == "[":
            self.pos += 1
            tid = self.integer()
            if self.src[self.pos:self.pos + 2] != "]>":
                raise self.error(f"expected ]> to close the token id, found {self.found()}")
            self.pos += 2
            return tid
        end = self.src.find(">", self.pos)
        if end < 0 or "\n" in self.src[self.pos:end]:
            raise self.error("unterminated token: no closing >", start)
        self.pos = end + 1
        return self.src[start:end + 1]          # the token's text, <think> included


def parse(text: str, root: str = "root") -> dict:
    """{rule name: expression} of a GBNF grammar. GrammarError (with line and column) on bad syntax,
    an undefined rule, or a missing root."""
    rules = Parser(text).parse()
    if root not in rules:
        raise GrammarError(f"the grammar has no {root!r} rule (the start symbol)")
    return rules


def literal(text: str) -> str:
    """A GBNF literal ("...") that matches `text` exactly."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def class_char(cp: int) -> str:
    """One code point written inside a GBNF character class."""
    c = chr(cp)
    if c in '\\]["-^':
        return "\\" + c if c in '\\][-"' else c
    if cp < 0x20 or cp == 0x7F or 0xD800 <= cp <= 0xDFFF:
        return f"\\x{cp:02X}" if cp < 0x100 else f"\\u{cp:04X}"
    return c


def char_class(ranges, negated: bool = False) -> str:
    parts = []
    for lo, hi in ranges:
        parts.append(class_char(lo) if lo == hi else f"{class_char(lo)}-{class_char(hi)}")
    body = "".join(parts)
    if not negated and body.startswith("^"):
        body = "\\x5E" + body[1:]
    return "[" + ("^" if negated else "") + body + "]"
