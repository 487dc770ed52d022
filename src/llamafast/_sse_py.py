"""The SSE reader, pure twin (05-loopd-sse.md plus API.md's WHATWG rules).

SKELETON: to be written. Public names: SseDecoder, Events, iter_events, aiter_events.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

from ._values import SseItem

MAX_LINE = 1 << 20


class SseDecoder:
    def __init__(self, max_line: int = MAX_LINE) -> None:
        raise NotImplementedError

    def feed(self, data: bytes | bytearray | memoryview) -> list[SseItem]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Events:
    def __init__(self, reader: Any, max_line: int = MAX_LINE) -> None:
        raise NotImplementedError

    def next_item(self) -> SseItem | None:
        raise NotImplementedError

    def __iter__(self) -> Iterator[SseItem]:
        raise NotImplementedError


def iter_events(source: Iterable[bytes], max_line: int = MAX_LINE) -> Iterator[SseItem]:
    raise NotImplementedError


def aiter_events(source: AsyncIterable[bytes], max_line: int = MAX_LINE) -> AsyncIterator[SseItem]:
    raise NotImplementedError
