"""Every streamed 200 recording in fixtures/http, read as a live client would (a socket, the
standard library's HTTPResponse and chunked decoding), then Events and Assembler, or ChatStream,
must give the events and the completion of its expected file (fixtures/README.md has the format);
midstream_error must give the server's HttpError after the events before it.
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from _recordings import load_expected, open_recording, stream_recordings
from llamafast import (
    DONE,
    Completion,
    Content,
    HttpError,
    Progress,
    Reasoning,
    StreamClosedEarlyError,
    ToolCallDelta,
)

STREAMS = stream_recordings()


def test_the_recordings_are_there():
    assert len(STREAMS) >= 13
    assert "midstream_error" in STREAMS
    assert "tool_call" in STREAMS


def as_expected_event(event: Any) -> dict[str, Any]:
    """A ChatEvent in the expected files' notation."""
    match event:
        case Progress(total, cache, processed):
            return {"type": "progress", "total": total, "cache": cache, "processed": processed}
        case Reasoning(text):
            return {"type": "reasoning", "text": text}
        case Content(text):
            return {"type": "content", "text": text}
        case ToolCallDelta(index, id_, name, arguments):
            return {
                "type": "tool_call_delta",
                "index": index,
                "id": id_,
                "name": name,
                "arguments": arguments,
            }
    raise AssertionError(f"not an event the assembler gives: {event!r}")


def as_expected_completion(c: Completion) -> dict[str, Any]:
    return {
        "id": c.id,
        "content": c.content,
        "reasoning_content": c.reasoning_content,
        "tool_calls": [
            {"id": t.id, "name": t.name, "arguments": t.arguments} for t in c.tool_calls
        ],
        "finish_reason": c.finish_reason.value,
        "timings": {
            "cache_n": c.timings.cache_n,
            "prompt_n": c.timings.prompt_n,
            "predicted_n": c.timings.predicted_n,
        },
        "reasoning_tokens": c.reasoning_tokens,
        "thinking_capped": c.thinking_capped,
    }


def check_server_error(err: HttpError, expected: dict[str, Any]) -> None:
    server = expected["server_error"]
    assert err.status == server["status"]
    assert err.message == server["message"]
    assert server["message"] in str(err)
    assert server["type"] in err.body


@pytest.mark.parametrize("name", STREAMS)
def test_events_then_assembler(impl: types.SimpleNamespace, name: str) -> None:
    expected = load_expected(name)
    response = open_recording(name)
    assert response.status == expected["status"] == 200
    asm = impl.Assembler()
    events: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []
    error: HttpError | None = None
    with response:
        for item in impl.Events(response):
            if item is DONE:
                items.append({"done": True})
                break
            items.append({"data": item})
            try:
                events += [as_expected_event(e) for e in asm.push(item)]
            except HttpError as err:
                error = err
                break
    assert items == expected["items"]
    assert events == expected["events"]
    assert asm.is_finished is expected["finished"]
    assert asm.id == expected["completion"]["id"]
    if "server_error" in expected:
        assert error is not None
        check_server_error(error, expected)
        with pytest.raises(StreamClosedEarlyError):
            asm.finish()
    else:
        assert error is None
        assert as_expected_completion(asm.finish()) == expected["completion"]


@pytest.mark.parametrize("name", STREAMS)
def test_chat_stream(impl: types.SimpleNamespace, name: str) -> None:
    expected = load_expected(name)
    stream = impl.ChatStream(open_recording(name))
    events: list[dict[str, Any]] = []
    with stream:
        if "server_error" in expected:
            with pytest.raises(HttpError) as info:
                for event in stream:
                    events.append(as_expected_event(event))
            check_server_error(info.value, expected)
            with pytest.raises(HttpError):
                stream.completion  # noqa: B018
        else:
            events = [as_expected_event(e) for e in stream]
            assert as_expected_completion(stream.completion) == expected["completion"]
        assert events == expected["events"]
        assert stream.is_finished is expected["finished"]
        assert stream.id == expected["completion"]["id"]
        assert stream.reasoning_tokens == expected["completion"]["reasoning_tokens"]
