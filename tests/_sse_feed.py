"""Run one byte stream through a twin's SSE reader, in every way it can arrive.

`chunks_of(stream, mode)` splits a stream: "whole", "bytes" (one byte per read) or a list of cut
points (drawn by hypothesis). `outcomes(impl, chunks, max_line)` feeds the chunks through every
entry point (SseDecoder, Events over each kind of reader, iter_events, aiter_events) and returns
each one's (items, error) where error is `describe(exception)`: (class name, args) or None. On
the way it checks what every run must show: an error is latched (asked again, the same error),
and a clean end stays clean (None again, with no further read).
"""

from __future__ import annotations

import collections
import types
from collections.abc import AsyncIterator, Coroutine, Iterable, Sequence
from typing import Any

from _cuts import pieces
from llamafast import SseError

Error = tuple[str, tuple[Any, ...]] | None
Outcome = tuple[list[Any], Error]

MODES = ("whole", "bytes")


def describe(error: BaseException | None) -> Error:
    """What two errors must share to count as the same: their class and their args."""
    return None if error is None else (type(error).__name__, error.args)


def chunks_of(stream: bytes, mode: str | Sequence[int]) -> list[bytes]:
    """`stream` split as it might arrive: whole, one byte per read, or at the given cut points."""
    if mode == "whole":
        return [stream] if stream else []
    if mode == "bytes":
        return [stream[i : i + 1] for i in range(len(stream))]
    assert not isinstance(mode, str)
    return pieces(stream, mode)


class ReadAfterEnd(AssertionError):
    """A reader was read again after it had reported its end or a fault was already known."""


class ChunkReader:
    """A blocking reader handing out `chunks` one per read (at most n bytes of one), then b"".

    `end`, when given, is raised instead of returning b"" (every time it is asked). Reading after
    the b"" raises ReadAfterEnd. `calls` records (method name, size asked for).
    """

    def __init__(self, chunks: Iterable[bytes], end: BaseException | None = None) -> None:
        self.chunks = collections.deque(chunks)
        self.end = end
        self.calls: list[tuple[str, int]] = []
        self.ended = False

    def _next(self, n: int) -> bytes:
        if not self.chunks:
            if self.end is not None:
                raise self.end
            if self.ended:
                raise ReadAfterEnd("read again after the end of the stream")
            self.ended = True
            return b""
        chunk = self.chunks.popleft()
        if n >= 0 and len(chunk) > n:
            self.chunks.appendleft(chunk[n:])
            chunk = chunk[:n]
        return chunk

    def _into(self, name: str, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        self.calls.append((name, len(view)))
        chunk = self._next(len(view))
        view[: len(chunk)] = chunk
        return len(chunk)

    def read(self, n: int = -1) -> bytes:
        self.calls.append(("read", n))
        return self._next(n)


class IntoReader(ChunkReader):
    def readinto(self, buffer: Any) -> int:
        return self._into("readinto", buffer)


class Read1Reader(IntoReader):
    def read1(self, n: int = -1) -> bytes:
        self.calls.append(("read1", n))
        return self._next(n)


class Into1Reader(Read1Reader):
    def readinto1(self, buffer: Any) -> int:
        return self._into("readinto1", buffer)


# Each kind of reader and the method Events must read it with (docs/sse.md, rule READER).
READERS: dict[str, type[ChunkReader]] = {
    "read": ChunkReader,
    "readinto": IntoReader,
    "read1": Read1Reader,
    "readinto1": Into1Reader,
}


def run_decoder(impl: types.SimpleNamespace, chunks: Iterable[bytes], max_line: int) -> Outcome:
    decoder = impl.SseDecoder(max_line)
    items: list[Any] = []
    try:
        for chunk in chunks:
            items += decoder.feed(chunk)
        decoder.close()
    except SseError as error:
        for again in (lambda: decoder.feed(b"data: more\n"), decoder.close):
            try:
                again()
            except SseError as latched:
                assert describe(latched) == describe(error), "the fault is latched"
            else:
                raise AssertionError(f"the fault {error!r} was not raised again")
        return items, describe(error)
    decoder.close()  # a clean end stays clean
    return items, None


def run_events(
    impl: types.SimpleNamespace,
    chunks: Iterable[bytes],
    max_line: int,
    reader: ChunkReader | None = None,
) -> Outcome:
    reader = Into1Reader(chunks) if reader is None else reader
    events = impl.Events(reader, max_line)
    items: list[Any] = []
    try:
        while (item := events.next_item()) is not None:
            items.append(item)
    except SseError as error:
        reads = len(reader.calls)
        try:
            events.next_item()
        except SseError as latched:
            assert describe(latched) == describe(error), "the error is latched"
        else:
            raise AssertionError(f"the error {error!r} was not raised again") from None
        assert len(reader.calls) == reads, "a latched error does not read again"
        return items, describe(error)
    assert events.next_item() is None, "None again if asked again"
    return items, None


def run_iter(impl: types.SimpleNamespace, chunks: Iterable[bytes], max_line: int) -> Outcome:
    items: list[Any] = []
    try:
        for item in impl.iter_events(iter(chunks), max_line):
            items.append(item)
    except SseError as error:
        return items, describe(error)
    return items, None


async def _agen(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def _acollect(impl: types.SimpleNamespace, chunks: Iterable[bytes], max_line: int) -> Outcome:
    items: list[Any] = []
    try:
        async for item in impl.aiter_events(_agen(chunks), max_line):
            items.append(item)
    except SseError as error:
        return items, describe(error)
    return items, None


def run_sync(coro: Coroutine[Any, Any, Outcome]) -> Outcome:
    """Run a coroutine that never waits on anything, without an event loop (fast)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        result: Outcome = stop.value
        return result
    coro.close()
    raise AssertionError("the coroutine waited for something")


def run_aiter(impl: types.SimpleNamespace, chunks: Iterable[bytes], max_line: int) -> Outcome:
    return run_sync(_acollect(impl, chunks, max_line))


def outcomes(
    impl: types.SimpleNamespace, chunks: Sequence[bytes], max_line: int
) -> dict[str, Outcome]:
    """(items, error) of every entry point for the same chunks."""
    found = {
        "SseDecoder": run_decoder(impl, chunks, max_line),
        "iter_events": run_iter(impl, chunks, max_line),
        "aiter_events": run_aiter(impl, chunks, max_line),
    }
    for kind, reader in READERS.items():
        found[f"Events/{kind}"] = run_events(impl, chunks, max_line, reader(chunks))
    return found


def assert_outcome(
    impl: types.SimpleNamespace, chunks: Sequence[bytes], max_line: int, expected: Outcome
) -> None:
    """Every entry point gives `expected` for these chunks."""
    for via, got in outcomes(impl, chunks, max_line).items():
        assert got == expected, f"{via} with chunks {list(chunks)!r}"
