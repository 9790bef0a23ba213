"""Strict JSON, as the Java implementation reads it: duplicate keys, NaN and Infinity, invalid UTF-8 and
lone surrogates refused; depth bounded; and a value named in messages as the Java names it.
"""

from __future__ import annotations

import decimal
import json
import math
from typing import Iterable, Union

from .base import _I64_MAX


# ---------------------------------------------------------------------------------------------------------------
# strict JSON

class JsonError(ValueError):
    """JSON that is not valid, or valid JSON refused (a duplicate key, an integer beyond 64 bits, a lone
    surrogate, nesting deeper than the limit). ``position`` is the byte offset, ``problem`` the text."""

    def __init__(self, position: int, problem: str):
        super().__init__(f"at byte {position}: {problem}")
        self.position = position
        self.problem = problem


class _Refused(Exception):
    """Raised inside the fast parse when the input is one the strict reader refuses."""


def _refuse_constant(_: str) -> object:
    raise _Refused()


def _unique_pairs(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Refused()
    return d


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=_refuse_constant)
_I64_MIN = -(1 << 63)


def _within_limits(root: object, max_depth: int, check_strings: bool) -> bool:
    """True when the parsed value nests at most ``max_depth`` containers deep, every integer fits in 64
    bits, every float is finite, and (when ``check_strings``) no string holds a lone surrogate."""
    stack: list = [([root], 0)]
    while stack:
        container, depth = stack.pop()
        if depth > max_depth:
            return False
        if type(container) is dict:
            if check_strings and not all(_valid_text(k) for k in container):
                return False
            items: Iterable = container.values()
        else:
            items = container
        for x in items:
            t = type(x)
            if t is dict or t is list:
                stack.append((x, depth + 1))
            elif t is int:
                if not _I64_MIN <= x <= _I64_MAX:
                    return False
            elif t is float:
                if math.isinf(x):
                    return False
            elif t is str and check_strings and not _valid_text(x):
                return False
    return True


def _valid_text(s: str) -> bool:
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def parse_json(data: bytes, max_depth: int = 64) -> object:
    """Parses UTF-8 JSON strictly (RFC 8259, as ``io.engramhost.json.JsonReader``): one value, only JSON
    whitespace around it; duplicate keys, integers beyond 64 bits, out-of-range numbers, lone surrogates,
    NaN/Infinity and nesting deeper than ``max_depth`` are refused. Objects become dicts (key order kept),
    integers int, other numbers float. Raises :class:`JsonError` naming the byte position and the problem
    exactly as the Java reader does: input is parsed by :mod:`json` and checked, and refused input is read
    again by a byte-exact reader to say where and why."""
    data = bytes(data)
    try:
        text = data.decode("utf-8")
        root = _DECODER.decode(text)
        if _within_limits(root, max_depth, "\\u" in text):
            return root
    except (ValueError, RecursionError, _Refused):
        pass
    _StrictReader(data, max_depth).parse()
    raise JsonError(0, "refused by the JSON reader")  # reached only if the two readers disagreed


class _StrictReader:
    """A byte-at-a-time JSON reader with JsonReader's positions and wording, for input found invalid."""

    def __init__(self, data: bytes, max_depth: int):
        self.data = data
        self.end = len(data)
        self.pos = 0
        self.max_depth = max_depth

    def parse(self) -> object:
        self.skip_ws()
        value = self.value(0)
        self.skip_ws()
        if self.pos != self.end:
            raise JsonError(self.pos, f"unexpected {self.describe(self.pos)} after the value")
        return value

    def peek(self) -> int:
        return self.data[self.pos] if self.pos < self.end else -1

    def skip_ws(self) -> None:
        while self.pos < self.end and self.data[self.pos] in b" \t\n\r":
            self.pos += 1

    def describe(self, at: int) -> str:
        if at >= self.end:
            return "end of input"
        b = self.data[at]
        return f"'{chr(b)}'" if 0x21 <= b < 0x7F else f"byte 0x{b:x}"

    def value(self, depth: int) -> object:
        if self.pos >= self.end:
            raise JsonError(self.pos, "unexpected end of input, expected a value")
        b = self.data[self.pos]
        if b == 0x7B:
            return self.object(depth + 1)
        if b == 0x5B:
            return self.array(depth + 1)
        if b == 0x22:
            return self.string()
        for word, value in ((b"true", True), (b"false", False), (b"null", None)):
            if b == word[0]:
                if self.data[self.pos:self.pos + len(word)] != word:
                    raise JsonError(self.pos, f"invalid literal, expected {word.decode()}")
                self.pos += len(word)
                return value
        if b == 0x2D or 0x30 <= b <= 0x39:
            return self.number()
        raise JsonError(self.pos, f"unexpected {self.describe(self.pos)}, expected a value")

    def enter(self, depth: int) -> None:
        if depth > self.max_depth:
            raise JsonError(self.pos, f"nesting deeper than {self.max_depth} levels")

    def object(self, depth: int) -> dict:
        self.enter(depth)
        self.pos += 1
        out: dict = {}
        self.skip_ws()
        if self.peek() == 0x7D:
            self.pos += 1
            return out
        while True:
            self.skip_ws()
            key_at = self.pos
            if self.peek() != 0x22:
                raise JsonError(self.pos, f"unexpected {self.describe(self.pos)}, expected a string key")
            key = self.string()
            self.skip_ws()
            if self.peek() != 0x3A:
                raise JsonError(self.pos, f"unexpected {self.describe(self.pos)}, expected ':' after key")
            self.pos += 1
            self.skip_ws()
            v = self.value(depth)
            if key in out:
                raise JsonError(key_at, f'duplicate key "{key}"')
            out[key] = v
            self.skip_ws()
            c = self.peek()
            if c not in (0x2C, 0x7D):
                raise JsonError(self.pos, f"unexpected {self.describe(self.pos)}, expected ',' or '}}' in object")
            self.pos += 1
            if c == 0x7D:
                return out

    def array(self, depth: int) -> list:
        self.enter(depth)
        self.pos += 1
        out: list = []
        self.skip_ws()
        if self.peek() == 0x5D:
            self.pos += 1
            return out
        while True:
            self.skip_ws()
            out.append(self.value(depth))
            self.skip_ws()
            c = self.peek()
            if c not in (0x2C, 0x5D):
                raise JsonError(self.pos, f"unexpected {self.describe(self.pos)}, expected ',' or ']' in array")
            self.pos += 1
            if c == 0x5D:
                return out

    def digits(self) -> None:
        while 0x30 <= self.peek() <= 0x39:
            self.pos += 1

    def number(self) -> Union[int, float]:
        start = self.pos
        integral = True
        if self.peek() == 0x2D:
            self.pos += 1
        if self.peek() == 0x30:
            self.pos += 1
            if 0x30 <= self.peek() <= 0x39:
                raise JsonError(start, "leading zero in number")
        elif 0x30 <= self.peek() <= 0x39:
            self.digits()
        else:
            raise JsonError(self.pos, "expected a digit in number")
        if self.peek() == 0x2E:
            integral = False
            self.pos += 1
            if not 0x30 <= self.peek() <= 0x39:
                raise JsonError(self.pos, "expected a digit after '.' in number")
            self.digits()
        if self.peek() in (0x65, 0x45):
            integral = False
            self.pos += 1
            if self.peek() in (0x2B, 0x2D):
                self.pos += 1
            if not 0x30 <= self.peek() <= 0x39:
                raise JsonError(self.pos, "expected a digit in exponent")
            self.digits()
        text = self.data[start:self.pos].decode("ascii")
        if integral:
            if len(text) > 20 or not _I64_MIN <= int(text) <= _I64_MAX:
                raise JsonError(start, f"integer {text} does not fit in 64 bits")
            return int(text)
        value = float(text)
        if math.isinf(value):
            raise JsonError(start, f"number {text} is out of range")
        return value

    def string(self) -> str:
        start = self.pos
        self.pos += 1
        out: list = []
        while True:
            if self.pos >= self.end:
                raise JsonError(start, "unterminated string")
            b = self.data[self.pos]
            if b == 0x22:
                self.pos += 1
                return "".join(out)
            if b == 0x5C:
                out.append(self.escape())
            elif b < 0x20:
                raise JsonError(self.pos, f"control character 0x{b:x} in string (must be escaped)")
            elif b < 0x80:
                out.append(chr(b))
                self.pos += 1
            else:
                out.append(self.utf8(b))

    def escape(self) -> str:
        at = self.pos
        self.pos += 1
        if self.pos >= self.end:
            raise JsonError(at, "unterminated escape")
        c = self.data[self.pos]
        self.pos += 1
        simple = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x62: "\b", 0x66: "\f", 0x6E: "\n", 0x72: "\r", 0x74: "\t"}
        if c in simple:
            return simple[c]
        if c == 0x75:
            return self.unicode_escape(at)
        shown = chr(c) if 0x20 <= c < 0x7F else f"0x{c:x}"
        raise JsonError(at, f"invalid escape \\{shown}")

    def unicode_escape(self, at: int) -> str:
        c = self.hex4(at)
        if 0xD800 <= c <= 0xDBFF:
            if self.data[self.pos:self.pos + 2] == b"\\u":
                self.pos += 2
                low = self.hex4(at)
                if 0xDC00 <= low <= 0xDFFF:
                    return chr(0x10000 + ((c - 0xD800) << 10) + (low - 0xDC00))
            raise JsonError(at, f"unpaired surrogate \\u{c:x}")
        if 0xDC00 <= c <= 0xDFFF:
            raise JsonError(at, f"unpaired surrogate \\u{c:x}")
        return chr(c)

    def hex4(self, at: int) -> int:
        if self.pos + 4 > self.end:
            raise JsonError(at, "truncated \\u escape")
        digits = self.data[self.pos:self.pos + 4]
        if any(d not in b"0123456789abcdefABCDEF" for d in digits):
            raise JsonError(at, "invalid hex digit in \\u escape")
        self.pos += 4
        return int(digits, 16)

    def utf8(self, b0: int) -> str:
        at = self.pos
        if b0 & 0xE0 == 0xC0:
            n, cp, low = 1, b0 & 0x1F, 0x80
        elif b0 & 0xF0 == 0xE0:
            n, cp, low = 2, b0 & 0x0F, 0x800
        elif b0 & 0xF8 == 0xF0:
            n, cp, low = 3, b0 & 0x07, 0x10000
        else:
            raise JsonError(at, f"invalid UTF-8 byte 0x{b0:x}")
        if self.pos + n >= self.end:
            raise JsonError(at, "truncated UTF-8 sequence")
        for i in range(1, n + 1):
            b = self.data[self.pos + i]
            if b & 0xC0 != 0x80:
                raise JsonError(at, "invalid UTF-8 sequence")
            cp = cp << 6 | (b & 0x3F)
        if cp < low or cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
            raise JsonError(at, "invalid UTF-8 sequence (overlong, surrogate or beyond U+10FFFF)")
        self.pos += n + 1
        return chr(cp)


def _java_double(d: float) -> str:
    """A float as Java's ``Double.toString`` writes it: ``1.5``, ``100.0``, ``1.0E7``, ``1.25E-5``."""
    if d == 0:
        return "-0.0" if math.copysign(1.0, d) < 0 else "0.0"
    if 1e-3 <= abs(d) < 1e7:
        return repr(d)
    sign, digits, exponent = decimal.Decimal(repr(abs(d))).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    power = len(digits) - 1 + int(exponent)
    return ("-" if d < 0 else "") + text[0] + "." + (text[1:] or "0") + f"E{power}"


def _kind(v: object) -> str:
    """What a JSON value is, for a message (``SafetensorsHeader.kind``)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return 'the string "' + (v[:40] + "..." if len(v) > 40 else v) + '"'
    if isinstance(v, int):
        return f"the number {v}"
    if isinstance(v, float):
        return f"the number {_java_double(v)}"
    if isinstance(v, list):
        return "a list"
    return "an object"


def _quoted(name: str) -> str:
    """A name quoted for a message; one over 80 characters cut to its first 64, with its length in UTF-16
    units (Java's ``String.length``)."""
    if len(name) <= 80:
        return f"'{name}'"
    return f"'{name[:64]}...' ({len(name.encode('utf-16-le')) // 2} characters)"
