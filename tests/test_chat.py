"""ChatStream, AsyncChatStream and aiter_chat (docs/assembler.md, "The whole response in one
loop", rules STREAM-ORDER to STREAM-CLOSE): Events and Assembler fused, DONE ends, a cut body
never passes for a finished one, errors are latched, `.completion` only after the end, close()
and the context managers.
"""

from __future__ import annotations

import asyncio
import json
import types
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import pytest

from _recordings import open_recording, stream_recordings
from llamafast import (
    Content,
    FinishReason,
    HttpError,
    LineTooLongError,
    Progress,
    ProtocolError,
    Reasoning,
    SseIoError,
    StreamClosedEarlyError,
    Timings,
    TruncatedError,
)

T = TypeVar("T")


def data(payload: Any) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return b"data: " + text.encode() + b"\n\n"


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    payload = {
        "id": "c-1",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }
    payload.update(extra)
    return data(payload)


PROGRESS = {"total": 9, "cache": 0, "processed": 9}
TIMINGS = {"cache_n": 0, "prompt_n": 9, "predicted_n": 2}
DONE_LINE = b"data: [DONE]\n\n"

BODY = [
    b": ping\n\n",
    chunk({"role": "assistant", "content": None}, prompt_progress=PROGRESS),
    chunk({"reasoning_content": "hm"}, timings=TIMINGS, prompt_progress=PROGRESS),
    chunk({"content": "It "}),
    chunk({"content": "says"}),
    chunk({}, "stop"),
]
EVENTS = [Progress(9, 0, 9), Progress(9, 0, 9), Reasoning("hm"), Content("It "), Content("says")]


class Reader:
    """A blocking reader handing out `chunks` one per read; reading past them is a test failure
    when `strict`, else the end of the body. Records reads and closes."""

    def __init__(self, chunks: list[bytes], strict: bool = False) -> None:
        self.chunks = list(chunks)
        self.strict = strict
        self.reads = 0
        self.closed = 0

    def read(self, n: int = -1) -> bytes:
        self.reads += 1
        if self.chunks:
            return self.chunks.pop(0)
        if self.strict:
            raise AssertionError("read after the end")
        return b""

    def close(self) -> None:
        self.closed += 1


class FailingReader(Reader):
    def read(self, n: int = -1) -> bytes:
        if self.chunks:
            return super().read(n)
        raise ConnectionResetError("reset by peer")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def source(chunks: list[bytes], log: list[str] | None = None) -> AsyncIterator[bytes]:
    """An async byte source; `log` records whether it was read past its chunks or closed."""
    try:
        for c in chunks:
            yield c
        if log is not None:
            log.append("read past the end")
    finally:
        if log is not None:
            log.append("closed")


async def collect(stream: Any) -> list[Any]:
    return [event async for event in stream]


# --- the sync stream ----------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["whole", "chunks", "bytes"])
def test_events_in_order_then_the_completion(impl, split):
    body = b"".join([*BODY, DONE_LINE])
    chunks = {
        "whole": [body],
        "chunks": [*BODY, DONE_LINE],
        "bytes": [body[i : i + 1] for i in range(len(body))],
    }[split]
    stream = impl.ChatStream(Reader(chunks))
    assert iter(stream) is stream
    assert list(stream) == EVENTS
    c = stream.completion
    assert (c.id, c.content, c.reasoning_content) == ("c-1", "It says", "hm")
    assert (c.finish_reason, c.timings, c.reasoning_tokens) == (
        FinishReason.STOP,
        Timings(0, 9, 2),
        2,
    )
    assert c.thinking_capped is False
    assert stream.completion is c
    assert list(stream) == []  # ended: nothing more


def test_done_ends_the_iteration_and_nothing_after_it_is_read(impl):
    first = b"".join(BODY[:3]) + DONE_LINE + b"data: not json at all\n\n" + b"\xff\xfe broken"
    reader = Reader([first, b"never read"], strict=True)
    stream = impl.ChatStream(reader)
    with pytest.raises(StreamClosedEarlyError):
        list(stream)  # DONE came before any finish reason
    assert reader.reads == 1
    assert reader.chunks == [b"never read"]


def test_done_after_the_finish_reason(impl):
    reader = Reader([b"".join(BODY) + DONE_LINE], strict=True)
    stream = impl.ChatStream(reader)
    assert list(stream) == EVENTS
    assert stream.completion.content == "It says"
    assert reader.reads == 1


def test_a_body_cut_before_a_finish_reason_is_stream_closed_early(impl):
    stream = impl.ChatStream(Reader(BODY[:-1]))
    events = []
    with pytest.raises(StreamClosedEarlyError):
        for event in stream:
            events.append(event)
    assert events == EVENTS  # every event before the end was handed out
    assert stream.is_finished is False
    with pytest.raises(StreamClosedEarlyError):
        stream.completion  # noqa: B018


def test_a_body_cut_inside_a_line_is_truncated(impl):
    stream = impl.ChatStream(Reader([*BODY[:3], b'data: {"id":"c-1","choi']))
    with pytest.raises(TruncatedError):
        list(stream)


def test_a_body_that_finished_without_done_is_fine(impl):
    stream = impl.ChatStream(Reader(BODY))
    assert list(stream) == EVENTS
    assert stream.completion.finish_reason is FinishReason.STOP


def test_completion_before_the_end_is_a_runtime_error(impl):
    stream = impl.ChatStream(Reader(BODY))
    with pytest.raises(RuntimeError, match="has not ended yet"):
        stream.completion  # noqa: B018
    assert next(stream) == EVENTS[0]
    with pytest.raises(RuntimeError, match="iterate it to the end first"):
        stream.completion  # noqa: B018


@pytest.mark.parametrize(
    ("chunks", "error"),
    [
        ([BODY[1], data('{"error":{"code":500,"message":"boom"}}')], HttpError),
        ([BODY[1], data('{"choices":[{"finish_reason":"eos"}]}')], ProtocolError),
        ([BODY[1], data("{not json")], ProtocolError),
        ([BODY[1], data({"choices": [], "x": "y" * 400})], LineTooLongError),
    ],
)
def test_errors_propagate_and_are_latched(impl, chunks, error):
    reader = Reader(chunks)
    stream = impl.ChatStream(reader, max_line=300)
    assert next(stream) == Progress(9, 0, 9)
    with pytest.raises(error) as first:
        next(stream)
    reads = reader.reads
    with pytest.raises(error) as again:
        next(stream)
    assert again.value is first.value
    with pytest.raises(error) as third:
        list(stream)
    assert third.value is first.value
    with pytest.raises(error) as from_completion:
        stream.completion  # noqa: B018
    assert from_completion.value is first.value
    assert reader.reads == reads  # nothing more was read


def test_a_protocol_error_from_finish_is_raised_by_the_iteration(impl):
    reader = Reader([data({"choices": [{"delta": {"content": "a"}, "finish_reason": "stop"}]})])
    stream = impl.ChatStream(reader)  # no chunk carried an id
    assert next(stream) == Content("a")
    with pytest.raises(ProtocolError) as first:
        next(stream)
    with pytest.raises(ProtocolError) as again:
        stream.completion  # noqa: B018
    assert again.value is first.value


def test_the_http_error_carries_the_servers_status_and_message(impl):
    stream = impl.ChatStream(Reader([BODY[1], data('{"error":{"code":503,"message":"boom"}}')]))
    with pytest.raises(HttpError) as info:
        list(stream)
    assert (info.value.status, info.value.message) == (503, "boom")


def test_a_reader_error_is_latched(impl):
    reader = FailingReader(BODY[:2])
    stream = impl.ChatStream(reader)
    with pytest.raises(SseIoError) as first:
        list(stream)
    with pytest.raises(SseIoError) as again:
        next(stream)
    assert again.value is first.value


def test_the_state_for_the_client_is_updated_after_each_item(impl):
    stream = impl.ChatStream(Reader(BODY))
    assert (stream.id, stream.reasoning_tokens, stream.in_reasoning, stream.is_finished) == (
        None,
        0,
        False,
        False,
    )
    seen = []
    for event in stream:
        seen.append((event, stream.id, stream.reasoning_tokens, stream.in_reasoning))
    assert seen == [
        (Progress(9, 0, 9), "c-1", 0, False),
        (Progress(9, 0, 9), "c-1", 2, True),  # its item also carried the reasoning
        (Reasoning("hm"), "c-1", 2, True),
        (Content("It "), "c-1", 2, False),
        (Content("says"), "c-1", 2, False),
    ]
    assert stream.is_finished is True


def test_close_closes_the_reader_and_stops_the_iteration(impl):
    reader = Reader(BODY)
    stream = impl.ChatStream(reader)
    assert next(stream) == Progress(9, 0, 9)
    assert next(stream) == Progress(9, 0, 9)  # Reasoning("hm") is waiting
    stream.close()
    assert reader.closed == 1
    assert list(stream) == []
    with pytest.raises(StopIteration):
        next(stream)
    with pytest.raises(RuntimeError):
        stream.completion  # noqa: B018
    stream.close()
    assert reader.closed == 1


def test_close_after_the_end_keeps_the_completion(impl):
    reader = Reader(BODY)
    stream = impl.ChatStream(reader)
    list(stream)
    stream.close()
    assert reader.closed == 1
    assert stream.completion.content == "It says"


def test_close_without_a_close_method_on_the_reader(impl):
    class Bare:
        def __init__(self) -> None:
            self.reader = Reader(BODY)

        def read(self, n: int = -1) -> bytes:
            return self.reader.read(n)

    stream = impl.ChatStream(Bare())
    stream.close()
    assert list(stream) == []


def test_the_context_manager_closes(impl):
    reader = Reader(BODY)
    with impl.ChatStream(reader) as stream:
        assert next(stream) == Progress(9, 0, 9)
    assert reader.closed == 1
    reader = Reader(BODY[:2])
    with pytest.raises(StreamClosedEarlyError), impl.ChatStream(reader) as stream:
        list(stream)
    assert reader.closed == 1


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_max_line_is_checked(impl, bad):
    with pytest.raises(ValueError):
        impl.ChatStream(Reader(BODY), max_line=bad)
    with pytest.raises(ValueError):
        impl.aiter_chat(source(BODY), max_line=bad)


def test_a_real_http_response(impl):
    stream = impl.ChatStream(open_recording("tool_call"))
    events = list(stream)
    assert events
    assert stream.completion.tool_calls[0].name == "read_file"


# --- the async stream ---------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["whole", "chunks", "bytes"])
def test_async_events_then_the_completion(impl, split):
    body = b"".join([*BODY, DONE_LINE])
    chunks = {
        "whole": [body],
        "chunks": [*BODY, DONE_LINE],
        "bytes": [body[i : i + 1] for i in range(len(body))],
    }[split]

    async def main() -> None:
        stream = impl.aiter_chat(source(chunks))
        assert isinstance(stream, impl.AsyncChatStream)
        assert stream.__aiter__() is stream
        with pytest.raises(RuntimeError, match="has not ended yet"):
            stream.completion  # noqa: B018
        assert await collect(stream) == EVENTS
        c = stream.completion
        assert (c.id, c.content, c.reasoning_content, c.reasoning_tokens) == (
            "c-1",
            "It says",
            "hm",
            2,
        )
        assert (stream.id, stream.is_finished, stream.in_reasoning) == ("c-1", True, False)
        assert await collect(stream) == []

    run(main())


def test_async_done_ends_and_nothing_after_it_is_read(impl):
    log: list[str] = []

    async def main() -> None:
        chunks = [b"".join(BODY) + DONE_LINE + b"data: junk\n\n", b"\xff never read\n"]
        stream = impl.AsyncChatStream(source(chunks, log))
        assert await collect(stream) == EVENTS
        assert stream.completion.content == "It says"
        assert "read past the end" not in log
        await stream.aclose()
        assert "closed" in log

    run(main())


def test_async_a_cut_body_is_stream_closed_early_and_latched(impl):
    async def main() -> None:
        stream = impl.aiter_chat(source(BODY[:-1]))
        events = []
        with pytest.raises(StreamClosedEarlyError) as first:
            async for event in stream:
                events.append(event)
        assert events == EVENTS
        with pytest.raises(StreamClosedEarlyError) as again:
            await stream.__anext__()
        assert again.value is first.value
        with pytest.raises(StreamClosedEarlyError):
            stream.completion  # noqa: B018

    run(main())


@pytest.mark.parametrize(
    ("chunks", "error"),
    [
        ([BODY[1], data('{"error":{"code":500,"message":"boom"}}')], HttpError),
        ([BODY[1], data("[]")], ProtocolError),
        ([BODY[1], b"data: {"], TruncatedError),
    ],
)
def test_async_errors_propagate_and_are_latched(impl, chunks, error):
    async def main() -> None:
        stream = impl.aiter_chat(source(chunks))
        assert await stream.__anext__() == Progress(9, 0, 9)
        with pytest.raises(error) as first:
            await stream.__anext__()
        with pytest.raises(error) as again:
            await collect(stream)
        assert again.value is first.value

    run(main())


def test_async_finished_without_done_is_fine(impl):
    async def main() -> None:
        stream = impl.aiter_chat(source(BODY))
        assert await collect(stream) == EVENTS
        assert stream.completion.finish_reason is FinishReason.STOP

    run(main())


def test_async_aclose_and_async_with_close_the_source(impl):
    async def main() -> None:
        log: list[str] = []
        async with impl.aiter_chat(source(BODY, log)) as stream:
            assert await stream.__anext__() == Progress(9, 0, 9)
        assert log == ["closed"]
        assert await collect(stream) == []

        log2: list[str] = []
        stream = impl.aiter_chat(source(BODY, log2))
        await stream.__anext__()
        await stream.aclose()
        assert log2 == ["closed"]
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        with pytest.raises(RuntimeError):
            stream.completion  # noqa: B018
        await stream.aclose()  # again: harmless

    run(main())


def test_async_source_without_aclose(impl):
    class Plain:
        def __init__(self, chunks: list[bytes]) -> None:
            self.chunks = list(chunks)

        def __aiter__(self) -> Plain:
            return self

        async def __anext__(self) -> bytes:
            if not self.chunks:
                raise StopAsyncIteration
            return self.chunks.pop(0)

    async def main() -> None:
        stream = impl.aiter_chat(Plain(BODY))
        assert await collect(stream) == EVENTS
        await stream.aclose()

    run(main())


@pytest.mark.parametrize("name", stream_recordings())
def test_async_and_sync_agree_on_every_recording(impl: types.SimpleNamespace, name: str) -> None:
    response = open_recording(name)
    body = response.read()
    response.close()

    def outcome_sync() -> tuple[list[Any], Any]:
        stream = impl.ChatStream(Reader([body[i : i + 997] for i in range(0, len(body), 997)]))
        events: list[Any] = []
        try:
            for event in stream:
                events.append(event)
        except HttpError as err:
            return events, (err.status, err.body)
        return events, stream.completion

    async def outcome_async() -> tuple[list[Any], Any]:
        stream = impl.aiter_chat(source([body[i : i + 1013] for i in range(0, len(body), 1013)]))
        events: list[Any] = []
        try:
            async for event in stream:
                events.append(event)
        except HttpError as err:
            return events, (err.status, err.body)
        return events, stream.completion

    assert run(outcome_async()) == outcome_sync()
