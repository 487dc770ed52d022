# Strategy: the whole answer is read with json (its base64 strings are one str each, never a float
# per value), each base64 vector is decoded by binascii straight into its row of one bytearray
# for the whole call, and its finiteness is checked on the bytes (the exponent bits), not value by
# value. A list of numbers (a server or endpoint without base64) does go through a float per value:
# json makes them, array('f') packs them. The answer is read by _strict_json.parse, as strictly as
# simdjson reads it (docs/assembler.md, rule STRICT-JSON: no byte order mark, no lone surrogate,
# numbers in range, at most MAX_DEPTH deep). `finish` hands the rows over as `bytes`, which no one
# can write. The Cython twin (_vectors_c.pyx) has the same rules.
"""The vectors of `/v1/embeddings` answers into one float32 buffer, pure twin."""

from __future__ import annotations

import binascii
import sys
from array import array
from collections.abc import Sequence

from .._errors import (
    E_BAD_INDEX,
    E_BASE64,
    E_EMPTY,
    E_EXTRA,
    E_LENGTH,
    E_MISSING,
    E_NO_EMBEDDING,
    E_NOT_FINITE,
    E_NOT_JSON,
    E_NOT_LIST,
    E_NOT_NUMBER,
    E_PARTIAL,
    E_REPEATED,
    embedding_error,
)
from .._limits import COUNT_MAX
from .._strict_json import parse as strict_parse
from .._values import Usage
from ._embeddings import Embeddings, rows_bytes, text_count, texts_in_call

__all__ = ["Vectors"]

_BIG = sys.byteorder == "big"
# A little-endian float32 is not finite when its exponent bits are all ones: the high byte's low
# seven bits and the next byte's top bit. Per byte, 1 where that part is all ones.
_HIGH = bytes(1 if b & 0x7F == 0x7F else 0 for b in range(256))
_NEXT = bytes(1 if b & 0x80 else 0 for b in range(256))


def first_not_finite(raw: bytes | bytearray | memoryview) -> int:
    """The position of the first value of little-endian float32 `raw` that is not finite
    (infinity or NaN), or -1: a few passes over the bytes, no float object made."""
    high = bytes(raw[3::4]).translate(_HIGH)
    nxt = bytes(raw[2::4]).translate(_NEXT)
    both = int.from_bytes(high, "big") & int.from_bytes(nxt, "big")
    if not both:
        return -1
    return both.to_bytes(len(high), "big").find(1)


class Vectors:
    """The rows of one `embed` call of `n` texts, filled by `add` from each request's answer
    (in any order), then `finish()`: the Embeddings. The first vector fixes the dimension;
    every fault of an answer is a ProtocolError naming the text (_errors.embedding_error)."""

    def __init__(self, n: int) -> None:
        self.n = text_count(n)
        self._dim = 0
        self._rows: bytearray | None = None
        self.model: str | None = None
        self.prompt_tokens = -1

    @property
    def dim(self) -> int:
        """The vectors' length, once the first has come (0 before)."""
        return self._dim

    def add(self, parts: Sequence[bytes | memoryview], first: int, count: int) -> None:
        """Decode the answer (the body's pieces, in order) to the request for the texts
        `first` to `first + count - 1`, into their rows."""
        first, count = texts_in_call(first, count, self.n)
        body = b"".join(parts)
        try:
            doc = strict_parse(body.decode("utf-8"), body)
        except ValueError:  # the strict reader's only fault, at any depth
            raise embedding_error(E_NOT_JSON, first, 0, count, body) from None
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
            raise embedding_error(E_NOT_LIST, first, 0, count, body)
        seen = bytearray(count)
        order: list[int] = []
        for pos, item in enumerate(data):
            text = first + pos
            if pos >= count:
                raise embedding_error(E_EXTRA, text, 0, count, body)
            self._row(item.get("embedding"), first + pos, text, body)
            index = item.get("index")
            if type(index) is not int or not 0 <= index < count:
                raise embedding_error(E_BAD_INDEX, text, 0, count, body)
            if seen[index]:
                raise embedding_error(E_REPEATED, text, index, count, body)
            seen[index] = 1
            order.append(index)
        if len(data) < count:
            raise embedding_error(E_MISSING, first + seen.index(0), 0, count, body)
        if order != sorted(order):
            self._reorder(first, order)
        model = doc.get("model")
        if self.model is None and isinstance(model, str):
            self.model = model
        usage = doc.get("usage")
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        # a count is 0 to COUNT_MAX; the call's total stops there (docs/client.md, EMBEDDINGS)
        if type(tokens) is int and 0 <= tokens <= COUNT_MAX:
            self.prompt_tokens = min(max(self.prompt_tokens, 0) + tokens, COUNT_MAX)

    def _row(self, vec: object, row: int, text: int, body: bytes) -> None:
        """Decode one vector into row `row`."""
        if isinstance(vec, str):
            try:
                # whole quads only: binascii before 3.13 takes '=' after them ("AAAA=")
                if len(vec) % 4:
                    raise ValueError(vec)
                raw = binascii.a2b_base64(vec, strict_mode=True)
            except (ValueError, binascii.Error):
                raise embedding_error(E_BASE64, text, 0, 0, body) from None
            if len(raw) % 4:
                raise embedding_error(E_PARTIAL, text, len(raw), 0, body)
            got = len(raw) // 4
        elif isinstance(vec, list):
            if not all(type(v) is float or type(v) is int for v in vec):
                at = next(
                    i for i, v in enumerate(vec) if type(v) is not float and type(v) is not int
                )
                raise embedding_error(E_NOT_NUMBER, text, at, 0, body)
            got = len(vec)
            try:
                packed = array("f", vec)
            except OverflowError:  # an int too large for a double
                packed = array("f", (float("inf"),) * got)  # fails the finiteness check below
            if _BIG:
                packed.byteswap()
            raw = packed.tobytes()
        else:
            raise embedding_error(E_NO_EMBEDDING, text, 0, 0, body)
        if not got:
            raise embedding_error(E_EMPTY, text, 0, 0, body)
        if self._rows is None:
            self._rows = bytearray(rows_bytes(self.n, got))
            self._dim = got
        elif got != self._dim:
            raise embedding_error(E_LENGTH, text, got, self._dim, body)
        at = first_not_finite(raw)
        if at >= 0:
            raise embedding_error(E_NOT_FINITE, text, at, 0, body)
        size = 4 * self._dim
        assert self._rows is not None
        self._rows[row * size : (row + 1) * size] = raw

    def _reorder(self, first: int, order: list[int]) -> None:
        """The rows of one answer came as `order` (each row's index): put each at its index."""
        assert self._rows is not None
        size = 4 * self._dim
        start = first * size
        block = bytes(self._rows[start : start + len(order) * size])
        for pos, index in enumerate(order):
            self._rows[start + index * size : start + (index + 1) * size] = block[
                pos * size : (pos + 1) * size
            ]

    def finish(self) -> Embeddings:
        """The Embeddings, once every request's answer has been added."""
        if self._rows is None:
            raise embedding_error(E_MISSING, 0, 0, self.n, b"")
        rows, self._rows = self._rows, None
        if _BIG:  # the rows were written little-endian
            native = array("f", rows)
            native.byteswap()
            data = native.tobytes()
        else:
            data = bytes(rows)  # one copy, that no one can write (docs/client.md, EMBEDDINGS)
        del rows
        usage = None if self.prompt_tokens < 0 else Usage(self.prompt_tokens, 0)
        return Embeddings._of_rows(data, self.n, self._dim, self.model, usage)
