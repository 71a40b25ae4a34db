"""A JSON Schema `pattern` (ECMA-262 regular expression) -> GBNF for the inside of a JSON string
(stdlib only).

The GBNF matches the *encoded* string: characters JSON must escape (", \\, control characters) are
written as escapes, the rest as themselves. A pattern matches anywhere in the string unless
anchored, so an unanchored side gets `char*` (the JSON string character rule the caller defines).

Supported: literals and escapes (\\t \\n \\r \\f \\v \\0 \\xHH \\uHHHH, escaped punctuation), `.`,
classes [a-z...] and [^...], \\d \\w \\s and their negations, groups (...), (?:...), (?<name>...),
alternation |, quantifiers * + ? {n} {n,} {n,m} (lazy ones too: same language), ^ at the start and
$ at the end of the pattern or of a top-level alternative. Anything else (lookaround, backreferences,
\\b, anchors inside) is a PatternError that names it.

Where ECMA and Python's re (which a CPython validator uses) differ, the grammar keeps to what both
accept: \\d \\s are ASCII; \\D \\W \\S and negated classes holding them stay within ASCII.
"""
from __future__ import annotations

from bitweb.grammar.gbnf import MAX_CODE_POINT, MAX_REPETITION, char_class, complement, literal, normalize


class PatternError(ValueError):
    pass


DIGIT = ((0x30, 0x39),)
WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
SPACE = ((0x09, 0x0D), (0x20, 0x20))
ANY_WS = ((0x09, 0x0D), (0x1C, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
          (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF))
ASCII = ((0, 0x7F),)
DOT = complement(((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)))
CLASS_ESCAPES = {"d": (DIGIT, False), "D": (DIGIT, True), "w": (WORD, False), "W": (WORD, True),
                 "s": (SPACE, False), "S": (ANY_WS, True)}
CHAR_ESCAPES = {"t": 9, "n": 10, "r": 13, "f": 12, "v": 11, "0": 0}
JSON_ESCAPES = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
MUST_ESCAPE = ((0, 0x1F), (0x22, 0x22), (0x5C, 0x5C))


def intersect(a, b) -> tuple:
    out = []
    for lo, hi in a:
        for x, y in b:
            if max(lo, x) <= min(hi, y):
                out.append((max(lo, x), min(hi, y)))
    return normalize(out)


def encoded(ranges) -> str:
    """GBNF for one character of the set, as JSON writes it inside a string."""
    ranges = normalize(ranges)
    raw = intersect(ranges, complement(MUST_ESCAPE))
    alts = [char_class(raw)] if raw else []
    for lo, hi in intersect(ranges, MUST_ESCAPE):
        for cp in range(lo, hi + 1):
            alts.append(literal(JSON_ESCAPES.get(cp, f"\\u{cp:04x}")))
    if not alts:
        raise PatternError("the pattern has a character class that matches nothing")
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


class Parser:
    def __init__(self, src: str):
        self.src, self.pos = src, 0

    def fail(self, what: str):
        return PatternError(f"pattern {self.src!r}: {what} at offset {self.pos} is not supported by the grammar")

    def peek(self) -> str:
        return self.src[self.pos] if self.pos < len(self.src) else ""

    def take(self) -> str:
        c = self.peek()
        self.pos += 1
        return c

    def top(self) -> str:
        alts = [self.alternative(top=True)]
        while self.peek() == "|":
            self.pos += 1
            alts.append(self.alternative(top=True))
        if self.pos < len(self.src):
            raise self.fail(f"unbalanced {self.peek()!r}")
        return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"

    def alternation(self) -> str:
        alts = [self.alternative()]
        while self.peek() == "|":
            self.pos += 1
            alts.append(self.alternative())
        return alts[0] if len(alts) == 1 else "(" + " | ".join(a or '""' for a in alts) + ")"

    def alternative(self, top: bool = False) -> str:
        items = []
        start = top and self.peek() == "^"
        if start:
            self.pos += 1
        end = False
        while self.peek() and self.peek() not in "|)":
            if self.peek() == "$":
                self.pos += 1
                if top and (not self.peek() or self.peek() == "|"):
                    end = True
                    break
                raise self.fail("$ inside the pattern")
            items.append(self.quantified())
        if top:
            items = ([] if start else ["char*"]) + items + ([] if end else ["char*"])
        return " ".join(i for i in items if i) or ""

    def quantified(self) -> str:
        atom = self.atom()
        c = self.peek()
        if c in ("*", "+", "?", "{"):
            if c == "{":
                close = self.src.find("}", self.pos)
                body = self.src[self.pos + 1:close] if close > 0 else ""
                parts = body.split(",")
                if close < 0 or len(parts) > 2 or not parts[0].isdigit() or (len(parts) == 2 and parts[1] and not parts[1].isdigit()):
                    return atom                   # not a quantifier: "{" is read as a literal next
                lo = int(parts[0])
                hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
                if lo > MAX_REPETITION or (hi is not None and hi > MAX_REPETITION):
                    raise self.fail(f"a repetition over {MAX_REPETITION}")
                if hi is not None and hi < lo:
                    raise self.fail(f"{{{lo},{hi}}} (maximum below minimum)")
                self.pos = close + 1
                q = f"{{{lo}}}" if hi == lo else f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"
            else:
                self.pos += 1
                q = c
            if self.peek() == "?":                 # lazy: the same language
                self.pos += 1
            if self.peek() in ("*", "+", "?", "{") and self.peek():
                raise self.fail("a quantifier after a quantifier")
            return f"({atom}){q}"
        return atom

    def atom(self) -> str:
        c = self.take()
        if c == "(":
            if self.src.startswith("?:", self.pos):
                self.pos += 2
            elif self.src.startswith("?<", self.pos) and self.src[self.pos + 2:self.pos + 3] not in ("=", "!"):
                close = self.src.find(">", self.pos)
                if close < 0:
                    raise self.fail("an unterminated group name")
                self.pos = close + 1
            elif self.peek() == "?":
                raise self.fail("lookaround or an inline flag (?...)")
            inner = self.alternation()
            if self.take() != ")":
                raise self.fail("a group without its )")
            return f"({inner or chr(34) * 2})"
        if c == "[":
            return encoded(self.char_class())
        if c == ".":
            return encoded(DOT)
        if c == "\\":
            return encoded(self.escape(in_class=False)[0])
        if c in "*+?":
            raise self.fail(f"{c} with nothing to repeat")
        if c in "^$":
            raise self.fail(f"{c} inside the pattern")
        if c == ")":
            raise self.fail("an unbalanced )")
        return encoded(((ord(c), ord(c)),))

    def escape(self, in_class: bool):
        """After a backslash: (ranges, is a class escape)."""
        c = self.take()
        if not c:
            raise self.fail("a trailing backslash")
        if c in CLASS_ESCAPES:
            ranges, negated = CLASS_ESCAPES[c]
            return (intersect(complement(ranges), ASCII) if negated else ranges), True
        if c in CHAR_ESCAPES:
            if c == "0" and self.peek().isdigit():
                raise self.fail("an octal escape")
            return ((CHAR_ESCAPES[c],) * 2,), False
        if c in "xu":
            k = 2 if c == "x" else 4
            digits = self.src[self.pos:self.pos + k]
            if len(digits) != k or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.fail(f"\\{c} without {k} hex digits")
            self.pos += k
            cp = int(digits, 16)
            return ((cp, cp),), False
        if c == "b" and in_class:
            return ((8, 8),), False
        if c.isalnum():
            raise self.fail(f"the escape \\{c}")
        return ((ord(c), ord(c)),), False

    def char_class(self) -> tuple:
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges, has_class_escape, first = [], False, True
        while True:
            c = self.peek()
            if not c:
                raise self.fail("a class without its ]")
            if c == "]" and not first:
                self.pos += 1
                break
            first = False
            lo_set, is_class = self.class_atom()
            has_class_escape |= is_class
            if self.peek() == "-" and self.src[self.pos + 1:self.pos + 2] not in ("]", ""):
                if is_class:
                    raise self.fail("a range from a class escape")
                self.pos += 1
                hi_set, hi_class = self.class_atom()
                if hi_class:
                    raise self.fail("a range to a class escape")
                lo, hi = lo_set[0][0], hi_set[0][0]
                if lo > hi:
                    raise self.fail("a range out of order")
                ranges.append((lo, hi))
            else:
                ranges.extend(lo_set)
        out = normalize(ranges)
        if negated:
            out = complement(out)
            if has_class_escape:
                out = intersect(out, ASCII)
        return intersect(out, ((0, MAX_CODE_POINT),))

    def class_atom(self):
        c = self.take()
        if c == "\\":
            return self.escape(in_class=True)
        return ((ord(c), ord(c)),), False


def to_gbnf(pattern: str) -> str:
    """GBNF (using the rule `char`) for the JSON-encoded strings in which `pattern` finds a match."""
    if not isinstance(pattern, str):
        raise PatternError(f"pattern must be a string, not {type(pattern).__name__}")
    return Parser(pattern).top() or '""'
