"""What legal Python around ChatStream / AsyncChatStream may do, in both twins (the fused Cython
stream reads into the SSE decoder's buffer and parses in place, so it shares the reader's
hazards): the reader calls back, threads and tasks share one stream, a stream is used without its
__init__, a chunk is rejected half-built, a read is cancelled. Each works or is a named error;
nothing is lost, nothing of a rejected chunk is handed out, memory is never corrupted.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
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
    queue_generator,
    share,
    split,
)
from llamafast import Content, Progress, ProtocolError, TruncatedError

PROGRESS = {"total": 9, "cache": 0, "processed": 9}


def data(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def piece(text: str, **extra: Any) -> bytes:
    return data({"id": "c", "choices": [{"index": 0, "delta": {"content": text}}], **extra})


TEXTS = [f"é{i}€😀" for i in range(80)]
END = data({"choices": [{"delta": {}, "finish_reason": "stop"}]}) + b"data: [DONE]\n\n"
BODY = b"".join(piece(t) for t in TEXTS) + END


# --- one caller at a time ---------------------------------------------------------------------

CALLBACKS: dict[str, Callable[[Any], Any]] = {
    "next": next,
    "list": list,
    "__init__": lambda s: s.__init__(Reader([BODY])),
}


@pytest.mark.parametrize("back", sorted(CALLBACKS))
@pytest.mark.parametrize("size", [5, 333, 65536])
def test_the_reader_calling_back_is_refused(impl: types.SimpleNamespace, back, size) -> None:
    reader = Reader(split(BODY, size))
    stream = impl.ChatStream(reader)
    reader.target, reader.back = stream, CALLBACKS[back]
    assert [e.text for e in stream] == TEXTS  # the first caller goes on, losing nothing
    assert stream.completion.content == "".join(TEXTS)
    assert reader.raised and all(type(e) is RuntimeError for e in reader.raised)
    method = "__init__" if back == "__init__" else "__next__"
    assert all(
        f"ChatStream.{method}() was called while this ChatStream {ALL_BUSY}" in str(e)
        for e in reader.raised
    )


def test_a_finalizer_inside_the_stream_is_refused(impl: types.SimpleNamespace) -> None:
    """A gc callback that runs while the stream builds events (every allocation collects here)
    and calls next() on it gets RuntimeError; the events are exactly right."""
    reader = Reader(split(BODY, 200))
    stream = impl.ChatStream(reader)
    inside = False
    outcomes: list[object] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if inside and phase == "start":
            try:
                outcomes.append(next(stream))
            except (RuntimeError, StopIteration) as err:
                outcomes.append(err)

    step = stream.__next__
    got: list[Any] = []
    threshold = gc.get_threshold()
    gc.callbacks.append(callback)
    gc.set_threshold(1)
    try:
        while True:
            inside = True
            try:
                got.append(step())
            except StopIteration:
                break
            finally:
                inside = False
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)
    # an event a collection took just outside a call (the flag is not exact to the bytecode) is
    # still one of the stream's, in order; none is lost or repeated
    taken = [o for o in outcomes if not isinstance(o, (RuntimeError, StopIteration))]
    assert sorted([*got, *taken], key=lambda e: TEXTS.index(e.text)) == [Content(t) for t in TEXTS]
    refused = [o for o in outcomes if isinstance(o, RuntimeError)]
    assert all(ALL_BUSY in str(o) for o in refused)
    if sys.version_info < (3, 12):  # 3.12+ runs the collector between bytecodes only
        assert refused


def test_init_again_when_idle_starts_over(impl: types.SimpleNamespace) -> None:
    stream = impl.ChatStream(Reader([piece("a") + piece("b")]))
    assert next(stream) == Content("a")
    stream.__init__(Reader([piece("c") + END]))
    assert list(stream) == [Content("c")]
    assert stream.completion.content == "c"  # nothing of the first stream


def test_two_threads_on_one_chat_stream(impl: types.SimpleNamespace) -> None:
    for _ in range(40):
        stream = impl.ChatStream(Reader(split(BODY, 61), pause=True))
        got, errors = share(stream.__next__)
        assert errors == []
        order = {t: i for i, t in enumerate(TEXTS)}
        assert sorted(e.text for e in got[0] + got[1]) == sorted(TEXTS)
        for part in got:
            assert [order[e.text] for e in part] == sorted(order[e.text] for e in part)
        assert stream.completion.content == "".join(TEXTS)


# --- objects never initialised ------------------------------------------------------------------


@pytest.mark.parametrize("how", ["__new__", "subclass"])
def test_a_stream_never_initialised_raises(impl: types.SimpleNamespace, how) -> None:
    def make(cls: type) -> Any:
        if how == "__new__":
            return cls.__new__(cls)
        return type("Sub", (cls,), {"__init__": lambda self, *a: None})(Reader([]))

    stream = make(impl.ChatStream)
    for _ in range(2):
        with pytest.raises(RuntimeError, match=UNINIT):
            next(stream)
    for use in (
        lambda s: s.completion,
        lambda s: s.id,
        lambda s: s.reasoning_tokens,
        lambda s: s.in_reasoning,
        lambda s: s.is_finished,
        lambda s: s.close(),
    ):
        with pytest.raises(RuntimeError, match=UNINIT):
            use(stream)
    astream = make(impl.AsyncChatStream)
    for _ in range(2):
        with pytest.raises(RuntimeError, match=UNINIT):
            asyncio.run(astream.__anext__())
    with pytest.raises(RuntimeError, match=UNINIT):
        asyncio.run(astream.aclose())


# --- a chunk is all or nothing ------------------------------------------------------------------

# Progress and the first choice's Content are built before the second choice is found bad.
REJECTED = data(
    {
        "id": "c",
        "prompt_progress": PROGRESS,
        "choices": [
            {"index": 0, "delta": {"content": "kept?"}},
            {"index": 1, "delta": {"content": 5}},
        ],
    }
)


@pytest.mark.parametrize("size", [7, 65536])
def test_the_events_of_a_rejected_chunk_are_never_handed_out(impl, size) -> None:
    body = piece("a") + piece("b", prompt_progress=PROGRESS) + REJECTED + piece("c") + END
    stream = impl.ChatStream(Reader(split(body, size)))
    assert [next(stream) for _ in range(3)] == [Content("a"), Progress(9, 0, 9), Content("b")]
    with pytest.raises(ProtocolError, match='"content" is') as first:
        next(stream)
    for _ in range(3):  # latched: the same error, never the chunk's Progress or Content
        with pytest.raises(ProtocolError) as again:
            next(stream)
        assert again.value is first.value
    with pytest.raises(ProtocolError):
        stream.completion  # noqa: B018


@pytest.mark.parametrize("size", [7, 65536])
def test_the_events_of_a_rejected_chunk_are_never_handed_out_async(impl, size) -> None:
    body = piece("a") + REJECTED + piece("c") + END

    async def main() -> None:
        stream = impl.aiter_chat(achunks(split(body, size)))
        assert await stream.__anext__() == Content("a")
        with pytest.raises(ProtocolError) as first:
            await stream.__anext__()
        for _ in range(3):
            with pytest.raises(ProtocolError) as again:
                await stream.__anext__()
            assert again.value is first.value

    asyncio.run(main())


# --- aiter_chat: cancellation, and one task at a time -----------------------------------------


CHAT_CHUNKS = [piece("a") + piece("b")[:20], piece("b")[20:], piece("c"), END]


async def _cancelled_then_rest(stream: Any, queue: Any, cut: int) -> list[Any]:
    """Deliver CHAT_CHUNKS[:cut] (each ends an event), cancel one read while the source has
    nothing, deliver the rest, read to the end."""
    got: list[Any] = []
    for c in CHAT_CHUNKS[:cut]:
        queue.put_nowait(c)
    while queue.qsize():
        got.append(await stream.__anext__())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(stream.__anext__(), 0.01)
    for c in CHAT_CHUNKS[cut:]:
        queue.put_nowait(c)
    queue.put_nowait(None)
    got += [e async for e in stream]
    return got


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_cancelled_read_loses_nothing_the_source_still_has(impl, cut) -> None:
    async def main() -> tuple[list[Any], Any]:
        source = QueueSource()
        stream = impl.aiter_chat(source)
        got = await _cancelled_then_rest(stream, source.queue, cut)
        return got, stream.completion

    got, completion = asyncio.run(main())
    assert got == [Content("a"), Content("b"), Content("c")]
    assert completion.content == "abc"


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_cancelled_read_never_ends_the_stream_cleanly(impl, cut) -> None:
    """An async generator source ends for good when its read is cancelled; what the stream had
    not read of it is lost, so the stream raises a named error (latched), never a clean end."""

    async def main() -> tuple[BaseException, BaseException, BaseException]:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        stream = impl.aiter_chat(queue_generator(queue))
        with pytest.raises(TruncatedError) as first:
            await _cancelled_then_rest(stream, queue, cut)
        with pytest.raises(TruncatedError) as again:
            await stream.__anext__()
        with pytest.raises(TruncatedError) as completion:
            stream.completion  # noqa: B018
        return first.value, again.value, completion.value

    first, again, completion = asyncio.run(main())
    assert first is again is completion
    assert "read of it was cancelled" in str(first)


def test_two_tasks_on_one_chat_stream(impl: types.SimpleNamespace) -> None:
    async def main() -> None:
        source = QueueSource()
        stream = impl.aiter_chat(source)
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0)
        match = rf"AsyncChatStream.__anext__\(\) was called while this AsyncChatStream {ALL_BUSY}"
        with pytest.raises(RuntimeError, match=match):
            await stream.__anext__()
        source.queue.put_nowait(piece("x") + END)
        source.queue.put_nowait(None)
        assert await first == Content("x")  # the first task goes on
        assert [e async for e in stream] == []
        assert stream.completion.content == "x"

    asyncio.run(main())
