"""What the server reports beside the text: the model, the usage and the logprobs
(docs/assembler.md, rules MODEL, USAGE and LOGPROBS), through each twin's Assembler and
ChatStream, on hand-made chunks and on real recordings (fixtures/http/usage_chunk.http, and
fixtures/http/logprobs.http: a request with `logprobs` and `top_logprobs: 2`).
"""

from __future__ import annotations

import json
import types
from typing import Any

import pytest

from _recordings import open_recording, recording_bytes
from llamafast import (
    Completion,
    Content,
    Progress,
    ProtocolError,
    Reasoning,
    TokenLogprob,
    Usage,
)
from llamafast._errors import cut

ID = "chatcmpl-abc"


def chunk(delta: Any = None, finish: Any = None, *, logprobs: Any = ..., **top: Any) -> str:
    """One llama-server-shaped chunk with one choice; `logprobs` goes on the choice."""
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "delta": delta or {}}
    if logprobs is not ...:
        choice["logprobs"] = logprobs
    return json.dumps({"choices": [choice], "id": ID, **top})


def lp(token: str, logprob: float, *top: tuple[str, float]) -> dict[str, Any]:
    """A logprobs content entry as llama-server writes it (id and bytes beside the fields)."""
    entry: dict[str, Any] = {
        "id": 1,
        "token": token,
        "bytes": list(token.encode()),
        "logprob": logprob,
    }
    entry["top_logprobs"] = [{"id": 2, "token": t, "bytes": [], "logprob": v} for t, v in top]
    return entry


def run(impl: types.SimpleNamespace, *payloads: str) -> tuple[list[Any], Completion]:
    asm = impl.Assembler()
    events: list[Any] = []
    for payload in payloads:
        events += asm.push(payload)
    return events, asm.finish()


# --- MODEL ------------------------------------------------------------------------------------


def test_the_model_is_the_first_one_a_chunk_names(impl):
    _, c = run(
        impl,
        chunk(),
        chunk({"content": "a"}, model="tiny.gguf"),
        chunk(finish="stop", model="other.gguf"),
    )
    assert c.model == "tiny.gguf"


def test_without_a_model_the_completion_has_none(impl):
    assert run(impl, chunk({"content": "a"}, "stop"))[1].model is None


@pytest.mark.parametrize("model", [None, 1, ["m"], {"m": 1}, True])
def test_a_model_that_is_not_a_string_is_a_protocol_error(impl, model):
    payload = chunk(model=model)
    with pytest.raises(ProtocolError) as err:
        impl.Assembler().push(payload)
    assert str(err.value).startswith('"model" is ') and "not a string" in str(err.value)


# --- USAGE ------------------------------------------------------------------------------------


def test_usage_from_the_usage_chunk_after_the_finish(impl):
    usage = {
        "completion_tokens": 5,
        "prompt_tokens": 59,
        "total_tokens": 64,
        "prompt_tokens_details": {"cached_tokens": 39},
    }
    events, c = run(
        impl, chunk({"content": "a"}), chunk(finish="length"), chunk(usage=usage, choices=[])
    )
    assert c.usage == Usage(59, 5, 39)
    assert events == [Content("a")]


def test_the_latest_usage_wins_and_null_is_none(impl):
    first = {"prompt_tokens": 1, "completion_tokens": 2}
    last = {"prompt_tokens": 3, "completion_tokens": 4, "prompt_tokens_details": None}
    _, c = run(impl, chunk(usage=first), chunk(usage=last), chunk(finish="stop", usage=None))
    assert c.usage == Usage(3, 4, 0)


def test_without_usage_the_completion_has_none_and_no_details_mean_no_cached_tokens(impl):
    assert run(impl, chunk(finish="stop"))[1].usage is None
    usage = {"prompt_tokens": 7, "completion_tokens": 1, "prompt_tokens_details": {}}
    assert run(impl, chunk(finish="stop", usage=usage))[1].usage == Usage(7, 1, 0)
    assert run(impl, chunk(finish="stop", usage={}))[1].usage == Usage(0, 0, 0)  # as timings


@pytest.mark.parametrize(
    ("usage", "says"),
    [
        ([1], '"usage" is an array, not an object'),
        ("7", '"usage" is a string, not an object'),
        ({"prompt_tokens": "7"}, '"usage.prompt_tokens" is a string, not an integer'),
        ({"prompt_tokens": None}, '"usage.prompt_tokens" is null, not an integer'),
        ({"prompt_tokens": 1, "completion_tokens": -1}, '"usage.completion_tokens" is negative'),
        ({"completion_tokens": 1.0}, '"usage.completion_tokens" is a number, not an integer'),
        ({"prompt_tokens": 2**64 - 1}, '"usage.prompt_tokens" is out of range'),
        ({"prompt_tokens_details": 3}, '"usage.prompt_tokens_details" is an integer, not an'),
        (
            {"prompt_tokens_details": {"cached_tokens": True}},
            '"usage.prompt_tokens_details.cached_tokens" is a boolean, not an integer',
        ),
        (
            {"prompt_tokens_details": {"cached_tokens": None}},
            '"usage.prompt_tokens_details.cached_tokens" is null, not an integer',
        ),
    ],
)
def test_a_bad_usage_is_a_protocol_error_naming_the_field(impl, usage, says):
    payload = chunk(usage=usage)
    with pytest.raises(ProtocolError) as err:
        impl.Assembler().push(payload)
    assert str(err.value).startswith(says), str(err.value)
    assert str(err.value).endswith(cut(payload))


# --- LOGPROBS ---------------------------------------------------------------------------------


def test_logprobs_go_on_the_content_event_and_the_completion(impl):
    a = lp("He", -0.25, ("He", -0.25), ("Hi", -1.5))
    b = lp("llo", -2, ("llo", -2.0))  # an integer logprob is a float
    events, c = run(
        impl,
        chunk({"content": "He"}, logprobs={"content": [a]}),
        chunk({"content": "llo"}, logprobs={"content": [b]}),
        chunk(finish="stop"),
    )
    first = TokenLogprob("He", -0.25, (("He", -0.25), ("Hi", -1.5)))
    second = TokenLogprob("llo", -2.0, (("llo", -2.0),))
    assert events == [Content("He", (first,)), Content("llo", (second,))]
    assert type(events[1].logprobs[0].logprob) is float
    assert c.logprobs == (first, second)
    assert c.content == "Hello"


def test_several_tokens_in_one_chunk_keep_their_order(impl):
    entries = [lp("a", -1.0), lp("b", -2.0, ("c", -0.5))]
    events, c = run(impl, chunk({"content": "ab"}, "stop", logprobs={"content": entries}))
    want = (TokenLogprob("a", -1.0), TokenLogprob("b", -2.0, (("c", -0.5),)))
    assert events == [Content("ab", want)] and c.logprobs == want


def test_without_logprobs_nothing_changes(impl):
    # null (OpenAI's default), {"content": null} and absent are all "none".
    events, c = run(
        impl,
        chunk({"content": "a"}, logprobs=None),
        chunk({"content": "b"}, logprobs={"content": None, "refusal": None}),
        chunk({"content": "c"}),
        chunk(finish="stop"),
    )
    assert events == [Content("a"), Content("b"), Content("c")]
    assert all(e.logprobs == () for e in events) and c.logprobs == ()


def test_logprobs_of_reasoning_and_of_chunks_without_answer_text_are_checked_not_kept(impl):
    # llama-server sends them on reasoning deltas too (a real server, `logprobs` with
    # thinking on); only a Content carries them, so the Completion's are the answer's.
    events, c = run(
        impl,
        chunk({"role": "assistant", "content": None}, logprobs={"content": [lp("x", -1.0)]}),
        chunk({"reasoning_content": "r"}, logprobs={"content": [lp("r", -1.0)]}),
        chunk({"content": ""}, logprobs={"content": [lp("", -3.0)]}),
        chunk({"content": "a"}, logprobs={"content": [lp("a", -0.5)]}),
        chunk(finish="stop"),
    )
    assert events == [Reasoning("r"), Content("a", (TokenLogprob("a", -0.5),))]
    assert c.logprobs == (TokenLogprob("a", -0.5),)
    with pytest.raises(ProtocolError, match=r'^"logprobs.content\[0\].token" is null'):
        impl.Assembler().push(
            chunk({"reasoning_content": "r"}, logprobs={"content": [{"token": None}]})
        )


BAD_LOGPROBS = [
    ([], '"logprobs" is an array, not an object'),
    ({"content": {}}, '"logprobs.content" is an object, not an array'),
    ({"content": ["a"]}, '"logprobs.content[0]" is a string, not an object'),
    ({"content": [{"logprob": -1.0}]}, '"logprobs.content[0]" has no "token"'),
    ({"content": [{"token": 1, "logprob": -1.0}]}, '"logprobs.content[0].token" is an integer'),
    ({"content": [lp("a", -1), {"token": "b"}]}, '"logprobs.content[1]" has no "logprob"'),
    (
        {"content": [{"token": "a", "logprob": None}]},
        '"logprobs.content[0].logprob" is null, not a number',
    ),
    (
        {"content": [{"token": "a", "logprob": "-1"}]},
        '"logprobs.content[0].logprob" is a string, not a number',
    ),
    (
        {"content": [{"token": "a", "logprob": False}]},
        '"logprobs.content[0].logprob" is a boolean, not a number',
    ),
    (
        {"content": [{"token": "a", "logprob": -1.0, "top_logprobs": {}}]},
        '"logprobs.content[0].top_logprobs" is an object, not an array',
    ),
    (
        {"content": [{"token": "a", "logprob": -1.0, "top_logprobs": [lp("b", -1), 3]}]},
        '"logprobs.content[0].top_logprobs[1]" is an integer, not an object',
    ),
    (
        {"content": [{"token": "a", "logprob": -1.0, "top_logprobs": [{"logprob": -1.0}]}]},
        '"logprobs.content[0].top_logprobs[0]" has no "token"',
    ),
    (
        {"content": [{"token": "a", "logprob": -1.0, "top_logprobs": [{"token": "b"}]}]},
        '"logprobs.content[0].top_logprobs[0]" has no "logprob"',
    ),
    (
        {
            "content": [
                {"token": "a", "logprob": -1, "top_logprobs": [{"token": "b", "logprob": []}]}
            ]
        },
        '"logprobs.content[0].top_logprobs[0].logprob" is an array, not a number',
    ),
]


@pytest.mark.parametrize(("logprobs", "says"), BAD_LOGPROBS)
def test_bad_logprobs_are_a_protocol_error_naming_the_field(impl, logprobs, says):
    payload = chunk({"content": "a"}, logprobs=logprobs)
    with pytest.raises(ProtocolError) as err:
        impl.Assembler().push(payload)
    assert str(err.value).startswith(says), str(err.value)
    assert str(err.value).endswith(cut(payload))


@pytest.mark.parametrize("bad", [{"model": 1}, {"usage": []}, {"logprobs": {"content": 1}}])
def test_a_chunk_with_a_bad_report_changes_nothing(impl, bad):
    # docs/assembler.md, rule ALL-OR-NOTHING: neither its text, nor its model, usage, logprobs.
    asm = impl.Assembler()
    asm.push(chunk({"content": "a"}, logprobs={"content": [lp("a", -1.0)]}, model="m"))
    good = {
        "model": "other",
        "usage": {"prompt_tokens": 1},
        "logprobs": {"content": [lp("b", -1.0)]},
    }
    fields = {**good, **bad}
    logprobs = fields.pop("logprobs")
    with pytest.raises(ProtocolError):
        asm.push(chunk({"content": "b"}, logprobs=logprobs, **fields))
    asm.push(chunk(finish="stop"))
    c = asm.finish()
    assert (c.content, c.model, c.usage, c.logprobs) == ("a", "m", None, (TokenLogprob("a", -1.0),))


# --- the twins agree on every bad shape, word for word -----------------------------------------


@pytest.mark.parametrize(
    "payload",
    [chunk({"content": "a"}, logprobs=bad) for bad, _ in BAD_LOGPROBS]
    + [chunk(usage={"prompt_tokens": 1, "completion_tokens": []})]
    + [chunk(model={"m": 1}, usage="u", logprobs=[])],  # the first fault found wins
    ids=repr,
)
def test_the_twins_give_the_same_error(py_impl, c_impl, payload):
    for data in (payload, payload.encode()):  # the message shows the object pushed
        errors = []
        for impl in (py_impl, c_impl):
            with pytest.raises(ProtocolError) as err:
                impl.Assembler().push(data)
            errors.append(str(err.value))
        assert errors[0] == errors[1]


# --- real recordings ---------------------------------------------------------------------------


def independent_reading(name: str) -> tuple[list[Any], str | None, Usage | None]:
    """The Content events' logprobs, the model and the usage of a recording, read with
    json.loads from its raw payloads (no twin involved)."""
    body = recording_bytes(name).split(b"\r\n\r\n", 1)[1].decode()
    contents: list[Any] = []
    model = usage = None
    for line in body.splitlines():
        if not line.startswith("data: {"):
            continue
        c = json.loads(line.removeprefix("data: "))
        model = model or c.get("model")
        if c.get("usage"):
            u = c["usage"]
            usage = Usage(
                u["prompt_tokens"],
                u["completion_tokens"],
                u["prompt_tokens_details"]["cached_tokens"],
            )
        for choice in c["choices"]:
            text = choice["delta"].get("content")
            if text:
                entries = (choice.get("logprobs") or {}).get("content") or []
                contents.append(
                    Content(
                        text,
                        tuple(
                            TokenLogprob(
                                e["token"],
                                e["logprob"],
                                tuple((t["token"], t["logprob"]) for t in e["top_logprobs"]),
                            )
                            for e in entries
                        ),
                    )
                )
    return contents, model, usage


@pytest.mark.parametrize("name", ["logprobs", "usage_chunk"])
def test_a_real_recording_through_the_chat_stream(impl, name):
    contents, model, usage = independent_reading(name)
    with impl.ChatStream(open_recording(name)) as stream:
        events = list(stream)
    c = stream.completion
    assert [e for e in events if isinstance(e, Content)] == contents
    assert [e for e in events if not isinstance(e, (Content, Progress))] == []
    assert (c.model, c.usage) == (model, usage)
    assert c.logprobs == tuple(t for e in contents for t in e.logprobs)
    assert model == "tiny.gguf" and usage is not None


def test_the_logprobs_recording_has_two_alternatives_for_each_token(impl):
    with impl.ChatStream(open_recording("logprobs")) as stream:
        list(stream)
    c = stream.completion
    assert len(c.logprobs) == c.usage.completion_tokens == 4  # type: ignore[union-attr]
    assert all(len(t.top) == 2 and t.logprob <= 0.0 for t in c.logprobs)
    assert "".join(t.token for t in c.logprobs) == c.content
