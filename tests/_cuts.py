# Every tests' reader of bytes "as they might arrive" splits them at cut points: here, once. A
# cut list is taken as a set (order and repeats do not matter), so a hypothesis-drawn list and a
# hand-written one mean the same split.
"""Bytes fed in pieces at given cut points: `pieces` splits, `fill` writes them into a parser."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any


def pieces(data: bytes, cuts: Iterable[int], *, empty: bool = False) -> list[bytes]:
    """`data` split at `cuts` (each between 0 and len(data)), in order; the pieces of no bytes
    (a cut at 0 or at the end) are left out unless `empty`."""
    bounds = [0, *sorted(set(cuts)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if empty or b > a]


def fill(parser: Any, raw: bytes, cuts: Iterable[int]) -> Iterator[list[Any]]:
    """`raw` written into a ResponseParser's `free()` in the pieces `cuts` makes (a piece larger
    than the free space in several writes), yielding what each `filled(n)` hands out: views
    valid until the next write, so the caller uses them before asking for the next."""
    for piece in pieces(raw, cuts):
        at = 0
        while at < len(piece):
            free = parser.free()
            n = min(len(free), len(piece) - at)
            free[:n] = piece[at : at + n]
            at += n
            yield parser.filled(n)
