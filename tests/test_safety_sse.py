"""What legal Python around the SSE reader may do, in both twins: the reader keeps views of the
buffer it was handed, returns odd counts, calls back into the object it is feeding, threads share
one object, an object is used without its __init__, a read is cancelled, a line is very long.

None of it may corrupt memory, hand out a str that is not the bytes the reader wrote, or lose
or invent data: it works, or it is a named error that says what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import pickle
import socket
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import pytest

from _safety import (
    ALL_BUSY,
    UNINIT,
    QueueSource,
    Reader,
    achunks,
    fast_switching,
    queue_generator,
    share,
    split,
)
from llamafast import (
    LineTooLongError,
    LlamafastError,
    NotUtf8Error,
    SseError,
    TruncatedError,
)

# Lines with multi-byte UTF-8 (2, 3 and 4 bytes), so a rewritten byte in a scanned line would
# show as a wrong or invalid str rather than pass unnoticed.
TEXTS = [f"é{i}€{'x' * (i % 23)}😀ü" for i in range(120)]
BODY = b"".join(b"data: " + t.encode() + b"\n\n" for t in TEXTS)


# --- the buffer handed to readinto --------------------------------------------------------


def _keep_self(b: memoryview) -> tuple[Any, Callable[[Any], None]]:
    return b, lambda v: v.__setitem__(slice(None), b"\xff" * len(v))


def _keep_slice(b: memoryview) -> tuple[Any, Callable[[Any], None]]:
    return b[:], lambda v: v.__setitem__(slice(None), b"\xff" * len(v))


def _keep_cast(b: memoryview) -> tuple[Any, Callable[[Any], None]]:
    def scribble(v: memoryview) -> None:
        raw = v.cast("B")
        raw[:] = b"\xff" * len(raw)

    return b.cast("B").cast("I"), scribble


def _keep_memoryview(b: memoryview) -> tuple[Any, Callable[[Any], None]]:
    return memoryview(b), lambda v: v.__setitem__(slice(None), b"\xff" * len(v))


def _keep_ctypes(b: memoryview) -> tuple[Any, Callable[[Any], None]]:
    array = (ctypes.c_ubyte * len(b)).from_buffer(b)
    return array, lambda a: ctypes.memset(ctypes.addressof(a), 0xFF, len(a))


def _keep_picklebuffer(b: memoryview) -> tuple[Any, Callable[[Any], None]]:
    def scribble(p: pickle.PickleBuffer) -> None:
        raw = p.raw()
        raw[:] = b"\xff" * len(raw)

    return pickle.PickleBuffer(b), scribble


def _keep_obj(b: memoryview) -> tuple[Any, Callable[[Any], None]]:
    # the object behind the view: a new view of it made later, if it can be made at all
    def scribble(obj: Any) -> None:
        try:
            v = memoryview(obj)
        except BufferError:
            return  # the Cython twin refuses a view made after the read
        v[:] = b"\xff" * len(v)

    return b.obj, scribble


KEEPERS = {
    "self": _keep_self,
    "slice": _keep_slice,
    "cast": _keep_cast,
    "memoryview": _keep_memoryview,
    "ctypes": _keep_ctypes,
    "picklebuffer": _keep_picklebuffer,
    "obj": _keep_obj,
}


class KeepingReader:
    """Writes `chunks` one per readinto1, keeping a view (of one kind) of every buffer it is
    handed; before each read it writes 0xFF through the views it kept (the last few)."""

    def __init__(self, chunks: list[bytes], keep: str, last: int = 4) -> None:
        self.chunks = list(chunks)
        self.keeper = KEEPERS[keep]
        self.kept: list[tuple[Any, Callable[[Any], None], bytes]] = []
        self.last = last

    def scribble(self) -> None:
        for view, scribble, _ in self.kept:
            scribble(view)

    def readinto1(self, b: memoryview) -> int:
        self.scribble()
        chunk = self.chunks.pop(0) if self.chunks else b""
        b[: len(chunk)] = chunk
        view, scribble = self.keeper(b)
        self.kept = [*self.kept[-(self.last - 1) :], (view, scribble, bytes(b[:8]))]
        return len(chunk)


@pytest.mark.parametrize("keep", sorted(KEEPERS))
@pytest.mark.parametrize("size", [7, 300, 65536])
def test_a_kept_view_changes_nothing_already_read(impl: types.SimpleNamespace, keep, size):
    reader = KeepingReader(split(BODY, size), keep)
    got = list(impl.Events(reader))
    assert got == TEXTS
    reader.scribble()  # after the end too
    if keep != "obj":  # (the Cython twin gives no new view of `obj`)
        for view, _, _ in reader.kept:
            assert bytes(memoryview(view).cast("B")[:8]) == b"\xff" * 8  # still there


@pytest.mark.parametrize("keep", sorted(KEEPERS))
def test_a_kept_view_outlives_the_events_object(impl: types.SimpleNamespace, keep):
    """The memory a kept view points at stays alive (and readable, writable) after the Events
    and everything it read are gone."""
    reader = KeepingReader(split(BODY, 1000), keep)
    events = impl.Events(reader)
    assert list(events) == TEXTS
    del events
    gc.collect()
    for _ in range(50):  # churn the heap where the buffer was
        bytearray(b"\xab" * 140000)
    reader.scribble()
    if keep != "obj":  # (the Cython twin gives no new view of `obj`)
        for view, _, _ in reader.kept:
            assert bytes(memoryview(view).cast("B")[:8]) == b"\xff" * 8


@pytest.mark.parametrize("keep", sorted(KEEPERS))
def test_a_kept_view_changes_nothing_in_the_chat_stream(impl: types.SimpleNamespace, keep):
    lines = [
        b'data: {"id":"c","choices":[{"delta":{"content":"%s"}}]}\n\n' % t.encode()
        for t in TEXTS[:40]
    ]
    lines.append(b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
    reader = KeepingReader(split(b"".join(lines), 13), keep)
    stream = impl.ChatStream(reader)
    assert [e.text for e in stream] == TEXTS[:40]
    assert stream.completion.content == "".join(TEXTS[:40])


def test_a_view_made_after_the_read_is_refused(c_impl: types.SimpleNamespace) -> None:
    """The Cython buffer object behind the view (`memoryview.obj`) gives no view once the read
    has returned: one made then could reach bytes the decoder is scanning."""
    owners: list[Any] = []

    class Owners:
        def readinto1(self, b: memoryview) -> int:
            owners.append(b.obj)
            memoryview(b.obj).release()  # during the read: allowed
            if len(owners) > 1:
                return 0
            b[:7] = b"data: x"
            b[7:8] = b"\n"
            return 8

    events = c_impl.Events(Owners())
    assert events.next_item() == "x"
    with pytest.raises(BufferError, match="only while a read into it runs"):
        memoryview(owners[0])
    assert events.next_item() is None


def test_the_buffer_is_the_readers_to_keep_even_with_exports(impl: types.SimpleNamespace):
    """A PickleBuffer (a real export) of the buffer, kept: nothing is dropped, no BufferError."""
    kept: list[Any] = []

    class Pickling:
        def __init__(self) -> None:
            self.chunks = split(BODY, 5000)

        def readinto(self, b: memoryview) -> int:
            kept.append(pickle.PickleBuffer(b))
            chunk = self.chunks.pop(0) if self.chunks else b""
            b[: len(chunk)] = chunk
            return len(chunk)

    assert list(impl.Events(Pickling())) == TEXTS
    assert len(kept) == len(split(BODY, 5000)) + 1


class ScribbledReader:
    """readinto1, one chunk per read; keeps a ctypes array over every buffer it is handed, and
    a thread of its own writes 0xFF through all but the newest, without the GIL
    (ctypes.memset), for as long as the stream is read."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)
        self.kept: list[Any] = []
        self.done = threading.Event()
        self.passed = threading.Event()  # a pass over the kept views is over
        self.writes = 0
        self.thread = threading.Thread(target=self.scribble)
        self.thread.start()

    def scribble(self) -> None:
        while not self.done.is_set():
            for a in self.kept[:-1]:
                ctypes.memset(ctypes.addressof(a), 0xFF, len(a))
                self.writes += 1
            self.passed.set()
            time.sleep(0)

    def readinto1(self, b: memoryview) -> int:
        writes = self.writes
        while len(self.kept) > 1 and self.writes == writes:  # one write at least per read
            self.passed.clear()
            self.passed.wait(5)
        chunk = self.chunks.pop(0) if self.chunks else b""
        b[: len(chunk)] = chunk
        self.kept = [*self.kept[-3:], (ctypes.c_ubyte * len(b)).from_buffer(b)]
        return len(chunk)


@pytest.mark.parametrize("size", [11, 500])
def test_a_thread_writing_through_kept_views_changes_nothing(impl, size) -> None:
    for _ in range(5):
        reader = ScribbledReader(split(BODY, size))
        try:
            with fast_switching():
                assert list(impl.Events(reader)) == TEXTS
        finally:
            reader.done.set()
            reader.thread.join()
        assert reader.writes


def test_feed_copies_a_buffer_another_thread_writes(impl: types.SimpleNamespace) -> None:
    """feed(memoryview of a bytearray) while another thread's socket.recv_into rewrites it
    without the GIL: every item handed out is a well-formed str of what was there at some
    moment, never one built from bytes that changed after they were checked."""
    line = b"data: " + "é".encode() * 2000 + b"\n"
    buf = bytearray(line * 4)
    payload = memoryview(buf)[-4001:-1]  # the last line's text, rewritten in place
    ours, theirs = socket.socketpair()
    done = threading.Event()

    def send() -> None:
        pattern = "é".encode() * 50000 + b"A" + "é€".encode() * 20000
        with contextlib.suppress(OSError):  # the socket is shut down at the end
            while not done.is_set():
                theirs.sendall(pattern)

    def receive() -> None:
        with contextlib.suppress(OSError):
            while not done.is_set() and ours.recv_into(payload):
                pass

    threads = [threading.Thread(target=send), threading.Thread(target=receive)]
    for t in threads:
        t.start()
    items = 0
    try:
        for _ in range(400):
            decoder = impl.SseDecoder()
            try:
                got = decoder.feed(memoryview(buf))
            except NotUtf8Error:
                continue
            for item in got:
                assert item.encode("utf-8").decode("utf-8") == item
                assert item.isascii() == all(c < "\x80" for c in item)
                assert set(item) <= {"é", "A", "€"}
                items += 1
    finally:
        done.set()
        theirs.shutdown(socket.SHUT_RDWR)  # ends the sender and the receiver
        for t in threads:
            t.join()
        theirs.close()
        ours.close()
    assert items


# --- what readinto may return ---------------------------------------------------------------


class Returns:
    """A readinto reader that writes `chunk` and returns `value`."""

    def __init__(self, value: Any, chunk: bytes = b"data: ok\n") -> None:
        self.value = value
        self.chunk = chunk

    def readinto(self, b: memoryview) -> Any:
        b[: len(self.chunk)] = self.chunk
        return self.value


class Small(int):
    pass


@pytest.mark.parametrize(
    ("value", "error", "shown"),
    [
        (-1, ValueError, "returned -1, outside 0..65536"),
        (-65536, ValueError, "returned -65536, outside 0..65536"),
        (-(10**30), ValueError, f"returned {-(10**30)}, outside"),
        (65537, ValueError, "returned 65537, outside 0..65536 for a 65536-byte buffer"),
        (10**30, ValueError, f"returned {10**30}, outside"),
        (None, TypeError, "returned None (a non-blocking reader"),
        (9.0, TypeError, "returned 9.0, not the int count"),
        ("9", TypeError, "returned '9', not the int count"),
        (True, TypeError, "returned True, not the int count"),
        (b"9", TypeError, "returned b'9', not the int count"),
    ],
)
def test_readinto_must_return_a_count_in_range(impl, value, error, shown):
    events = impl.Events(Returns(value))
    with pytest.raises(error) as info:
        events.next_item()
    assert shown in str(info.value)
    assert str(info.value).startswith("readinto returned")


def test_readinto_may_return_an_int_subclass(impl: types.SimpleNamespace) -> None:
    class Once(Returns):
        def readinto(self, b: memoryview) -> Any:
            got = super().readinto(b)
            self.value = Small(0)
            return got

    assert list(impl.Events(Once(Small(9)))) == ["ok"]


def test_read_returning_none_is_not_the_end(impl: types.SimpleNamespace) -> None:
    class NonBlocking:
        def read1(self, n: int) -> Any:
            return None

    with pytest.raises(TypeError, match=r"^read1 returned None \(a non-blocking reader"):
        impl.Events(NonBlocking()).next_item()


def test_readinto_errors_say_the_same_in_both_twins(py_impl, c_impl) -> None:
    for value in (-1, 65537, None, 1.5, "x"):
        said = []
        for impl in (py_impl, c_impl):
            with pytest.raises((TypeError, ValueError)) as info:
                impl.Events(Returns(value)).next_item()
            said.append((type(info.value), str(info.value)))
        assert said[0] == said[1]


def test_bytes_the_reader_did_not_write_are_never_shown(impl: types.SimpleNamespace) -> None:
    """A count past what the reader wrote: the bytes past it are the buffer's own (zero), never
    what the heap held before (here: 0xAB, left there on purpose)."""
    for _ in range(50):
        junk = bytearray(b"\xab" * 65600)
        del junk

    class Once(Returns):
        def readinto(self, b: memoryview) -> Any:
            got = super().readinto(b)
            self.value, self.chunk = 0, b""
            return got

    events = impl.Events(Once(64, b"data: \xc3"))
    with pytest.raises(SseError) as info:
        list(events)
    shown = getattr(info.value, "partial", None) or getattr(info.value, "line", b"")
    assert shown[:7] == b"data: \xc3"
    assert set(shown[7:]) <= {0}


# --- one caller at a time -------------------------------------------------------------------


CALLBACKS: dict[str, Callable[[Any], Any]] = {
    "next": next,
    "next_item": lambda ev: ev.next_item(),
    "__init__": lambda ev: ev.__init__(Reader([b"data: other\n"])),
    "list": list,
}


@pytest.mark.parametrize("back", sorted(CALLBACKS))
@pytest.mark.parametrize("size", [3, 500])
def test_the_reader_calling_back_is_refused(impl: types.SimpleNamespace, back, size):
    reader = Reader(split(BODY, size))
    events = impl.Events(reader)
    reader.target, reader.back = events, CALLBACKS[back]
    assert list(events) == TEXTS  # the first caller goes on, losing nothing
    assert reader.raised and all(type(e) is RuntimeError for e in reader.raised)
    assert all(
        f"Events.next_item() was called while this Events {ALL_BUSY}" in str(e)
        or f"Events.__init__() was called while this Events {ALL_BUSY}" in str(e)
        for e in reader.raised
    )
    assert events.next_item() is None


def test_init_again_when_idle_starts_over(impl: types.SimpleNamespace) -> None:
    events = impl.Events(Reader([b"data: a\ndata: b\n"]))
    assert events.next_item() == "a"
    events.__init__(Reader([b"data: c\n"]))
    assert list(events) == ["c"]
    decoder = impl.SseDecoder()
    assert decoder.feed(b"data: x\ndata: part") == ["x"]
    decoder.__init__()
    assert decoder.feed(b"ial\ndata: y\n") == ["y"]  # nothing of the old partial line
    decoder.close()


def test_a_finalizer_inside_feed_is_refused(impl: types.SimpleNamespace) -> None:
    """A gc callback (what a finalizer is) that runs inside feed and calls feed on the same
    decoder gets RuntimeError; the outer feed's items are exactly right.

    The inner call feeds b"": harmless when a collection runs just outside the outer feed (the
    flag below cannot be exact to the bytecode), but inside it, unguarded, it would drain the
    lines the outer feed is scanning in place and keep them."""
    decoder = impl.SseDecoder()
    inside = False
    outcomes: list[object] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if inside and phase == "start":
            try:
                outcomes.append(decoder.feed(b""))
            except (RuntimeError, NotUtf8Error) as err:  # NotUtf8Error: the latched fault
                outcomes.append(err)

    # Made before, so that little between `inside = True` and the call allocates.
    chunks = [bytearray(c) for c in split(BODY + b"data: \xff\n", 97)]
    feed = decoder.feed
    got: list[str] = []
    threshold = gc.get_threshold()
    gc.callbacks.append(callback)
    gc.set_threshold(1)
    try:
        for chunk in chunks:
            inside = True
            try:
                got += feed(chunk)
            except NotUtf8Error:
                pass
            finally:
                inside = False
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)
    assert got == TEXTS
    refused = [o for o in outcomes if type(o) is RuntimeError]
    assert all(ALL_BUSY in str(o) for o in refused)
    assert all(o == [] or isinstance(o, (RuntimeError, NotUtf8Error)) for o in outcomes)
    if sys.version_info < (3, 12):  # 3.12+ runs the collector between bytecodes only
        assert refused


# --- objects never initialised ----------------------------------------------------------------


def _uses(impl: types.SimpleNamespace) -> dict[str, tuple[type, Callable[[Any], Any]]]:
    def anext(obj: Any) -> Any:
        return asyncio.run(obj.__anext__())

    return {
        "SseDecoder.feed": (impl.SseDecoder, lambda d: d.feed(b"data: x\n")),
        "SseDecoder.close": (impl.SseDecoder, lambda d: d.close()),
        "Events.next": (impl.Events, next),
        "Events.next_item": (impl.Events, lambda e: e.next_item()),
        "AsyncEvents.__anext__": (type(impl.aiter_events(achunks([]))), anext),
    }


@pytest.mark.parametrize(
    "use",
    [
        "SseDecoder.feed",
        "SseDecoder.close",
        "Events.next",
        "Events.next_item",
        "AsyncEvents.__anext__",
    ],
)
@pytest.mark.parametrize("how", ["__new__", "subclass"])
def test_an_object_never_initialised_raises(impl: types.SimpleNamespace, use, how) -> None:
    cls, call = _uses(impl)[use]
    if how == "__new__":
        obj = cls.__new__(cls)
    else:
        sub = type("Sub", (cls,), {"__init__": lambda self, *a: None})
        obj = sub(Reader([]))
    for _ in range(2):
        with pytest.raises(RuntimeError, match=UNINIT):
            call(obj)
    assert isinstance(obj, cls)
    with pytest.raises(AttributeError):
        obj.no_such_attribute  # noqa: B018 (an ordinary missing attribute stays AttributeError)


# --- threads ------------------------------------------------------------------------------------


def test_two_threads_on_one_events(impl: types.SimpleNamespace) -> None:
    body = b"".join(b"data: %d\n" % i for i in range(60))
    for _ in range(60):
        events = impl.Events(Reader(split(body, 5), pause=True))
        got, errors = share(events.next_item)
        assert errors == []
        assert sorted(got[0] + got[1], key=int) == [str(i) for i in range(60)]
        for part in got:  # each thread saw its items in stream order
            assert part == sorted(part, key=int)


def test_two_threads_feeding_one_decoder(impl: types.SimpleNamespace, monkeypatch) -> None:
    """The window for a second thread is the Python code of an error raised inside feed: made
    wide here (the error's __init__ lets other threads run), with the two threads feeding
    chunks of very different lengths, so that one's offsets would fall outside the other's
    bytes. Every feed that gets in returns exactly the items of its own chunk."""
    for cls in (NotUtf8Error, LineTooLongError):
        init = cls.__init__

        def slow_init(self: Any, *args: Any, _init: Any = init) -> None:
            _init(self, *args)
            time.sleep(0.0002)  # another thread runs now

        monkeypatch.setattr(cls, "__init__", slow_init)
    windows = 0
    for round_ in range(100):
        decoder = impl.SseDecoder(max_line=40)
        bad = b"data: \xff\n" if round_ % 2 else b"data: " + b"y" * 50
        chunks = [b"data: ok\n" * 300 + bad, b"data: ok\n"]
        calls: list[tuple[int, Any]] = []

        def worker(i: int) -> None:
            for _ in range(3):
                try:
                    calls.append((i, decoder.feed(chunks[i])))  # noqa: B023
                except (RuntimeError, SseError) as err:
                    calls.append((i, err))  # noqa: B023

        with fast_switching():
            workers = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        for i, outcome in calls:
            if isinstance(outcome, RuntimeError):
                assert ALL_BUSY in str(outcome)
            elif not isinstance(outcome, SseError):
                assert outcome == ["ok"] * (300 if i == 0 else 1)
        # A round may refuse all three of the bad chunk's feeds (the other thread was inside each
        # time; slow builds such as ASan's do that): the window is proven over the rounds.
        windows += any(isinstance(o, SseError) for _, o in calls)
    assert windows, "no round raised inside feed: the window was never open"


# --- aiter_events: cancellation, and one task at a time --------------------------------------


async def _cancelled_then_rest(it: Any, queue: Any, chunks: list[bytes], cut: int) -> list[Any]:
    """Deliver chunks[:cut], cancel one read while the source has nothing, then deliver the
    rest and read to the end; the items (a named error propagates)."""
    got: list[Any] = []
    for c in chunks[:cut]:
        queue.put_nowait(c)
    while queue.qsize():
        got.append(await it.__anext__())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(it.__anext__(), 0.01)  # cancels the waiting __anext__
    for c in chunks[cut:]:
        queue.put_nowait(c)
    queue.put_nowait(None)
    while True:
        try:
            got.append(await it.__anext__())
        except StopAsyncIteration:
            return got


AITER_BODY = [b"data: a\n\ndata: b", b"\n\n", b"data: c\n\n", b"data: [DONE]\n\n"]


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_cancelled_read_loses_nothing_the_source_still_has(impl, cut) -> None:
    async def main() -> list[Any]:
        source = QueueSource()
        return await _cancelled_then_rest(impl.aiter_events(source), source.queue, AITER_BODY, cut)

    got = asyncio.run(main())
    assert got[:3] == ["a", "b", "c"] and len(got) == 4


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_cancelled_read_never_ends_the_iteration_cleanly(impl, cut) -> None:
    """An async generator source ends for good when its read is cancelled: the next __anext__
    raises a named error (again if asked again), never StopAsyncIteration."""

    async def main() -> tuple[list[Any], Any, Any]:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        it = impl.aiter_events(queue_generator(queue))
        got: list[Any] = []
        with pytest.raises(TruncatedError) as first:
            got = await _cancelled_then_rest(it, queue, AITER_BODY, cut)
        with pytest.raises(TruncatedError) as again:
            await it.__anext__()
        return got, first.value, again.value

    _, first, again = asyncio.run(main())
    assert first is again
    assert isinstance(first, LlamafastError)
    assert "read of it was cancelled" in str(first)


def test_two_tasks_on_one_aiter_events(impl: types.SimpleNamespace) -> None:
    async def main() -> None:
        source = QueueSource()
        it = impl.aiter_events(source)
        first = asyncio.ensure_future(it.__anext__())
        await asyncio.sleep(0)
        with pytest.raises(
            RuntimeError, match=rf"__anext__\(\) was called while this \w+ {ALL_BUSY}"
        ):
            await it.__anext__()
        source.queue.put_nowait(b"data: x\n")
        assert await first == "x"  # the first task goes on
        source.queue.put_nowait(None)
        with pytest.raises(StopAsyncIteration):
            await it.__anext__()

    asyncio.run(main())


def test_aiter_events_latches_errors(impl: types.SimpleNamespace) -> None:
    async def main() -> None:
        it = impl.aiter_events(achunks([b"data: a\ndata: \xff\n"]))
        assert await it.__anext__() == "a"
        for _ in range(2):
            with pytest.raises(NotUtf8Error):
                await it.__anext__()

    asyncio.run(main())


# --- what one long line leaves behind ----------------------------------------------------------


def test_the_buffer_shrinks_back_after_a_long_line(c_impl: types.SimpleNamespace) -> None:
    long = b"data: " + b"x" * (8 << 20) + b"\n"
    decoder = c_impl.SseDecoder(max_line=16 << 20)
    for piece in split(long, 65536):
        decoder.feed(piece)
    assert decoder.feed(b"data: a\ndata: b") == ["a"]
    assert decoder._buffer_size <= 128 << 10
    events = c_impl.Events(Reader([*split(long, 65536), b"data: a\n" * 3]), 16 << 20)
    assert len(events.next_item()) == 8 << 20
    assert events.next_item() == "a"
    assert events._buffer_size <= 128 << 10
