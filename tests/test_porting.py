# docs/porting.md shows, side by side, what an openai-python agent writes and what the llamafast
# one writes. Every llamafast block runs as written against `python -m llamafast serve` (one per
# module, `served`), with each twin, as the README's examples do (tests/_examples.py); the
# openai blocks are shown, not run (openai is not a test dependency): each is marked
# `<!-- not run: the openai SDK's ... -->`, and must be the openai SDK's, so no llamafast block
# can hide behind the marker. Then what the page promises: an agent written for the openai
# SDK's message shapes runs with llamafast unchanged but for the client's construction.
"""The porting page's examples against `serve`; an openai-shaped agent loop, both clients."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from _examples import NOT_RUN, Block, blocks, client_module, run_block
from llamafast import Completion, Config, InferConfig
from test_readme import README, _config_file

PAGE = README.parent / "docs" / "porting.md"
ALL = blocks(PAGE.read_text(encoding="utf-8"), "docs/porting.md") if PAGE.is_file() else []
PYTHON = [b for b in ALL if b.lang == "python"]
SHOWN = [b for b in PYTHON if NOT_RUN.search(b.above)]  # the openai SDK's
RUN = [b for b in PYTHON if not NOT_RUN.search(b.above)]  # llamafast's


def uses_openai(block: Block) -> bool:
    return "from openai import" in block.text or "import openai" in block.text


def test_the_readme_links_to_the_porting_page() -> None:
    assert PAGE.is_file(), "docs/porting.md is missing"
    assert "](docs/porting.md)" in README.read_text(encoding="utf-8")


def test_each_openai_block_is_shown_beside_the_llamafast_one_that_runs() -> None:
    # Side by side: each openai block is followed by llamafast's; what has no counterpart in the
    # openai SDK is shown by a llamafast block alone.
    assert len(SHOWN) >= 8, "a pair per topic: client, chat, stream, messages, tools, ..."
    for i, block in enumerate(PYTHON):
        where = f"docs/porting.md:{block.line}"
        if block in RUN:
            assert not uses_openai(block), f"{where} runs, so it must be llamafast's alone"
            assert "llamafast.toml" in block.text, f"{where}: the test points it at serve so"
            continue
        assert "openai" in NOT_RUN.search(block.above)["reason"], f"{where}: say it is openai's"
        assert uses_openai(block), f"{where} is marked the openai SDK's but imports none of it"
        assert i + 1 < len(PYTHON) and PYTHON[i + 1] in RUN, f"{where}: llamafast's must follow"


@pytest.mark.parametrize("block", SHOWN, ids=[f"docs/porting.md:{b.line}" for b in SHOWN])
def test_an_openai_block_is_valid_python(block: Block) -> None:
    compile(block.text, f"docs/porting.md:{block.line}", "exec")


@pytest.mark.parametrize("block", RUN, ids=[f"docs/porting.md:{b.line}" for b in RUN])
def test_a_llamafast_block_runs_as_written_against_serve(
    block: Block, served: str, tmp_path: Path, impl: SimpleNamespace
) -> None:
    where = f"docs/porting.md:{block.line}"
    run_block(block, where, _config_file(), served, tmp_path, impl)


@pytest.mark.parametrize(
    "shown",
    [
        '"developer"',
        '"name"',
        '"type": "text"',
        "max_completion_tokens=",
        "to_message()",
        '"role": "tool"',
        "ToolCallDelta",
        "AsyncClient(",
        "asyncio.gather",
        ".embed(",
        ".to_numpy()",
        "ContextOverflowError",
        "Waiting",
        "Queued",
        "thinking=True",
        "slot=",
    ],
)
def test_the_page_runs_what_the_issue_asks_it_to_show(shown: str) -> None:
    assert any(shown in b.text for b in RUN), f"no llamafast block of docs/porting.md uses {shown}"


# --- the promise: an agent in the openai SDK's message shapes runs unchanged ------------------

READ_FILE = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
READ_FILE_TOOL = {"name": "read_file", "description": "Read a text file.", "parameters": READ_FILE}
TOOLS = [{"type": "function", "function": READ_FILE_TOOL}]  # the openai SDK's tool dicts


def openai_history() -> list[dict[str, Any]]:
    """A conversation as an agent written for the openai SDK keeps it."""
    return [
        {"role": "developer", "content": "Answer in one sentence."},
        {"role": "user", "name": "ada", "content": "Hello."},
        {"role": "assistant", "name": "helper", "content": [{"type": "text", "text": "Hello!"}]},
        {"role": "user", "name": "ada", "content": "Read notes.txt and sum it up."},
    ]


def agent(ask: Callable[[list[dict[str, Any]]], Completion]) -> list[dict[str, Any]]:
    """The loop of an openai agent, `ask` the one call that differs: the history it ends with."""
    messages = openai_history()
    for _ in range(4):
        done = ask(messages)
        messages.append(done.to_message())
        if not done.tool_calls:
            return messages
        messages += [
            {"role": "tool", "tool_call_id": c.id, "content": "buy milk"} for c in done.tool_calls
        ]
    raise AssertionError(f"no answer after 4 turns: {messages[4:]}")


def asks(mod: Any, client_kind: str, url: str) -> Callable[[list[dict[str, Any]]], Completion]:
    """One turn with `mod`'s sync Client or AsyncClient: the client's construction and call,
    all that an openai agent changes."""
    cfg = Config(InferConfig(url=url))
    if client_kind == "sync":

        def turn_sync(messages: list[dict[str, Any]]) -> Completion:
            with mod.Client(cfg) as client:
                return client.complete(messages, tools=TOOLS, max_completion_tokens=64)  # type: ignore[no-any-return]

        return turn_sync

    async def turn(messages: list[dict[str, Any]]) -> Completion:
        async with mod.AsyncClient(cfg) as client:
            return await client.complete(messages, tools=TOOLS, max_completion_tokens=64)  # type: ignore[no-any-return]

    return lambda messages: asyncio.run(turn(messages))


@pytest.mark.parametrize("client_kind", ["sync", "async"])
def test_an_agent_written_for_the_openai_sdk_runs_unchanged_but_for_the_client(
    served: str, impl: SimpleNamespace, client_kind: str
) -> None:
    # serve answers a request with tools whose last message is the user's with a recorded tool
    # call, and the one after the tool's reply with an answer: one round trip, then the end.
    messages = agent(asks(client_module(impl), client_kind, served))
    assert messages[:4] == openai_history()  # the client changed none of them
    call_turn, reply, answer = messages[4:]
    (call,) = call_turn["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "read_file"
    assert isinstance(call["function"]["arguments"], str)  # the JSON text, as it arrived
    assert reply == {"role": "tool", "tool_call_id": call["id"], "content": "buy milk"}
    assert answer["role"] == "assistant" and answer["content"]
    assert "tool_calls" not in answer
