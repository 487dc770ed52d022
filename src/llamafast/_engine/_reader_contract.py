"""What a caller's reader must return, checked the same way by both SSE reader twins (neither
twin owns the rule): `readinto` / `readinto1` an int count within the buffer, `read` / `read1`
bytes, never None. Anything else would make the decoder read bytes the reader never wrote, or
take a non-blocking reader's "nothing yet" for the end of the stream; each is refused with the
TypeError or ValueError that says what the reader returned.
"""

from __future__ import annotations

from typing import TypeVar

from .._errors import cut

__all__ = ["check_chunk", "check_count"]


def check_count(got: object, size: int, method: str) -> int:
    """What a reader's readinto / readinto1 returned, if it is an int in [0, size]; else the
    TypeError or ValueError that says what it returned. Anything else would make the decoder
    read bytes the reader never wrote (a negative slice end, a count past what it filled) or
    take "nothing yet" (None, from a non-blocking reader) for the end of the stream."""
    if type(got) is int and 0 <= got <= size:
        return got
    if got is None:
        raise TypeError(
            f"{method} returned None (a non-blocking reader with no data yet?): the reader "
            "must block until it has bytes, and return their count"
        )
    if not isinstance(got, int) or isinstance(got, bool):
        raise TypeError(f"{method} returned {cut(got, 80)}, not the int count of bytes it wrote")
    if 0 <= got <= size:
        return int(got)
    raise ValueError(
        f"{method} returned {cut(got, 80)}, outside 0..{size} for a {size}-byte buffer"
    )


T = TypeVar("T")


def check_chunk(got: T | None, method: str) -> T:
    """What a reader's read / read1 returned, if it is not None (a non-blocking reader with no
    data yet, which must not pass for the end of the stream)."""
    if got is None:
        raise TypeError(
            f"{method} returned None (a non-blocking reader with no data yet?): the reader "
            'must block until it has bytes, and return b"" only at the end'
        )
    return got
