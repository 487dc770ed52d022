"""Tool-call arguments parsed while they stream: an incremental, strict JSON parser.

The text is fed piece by piece and each piece is scanned once: the parser keeps its place (a
stack of open containers, the string or number being read), so asking for the value after every
piece costs the new characters, not a re-parse of the whole text. Strings are decoded a run at a
time by the standard library's C scanner. The one cost that grows with the text is handing out
a str for a string still being read: Python strings are immutable, so each value holds a fresh
copy of it (made at memory speed, far below the parse).

What a prefix is worth (`PartialJson.value`), decided by what an agent can act on:
- a string being read is kept as far as it goes (an escape not yet whole is left out);
- a number or a `true`/`false`/`null` being read is left out: a number may still grow, and a
  word is not a value until it is whole; `final=True` (the text is all there) ends a number;
- an object member appears once its key is whole and its value has begun (a string or a
  container) or has ended (a number or a word); a key still being read, or one waiting for its
  value, is left out; an array holds its elements the same way;
- a container that has begun is there, even empty: `{"a": [1, 2` is `{"a": [1]}`;
- nothing begun yet is None (as is a word or number being read at the top level).

It is exactly as strict as the assembler's parse of a payload: no NaN or Infinity, integers
within int64/uint64, floats that stay finite, no lone surrogate (escaped or raw), no control
character inside a string, nesting at most MAX_DEPTH deep, only white space after the value. A
fault raises `JsonFault` with the position (a character offset in the whole text), and is raised
again by every later call.
"""

from __future__ import annotations

import json.decoder
import math
import re
from collections.abc import Callable
from typing import Any, Final

from ._errors import JsonFault, ProtocolError
from ._limits import JSON_INT_MAX, JSON_INT_MIN, MAX_DEPTH

__all__ = ["MAX_DEPTH", "JsonFault", "PartialJson", "locate", "partial_arguments"]

_INT_MIN: Final = JSON_INT_MIN  # the integers simdjson holds: int64 or uint64
_INT_MAX: Final = JSON_INT_MAX

# What the parser expects next.
_VALUE: Final = 0  # a value (after ':' or ',' in an array, or at the top)
_FIRST_ITEM: Final = 1  # after '[': a value or ']'
_FIRST_KEY: Final = 2  # after '{': a key or '}'
_KEY: Final = 3  # after ',' in an object: a key
_COLON: Final = 4  # after a key
_AFTER: Final = 5  # after a value inside a container: ',' or the closer
_STRING: Final = 6  # inside a string (a key when _key_open)
_NUMBER: Final = 7  # inside a number
_WORD: Final = 8  # inside true / false / null
_END: Final = 9  # the top-level value is whole: only white space may follow

_WS: Final = re.compile(r"[ \t\n\r]*")
# A run of string characters needing no attention: not a quote, a backslash, a control
# character or a surrogate (a str holds a surrogate only when it is lone: not valid UTF-8).
_PLAIN: Final = re.compile('[^"\\\\\x00-\x1f\ud800-\udfff]*')
_NUMBER_CHARS: Final = re.compile(r"[0-9eE.+\-]*")
_NUMBER_RE: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_HEX4: Final = re.compile(r"[0-9a-fA-F]{4}")
_ESCAPES: Final = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}
_HEX: Final = "0123456789abcdefABCDEF"
# The escape of a low surrogate, character by character: \uDC00 to \uDFFF.
_LOW_ESCAPE: Final = ("\\", "u", "dD", "cdefCDEF", _HEX, _HEX)
_WORDS: Final = {"t": ("true", True), "f": ("false", False), "n": ("null", None)}
_ABSENT: Final[Any] = object()


_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_OPEN_ESCAPE: Final = re.compile(r"\\u[0-9a-fA-F]{0,3}$")  # a \u escape not yet whole
_HIGH_ESCAPE: Final = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}$")  # waits for its low half
# The C string scanner where it is built (typeshed does not declare the attribute):
# (text, end after the opening quote, strict) -> (decoded, end after the closing quote).
_scanstring: Final[Callable[[str, int, bool], tuple[str, int]]] = json.decoder.scanstring  # type: ignore[attr-defined]


def _span_end(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where a run of `pattern` (a `*` pattern: it always matches) starting at `pos` ends."""
    return pattern.match(text, pos).end()  # type: ignore[union-attr]


def _odd_backslashes(buf: str, start: int, end: int) -> bool:
    """Whether buf[start:end] ends in an odd run of backslashes (the last one escapes)."""
    i = end
    while i > start and buf[i - 1] == "\\":
        i -= 1
    return (end - i) % 2 == 1


def _safe_end(buf: str, pos: int, n: int) -> int:
    """Where the string characters of buf[pos:n] (no closing quote there) end less an escape
    not yet whole: a lone backslash, a short \\u escape, a high surrogate's escape waiting
    for its low half (with or without the start of that half)."""
    stop = n
    for _ in range(2):
        tail_from = max(pos, stop - 12)
        if _odd_backslashes(buf, pos, stop):
            stop -= 1
            continue
        m = _OPEN_ESCAPE.search(buf, tail_from, stop)
        if m is None:
            m = _HIGH_ESCAPE.search(buf, tail_from, stop)
        if m is None or _odd_backslashes(buf, pos, m.start()):
            break
        stop = m.start()
    return stop


class PartialJson:
    """Feed a JSON text in pieces (`feed`); `value()` is what the text so far is worth."""

    __slots__ = (
        "_buf",
        "_fault",
        "_frames",
        "_key_open",
        "_offset",
        "_parts",
        "_pos",
        "_root",
        "_scan",
        "_state",
        "_token",
    )

    def __init__(self) -> None:
        self._buf = ""  # the text not consumed yet starts at _buf[_pos]
        self._pos = 0
        self._offset = 0  # the position in the whole text of _buf[0]
        self._state = _VALUE
        # The open containers, outermost first: [container, key]; key is the member whose value
        # is being read (objects) or None. An open container enters its parent when it closes.
        self._frames: list[list[Any]] = []
        self._parts: list[str] = []  # the string being read, decoded so far
        self._key_open = False  # that string is an object key
        self._token = 0  # where the number or word being read starts in _buf
        self._scan = 0  # how far into _buf that number has been scanned
        self._root: Any = _ABSENT  # the top-level value once whole
        self._fault: JsonFault | None = None

    @property
    def fault(self) -> JsonFault | None:
        return self._fault

    def feed(self, text: str) -> None:
        """Scan `text`, the next piece; raises JsonFault at the first fault (and ever after)."""
        if self._fault is not None:
            raise self._fault
        if self._pos:
            # Drop what was consumed; what is kept is a token not yet whole (a number, a word,
            # an escape), so this costs no more than the new piece and that short tail.
            cut = min(self._pos, self._token) if self._state in (_NUMBER, _WORD) else self._pos
            self._buf = self._buf[cut:]
            self._offset += cut
            self._pos -= cut
            self._token -= cut
            self._scan -= cut
        self._buf += text
        try:
            self._run()
        except JsonFault as fault:
            self._fault = fault
            raise

    def _fail(self, reason: str, at: int) -> JsonFault:
        return JsonFault(reason, self._offset + at)

    # The parser's hot loop: it runs from the saved state over the new text until the text
    # ends (state and position saved) or a fault. The states are the module's: inside a
    # _STRING (a key when _key_open), a _NUMBER or a _WORD; expecting a _VALUE, a _FIRST_ITEM
    # or ']', a _FIRST_KEY or '}', a _KEY, a _COLON, or, _AFTER a value, ',' or the closer;
    # and _END, where only white space may follow.
    def _run(self) -> None:
        buf = self._buf
        n = len(buf)
        pos = self._pos
        state = self._state
        frames = self._frames
        while True:
            if state == _STRING:
                pos = self._string(buf, pos, n)
                if pos < 0:  # the string goes on past the text so far
                    self._pos = -pos - 1
                    self._state = _STRING
                    return
                text = "".join(self._parts)
                self._parts = []
                if self._key_open:
                    self._key_open = False
                    frames[-1][1] = text
                    state = _COLON
                    continue
                state = self._close_value(text)
                continue
            if state == _NUMBER:
                end = _span_end(_NUMBER_CHARS, buf, self._scan)
                if end == n:  # may still grow
                    self._scan = end
                    self._pos = n
                    self._state = _NUMBER
                    return
                pos = end
                state = self._close_value(self._number(buf, self._token, end))
                continue
            if state == _WORD:
                word, literal = _WORDS[buf[self._token]]
                have = buf[self._token : self._token + len(word)]
                if not word.startswith(have):
                    raise self._bad_value(buf, self._token)
                if len(have) < len(word):
                    self._pos = n
                    self._state = _WORD
                    return
                pos = self._token + len(word)
                state = self._close_value(literal)
                continue
            pos = _span_end(_WS, buf, pos)
            if pos == n:
                self._pos = pos
                self._state = state
                return
            c = buf[pos]
            if state == _VALUE or state == _FIRST_ITEM:
                if c == "]" and state == _FIRST_ITEM:
                    pos += 1
                    state = self._close_container()
                    continue
                if c == '"':
                    pos += 1
                    state = _STRING
                elif c == "{" or c == "[":
                    if len(frames) >= MAX_DEPTH:
                        raise self._fail(f"nested deeper than {MAX_DEPTH}", pos)
                    frames.append([{} if c == "{" else [], None])
                    pos += 1
                    state = _FIRST_KEY if c == "{" else _FIRST_ITEM
                elif c == "-" or "0" <= c <= "9":
                    self._token = pos
                    self._scan = pos
                    state = _NUMBER
                elif c in _WORDS:
                    self._token = pos
                    state = _WORD
                else:
                    raise self._bad_value(buf, pos)
            elif state == _FIRST_KEY or state == _KEY:
                if c == '"':
                    pos += 1
                    self._key_open = True
                    state = _STRING
                elif c == "}" and state == _FIRST_KEY:
                    pos += 1
                    state = self._close_container()
                else:
                    raise self._fail("expecting a property name in double quotes", pos)
            elif state == _COLON:
                if c != ":":
                    raise self._fail("expecting ':' after a property name", pos)
                pos += 1
                state = _VALUE
            elif state == _AFTER:
                container = frames[-1][0]
                if c == ",":
                    pos += 1
                    state = _KEY if type(container) is dict else _VALUE
                elif c == ("}" if type(container) is dict else "]"):
                    pos += 1
                    state = self._close_container()
                else:
                    closer = "'}'" if type(container) is dict else "']'"
                    raise self._fail(f"expecting ',' or {closer}", pos)
            else:  # _END
                raise self._fail("extra data after the JSON value", pos)

    def _bad_value(self, buf: str, at: int) -> JsonFault:
        if buf.startswith(("NaN", "Infinity"), at):
            return self._fail("NaN and Infinity are not JSON", at)
        return self._fail("expecting a value", at)

    def _string(self, buf: str, pos: int, n: int) -> int:
        """Read string characters from `pos`: the position after the closing quote, or -p-1
        where p is where reading must resume once more text has come.

        The standard library's C scanner decodes the run up to the closing quote, or up to
        where the text so far ends less an escape not yet whole; anything it refuses, and any
        surrogate it lets through (json keeps a lone one), goes to `_slow_string`, which finds
        the fault and its position (or reads what the fast path could not)."""
        end = buf.find('"', pos)
        while end > 0 and _odd_backslashes(buf, pos, end):  # an escaped quote: not the end
            end = buf.find('"', end + 1)
        if end >= 0:
            stop = end
            segment = buf[pos : end + 1]
        else:
            stop = _safe_end(buf, pos, n)
            segment = buf[pos:stop] + '"'
        try:
            text, _ = _scanstring(segment, 0, True)
        except ValueError:
            return self._slow_string(buf, pos, n)
        if _SURROGATE.search(text):
            return self._slow_string(buf, pos, n)
        if text:
            self._parts.append(text)
        return end + 1 if end >= 0 else -stop - 1

    def _slow_string(self, buf: str, pos: int, n: int) -> int:
        """`_string` a character at a time: exact about every fault and its position."""
        parts = self._parts
        while True:
            end = _span_end(_PLAIN, buf, pos)
            if end > pos:
                parts.append(buf[pos:end])
                pos = end
            if pos == n:
                return -pos - 1
            c = buf[pos]
            if c == '"':
                return pos + 1
            if c != "\\":
                if c < " ":
                    raise self._fail("a control character inside a string", pos)
                raise self._fail("a lone surrogate inside a string", pos)
            if pos + 1 == n:
                return -pos - 1
            e = buf[pos + 1]
            if e != "u":
                if e not in _ESCAPES:
                    raise self._fail("an invalid escape", pos)
                parts.append(_ESCAPES[e])
                pos += 2
                continue
            if pos + 6 > n:
                if not _HEX4.fullmatch(buf[pos + 2 : n].ljust(4, "0")):
                    raise self._fail("an invalid \\u escape", pos)
                return -pos - 1
            if not _HEX4.match(buf, pos + 2):
                raise self._fail("an invalid \\u escape", pos)
            code = int(buf[pos + 2 : pos + 6], 16)
            if 0xDC00 <= code <= 0xDFFF:
                raise self._fail("a lone surrogate escape", pos)
            if 0xD800 <= code <= 0xDBFF:  # a high surrogate: a low one's escape must follow
                low = buf[pos + 6 : pos + 12]
                if not all(ch in allowed for ch, allowed in zip(low, _LOW_ESCAPE, strict=False)):
                    raise self._fail("a lone surrogate escape", pos)
                if len(low) < 6:
                    return -pos - 1
                code = 0x10000 + ((code - 0xD800) << 10) + (int(low[2:], 16) - 0xDC00)
                parts.append(chr(code))
                pos += 12
                continue
            parts.append(chr(code))
            pos += 6

    def _number(self, buf: str, start: int, end: int) -> int | float:
        token = buf[start:end]
        m = _NUMBER_RE.fullmatch(token)
        if m is None:
            raise self._fail(f"not a number: {token[:40]!r}", start)
        if m.group(1) is None and m.group(2) is None:
            # 21 characters hold every integer in range (a sign and 20 digits); a longer one is
            # out of range and would be slow to convert
            value = int(token) if len(token) <= 21 else _INT_MAX + 1
            if not _INT_MIN <= value <= _INT_MAX:
                raise self._fail(f"the integer {token[:40]} is out of range", start)
            return value
        number = float(token)
        if math.isinf(number):
            raise self._fail(f"the number {token[:40]} is out of range", start)
        return number

    def _close_value(self, value: Any) -> int:
        """A whole value has been read: it goes into the open container, or is the root."""
        frames = self._frames
        if not frames:
            self._root = value
            return _END
        frame = frames[-1]
        container = frame[0]
        if type(container) is dict:
            container[frame[1]] = value
            frame[1] = None
        else:
            container.append(value)
        return _AFTER

    def _close_container(self) -> int:
        container = self._frames.pop()[0]
        return self._close_value(container)

    def value(self, final: bool = False) -> Any:
        """What the text so far is worth (see the module's rules); None when nothing is.

        `final`: the text is all there, so a number at its end is whole, and a value that has
        not ended is a JsonFault. The containers are fresh each call; the finished values inside
        them are shared with later calls' (copy before changing them).
        """
        if self._fault is not None:
            raise self._fault
        state = self._state
        if final:
            if state == _NUMBER and not self._frames:
                return self._number(self._buf, self._token, len(self._buf))
            if state != _END:
                raise self._fail("the text ends before the JSON value does", len(self._buf))
            return self._root
        if state == _END:
            return self._root
        child: Any = _ABSENT
        if state == _STRING and not self._key_open:
            child = "".join(self._parts)
            self._parts = [child] if child else []
        for frame in reversed(self._frames):
            container, key = frame
            copy = container.copy()
            if child is not _ABSENT:
                if type(copy) is dict:
                    copy[key] = child
                else:
                    copy.append(child)
            child = copy
        return None if child is _ABSENT else child


def locate(text: str) -> JsonFault | None:
    """The first fault of `text` as a whole JSON text, or None when it has none."""
    parser = PartialJson()
    try:
        parser.feed(text)
        parser.value(final=True)
    except JsonFault as fault:
        return fault
    return None


def partial_arguments(
    partials: dict[int, list[Any]], calls: list[list[Any]], index: Any, final: bool
) -> Any:
    """What an assembler's `partial_arguments(index)` returns, for both twins.

    `calls` is the assembler's `[id, name, [argument pieces]]` per tool call; `partials` keeps,
    per index, the parser and how many pieces it has read, so each call reads only new pieces.
    `final`: the stream has its finish reason, so the arguments are whole.
    """
    if type(index) is not int or not 0 <= index < len(calls):
        raise IndexError(f"there is no tool call {index!r}: {len(calls)} so far")
    call = calls[index]
    state = partials.get(index)
    if state is None:
        state = partials[index] = [PartialJson(), 0]
    parser, seen = state
    pieces = call[2]
    try:
        if seen < len(pieces):
            state[1] = len(pieces)
            parser.feed(pieces[seen] if seen + 1 == len(pieces) else "".join(pieces[seen:]))
        return parser.value(final)
    except JsonFault as fault:
        raise ProtocolError(
            f"tool call {index} (id {call[0]!r}, name {call[1]!r}) has arguments that are not "
            f"valid JSON at position {fault.position}: {fault.reason}"
        ) from None
