"""The request's keywords are typed (docs/request-body.md, rule TYPED-KEYWORDS): `stream`,
`complete` and `count_tokens` take `**fields: Unpack[ChatFields]` (PEP 692), so `mypy --strict`
rejects an unknown keyword and a value of the wrong type, on both clients; `Embeddings` rows
are floats to a type checker. ChatFields lists exactly the keywords `chat_request` takes at run
time, with their fields' types (the tests below tie them), so the two cannot drift apart.

mypy runs once (tests/_mypy.py), on a file of wrong calls (each marked with the error code
expected on its line) and a file of right calls (no error at all). Without mypy the test skips;
.ci/run installs it beside the wheel (stage 3s) and runs this file there.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _mypy import strict_mypy
from llamafast import ChatFields, ChatRequest, Config, ToolSchema, User
from llamafast._body import build_body
from llamafast._messages import FIELDS, MAX_COMPLETION_TOKENS, chat_request
from llamafast._values import ReasoningEffort

# A keyword wider than its field: `tools` takes the openai-shaped dicts too (converted to
# ToolSchemas, docs/request-body.md, rule OPENAI-SHAPE).
WIDER: dict[str, Any] = {"tools": Sequence[ToolSchema | Mapping[str, Any]]}
# A keyword that is no field of ChatRequest but another field's name: the openai SDK's name for
# `max_tokens`, sent as it (rule OPENAI-SHAPE), so typed as it.
ALIASES: dict[str, str] = {MAX_COMPLETION_TOKENS: "max_tokens"}


def test_chat_fields_are_the_keywords_chat_request_takes() -> None:
    # The TypedDict and what the call reads at run time cannot drift apart: a field added to
    # ChatRequest (so taken as a keyword) and not to ChatFields, or the reverse, fails here.
    keys = typing.get_type_hints(ChatFields)
    assert set(keys) == set(FIELDS)
    assert ChatFields.__total__ is False  # every keyword may be left out
    assert set(ChatFields.__optional_keys__) == set(keys)
    defaults = {f.name: f.default for f in dataclasses.fields(ChatRequest)}
    for name in keys:  # each is taken, alone, with its field's default
        value = defaults.get(ALIASES.get(name, name), dataclasses.MISSING)
        chat_request([User("hi")], {name: None if value is dataclasses.MISSING else value})
    with pytest.raises(TypeError, match="'max_token' is not a field of a chat request"):
        chat_request([User("hi")], {"max_token": 5})


def test_chat_fields_have_their_fields_types() -> None:
    request = typing.get_type_hints(ChatRequest)
    want = {name: WIDER.get(name, request[ALIASES.get(name, name)]) for name in FIELDS}
    assert typing.get_type_hints(ChatFields) == want


def test_reasoning_effort_is_typed_as_the_levels_the_body_takes() -> None:
    # A type checker refuses a level the server does not know (rule REASONING), as the body does.
    effort = typing.get_type_hints(ChatFields)["reasoning_effort"]
    assert typing.get_args(effort) == (ReasoningEffort, type(None))
    assert typing.get_type_hints(ChatRequest)["reasoning_effort"] == effort
    for level in typing.get_args(ReasoningEffort):
        assert f'"reasoning_effort":"{level}"' in build_body(
            Config(), ChatRequest(0, [User("hi")], reasoning_effort=level)
        )
    with pytest.raises(ValueError, match="reasoning_effort must be one of"):
        build_body(Config(), ChatRequest(0, [User("hi")], reasoning_effort="hgih"))  # type: ignore[arg-type]


def test_chat_fields_is_public_in_both_faces() -> None:
    assert llamafast.ChatFields is llamafast.pure.ChatFields is ChatFields
    assert "ChatFields" in llamafast.__all__ and "ChatFields" in llamafast.pure.__all__


# Each line marked `# E: code` must have exactly that mypy error; no other line may have one.
WRONG = """\
from llamafast import AsyncClient, Client, Embeddings, User

messages = [User("hi")]


def sync_calls(client: Client) -> None:
    client.stream(messages, max_token=5)  # E: call-arg
    client.stream(messages, temperature="hot")  # E: arg-type
    client.stream(messages, slot="0")  # E: arg-type
    client.stream(messages, thinking=None)  # E: arg-type
    client.stream(messages, logprobs=1.5)  # E: arg-type
    client.stream(messages, max_completion_tokens=2.5)  # E: arg-type
    client.stream(messages, reasoning_budget_tokens="64")  # E: arg-type
    client.complete(messages, top_k=1.5)  # E: arg-type
    client.complete(messages, seeed=1)  # E: call-arg
    client.complete(messages, response_format="json")  # E: arg-type
    client.count_tokens(messages, max_token=5)  # E: call-arg
    client.count_tokens(messages, tools=[1])  # E: list-item
    client.count_tokens(messages, reasoning_effort=0)  # E: arg-type
    client.count_tokens(messages, reasoning_effort="hgih")  # E: arg-type


async def async_calls(client: AsyncClient) -> None:
    client.stream(messages, max_token=5)  # E: call-arg
    client.stream(messages, temperature="hot")  # E: arg-type
    client.stream(messages, grammar=b"root ::= x")  # E: arg-type
    await client.complete(messages, min_p="0.1")  # E: arg-type
    await client.complete(messages, tool_choice=1)  # E: arg-type
    await client.complete(messages, stream=True)  # E: call-arg
    await client.count_tokens(messages, model=1)  # E: arg-type
    await client.count_tokens(messages, extra=[("a", 1)])  # E: arg-type
    await client.count_tokens(messages, max_token=5)  # E: call-arg
    await client.complete(messages, reasoning_effort="off")  # E: arg-type
    await client.complete(messages, max_completion_tokens="5")  # E: arg-type


def rows(e: Embeddings) -> None:
    y: str = e[0][0]  # E: assignment
    n: int = e[0][0]  # E: assignment
    for row in e:
        s: str = row[0]  # E: assignment
    v: bytes = e.view[0, 0]  # E: assignment
    print(y, n, s, v)
"""

RIGHT = """\
from typing import assert_type

from llamafast import (
    AsyncClient,
    ChatFields,
    ChatRequest,
    Client,
    Completion,
    Embeddings,
    ToolSchema,
    User,
)

messages = [User("hi")]
tool = {"type": "function", "function": {"name": "f", "parameters": {}}}


def sync_calls(client: Client) -> None:
    with client.stream(messages, max_tokens=5, temperature=0.7, top_p=0.9, top_k=40) as stream:
        for _ in stream:
            pass
    done: Completion = client.complete(
        [{"role": "user", "content": "hi"}],
        slot=0,
        thinking=True,
        min_p=0.05,
        seed=1,
        stop=["\\n"],
        tools=[ToolSchema("f", "d", {}), tool],
        tool_choice="auto",
        response_format={"type": "json_object"},
        grammar=None,
        model="m",
        logprobs=True,
        top_logprobs=2,
        extra={"n_probs": 1},
    )
    print(done)
    n: int = client.count_tokens(messages, max_completion_tokens=5, reasoning_effort="none")
    print(n, client.count_tokens(ChatRequest(0, messages)))
    options: ChatFields = {"temperature": 0.0, "reasoning_budget_tokens": 64}
    options["reasoning_effort"] = "low"
    client.stream(messages, **options)


async def async_calls(client: AsyncClient) -> None:
    async with client.stream(messages, max_tokens=5, temperature=1) as stream:
        async for _ in stream:
            pass
    done: Completion = await client.complete(messages, None, stop=(), tools=())
    n: int = await client.count_tokens(messages, slot=None, top_logprobs=None)
    print(done, n)


def rows(e: Embeddings) -> None:
    x: float = e[0][0]
    assert_type(e[0][0], float)
    assert_type(e.view[0, 0], float)
    for row in e:
        assert_type(row[0], float)
    print(x, memoryview(e).shape)  # still a buffer (PEP 688)
"""

ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: (?P<text>.*)  \[(?P<code>[a-z-]+)\]$")


def _expected(text: str) -> dict[int, str]:
    """Line number -> the error code its `# E: code` comment expects."""
    marks = (re.search(r"# E: ([a-z-]+)$", line) for line in text.splitlines())
    return {n: m.group(1) for n, m in enumerate(marks, 1) if m}


def test_mypy_strict_flags_each_wrong_call_and_passes_the_right_ones(tmp_path: Path) -> None:
    wrong, right = tmp_path / "wrong_calls.py", tmp_path / "right_calls.py"
    wrong.write_text(WRONG, encoding="utf-8")
    right.write_text(RIGHT, encoding="utf-8")
    done = strict_mypy(tmp_path, wrong, right)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    report = done.stdout
    found: dict[str, dict[int, str]] = {wrong.name: {}, right.name: {}}
    for line in report.splitlines():
        hit = ERROR.match(line)
        assert hit is not None or ": note: " in line, f"unexpected mypy output: {line}"
        if hit is not None:
            where = found[Path(hit["file"]).name]
            assert int(hit["line"]) not in where, f"two errors on one line: {line}\n{report}"
            where[int(hit["line"])] = hit["code"]
    assert found[right.name] == {}, report
    assert found[wrong.name] == _expected(WRONG), report
