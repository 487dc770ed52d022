"""The response head's rules, which both HTTP parser twins follow (neither twin owns them): the
status line, the head's fields, which framing the body has and where the parser goes next, and
the error for a line that fills the whole buffer.

Both parsers find the head's end themselves (the Cython one in C) and hand the head here once
per response, so the head is read one way whichever twin runs; the per-chunk framing stays in
each twin. The parser states and framings are numbered here; the Cython twin's `cdef enum`s in
_http_c.pyx carry the same numbers.
"""

from __future__ import annotations

import re

from .._errors import HttpParseError

__all__ = [
    "CHUNKED",
    "CLOSE",
    "DATA",
    "DATA_END",
    "DONE",
    "HEAD",
    "LENGTH",
    "MAX_CONTENT_LENGTH",
    "SIZE",
    "TRAILER",
    "content_length",
    "parse_head",
    "status_line",
    "too_long",
]

# Where a parser is in one response: reading the head, a chunk-size line, body bytes, the CRLF
# after a chunk's data, a trailer line; or done.
HEAD, SIZE, DATA, DATA_END, TRAILER, DONE = range(6)
# How the body is framed: chunked, a Content-Length, or until the connection closes.
CHUNKED, LENGTH, CLOSE = range(3)
# A Content-Length is counted in a signed 64-bit integer (the Cython twin's), which no body
# reaches: a larger one is refused, not wrapped.
MAX_CONTENT_LENGTH = (1 << 63) - 1


def too_long(state: int, size: int) -> HttpParseError:
    """The error for a head, chunk-size line or trailer line that fills the whole buffer
    ."""
    what = {HEAD: "head", TRAILER: "trailer line"}.get(state, "chunk-size line")
    return HttpParseError(f"the response's {what} is longer than {size} bytes")


# HTTP/1.<digit> SP 3DIGIT [SP reason]: the code is three ASCII digits from 100 to 999; the
# reason is ignored, but holds no CR or NUL (the rule of a field value). (Each pattern here
# runs in time linear in the line: no two parts can match the same bytes.)
_STATUS_LINE = re.compile(rb"HTTP/1\.([0-9]) ([1-9][0-9][0-9])(?: [^\r\x00]*)?").fullmatch
# The field lines of a head, each a token for the name, the colon right after it, a value with
# no CR or NUL: the usual head, whose lines need no closer look.
_PLAIN_FIELDS = re.compile(rb"(?:\r\n[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n\x00]*)*").fullmatch
_TCHARS = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


# The status lines and heads read last, with what they say: one server answers a client's
# requests of one kind with the same head, byte for byte, so each is read once (a kept
# connection's next answer is then no work to read). A pure function's results, so the cache
# changes no answer; each caller gets its own headers dict. Bounded: emptied when full.
MAX_HEADS_READ = 16
_STATUS_READ: dict[bytes, int] = {}
Head = tuple[int, dict[str, str], bool, int, int, int]
_READ: dict[bytes, Head] = {}


def status_line(line: bytes) -> int:
    """The status code of a status line (without its CRLF); HttpParseError if it is not one.
    The parsers check it as soon as the line has come, not with the whole head, so a server
    that says something else and then waits is refused at once. The lines read are kept, as
    the heads are (`parse_head`)."""
    status = _STATUS_READ.get(line) if type(line) is bytes else None
    if status is not None:
        return status
    match = _STATUS_LINE(line)
    if match is None:
        raise HttpParseError(f"not an HTTP/1.1 status line: {line[:80]!r}")
    status = int(match[2])
    if type(line) is bytes:
        if len(_STATUS_READ) >= MAX_HEADS_READ:
            _STATUS_READ.clear()
        _STATUS_READ[line] = status
    return status


def parse_head(head: bytes) -> Head:
    """A response head without its blank line, its lines ended by CRLF: (status, headers with
    lower-case names, keep-alive, framing, body bytes left, parser state). The state is HEAD
    for an interim answer (1xx): the final answer's head comes next."""
    seen = _READ.get(head) if type(head) is bytes else None
    if seen is None:
        seen = _parse_head(bytes(head))
        if type(head) is bytes:  # not a caller's bytearray or view
            if len(_READ) >= MAX_HEADS_READ:
                _READ.clear()
            _READ[head] = seen
    status, headers, keep_alive, framing, left, state = seen
    return status, headers.copy(), keep_alive, framing, left, state


def _parse_head(head: bytes) -> Head:
    lines = head.split(b"\r\n")
    line = lines[0]
    status = status_line(line)
    if status == 101:  # we never ask to upgrade
        raise HttpParseError(
            f"the server switched protocols, which was not asked for: {line[:80]!r}"
        )
    headers = _fields(head, lines)
    if status < 200:  # interim: no body, whatever its fields say
        return status, headers, True, CLOSE, 0, HEAD
    connection = headers.get("connection", "").lower()
    tokens = _tokens(connection) if "," in connection else (connection,)
    http_1_0 = line[7:8] == b"0"  # its connections close unless the server says keep-alive
    keep_alive = "keep-alive" in tokens if http_1_0 else "close" not in tokens
    if status in (204, 304):  # no body, whatever the fields say
        return status, headers, keep_alive, CLOSE, 0, DONE
    codings = headers.get("transfer-encoding")
    if codings is not None:  # it overrides any Content-Length
        if http_1_0:  # HTTP/1.0 has no Transfer-Encoding: the framing is faulty
            raise HttpParseError(f"an HTTP/1.0 response with a Transfer-Encoding: {codings[:40]!r}")
        # We send neither TE nor Accept-Encoding, so chunked is the only coding a server may
        # apply. Any other (gzip, or a final coding that is not chunked, whose body would run
        # until close) is one we cannot decode: refused, never handed out as the body.
        if codings != "chunked" and _tokens(codings) != ["chunked"]:
            raise HttpParseError(
                f"a Transfer-Encoding other than chunked, which was not asked for: {codings[:40]!r}"
            )
        return status, headers, keep_alive, CHUNKED, 0, SIZE
    length = headers.get("content-length")
    if length is not None:
        left = content_length(length)
        return status, headers, keep_alive, LENGTH, left, DATA if left else DONE
    return status, headers, keep_alive, CLOSE, -1, DATA


def _tokens(value: str) -> list[str]:
    """A comma-separated list, lower-cased, without its empty elements."""
    return [t for t in (t.strip(" \t").lower() for t in value.split(",")) if t]


def _fields(head: bytes, lines: list[bytes]) -> dict[str, str]:
    """The field lines after the status line: names are tokens (no whitespace before the
    colon), lower-cased; values lose their surrounding SP/HT and hold no CR or NUL; a line
    that starts with SP/HT continues the one before (obs-fold, joined with one SP); a field
    repeated is one comma-separated list, in order."""
    headers: dict[str, str] = {}
    if _PLAIN_FIELDS(head, len(lines[0])) is not None:  # the usual head: no line to look into
        for raw in lines[1:]:
            name, _, value = raw.partition(b":")
            key = name.lower().decode("latin-1")
            text = value.strip(b" \t").decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        return headers
    key = ""  # the last field's name, which a folded line continues
    for raw in lines[1:]:
        folded = raw[:1] in (b" ", b"\t")  # obs-fold: it continues the line before
        if folded:
            if not key:
                raise HttpParseError(f"a folded header line with no header before it: {raw[:80]!r}")
            name, value = b"", raw
        else:
            name, colon, value = raw.partition(b":")
            if not colon:
                raise HttpParseError(f"a header line without a colon: {raw[:80]!r}")
            if not name or name.translate(None, _TCHARS):
                raise HttpParseError(f"a header name is not a token: {raw[:80]!r}")
        if b"\r" in value or b"\0" in value:
            raise HttpParseError(f"a header value holds a CR or NUL: {raw[:80]!r}")
        text = value.strip(b" \t").decode("latin-1")
        if not folded:
            key = name.lower().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        elif text:  # the value so far ends with the line this one continues
            headers[key] = f"{headers[key]} {text}"
    return headers


def content_length(text: str) -> int:
    """A Content-Length value: ASCII digits, at most MAX_CONTENT_LENGTH; a list of equal
    values (`5, 5`, or the field repeated) is that value."""
    values = [v for v in (v.strip(" \t") for v in text.split(",")) if v]
    if not values or not all(v.isascii() and v.isdigit() for v in values):
        raise HttpParseError(f"Content-Length is not a number: {text[:40]!r}")
    digits = {v.lstrip("0") or "0" for v in values}
    if len(digits) > 1:
        raise HttpParseError(f"Content-Length has differing values: {text[:40]!r}")
    value = digits.pop()
    if len(value) > 19 or int(value) > MAX_CONTENT_LENGTH:
        raise HttpParseError(f"Content-Length is larger than 2**63-1: {text[:40]!r}")
    return int(value)
