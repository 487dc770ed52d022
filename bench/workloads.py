"""What bench/ measures, defined once for the pytest benchmarks and for ratios.py.

Each workload runs one whole generated stream (bench/gen_stream.py) through one path and
returns something that proves the work was done; `twins()` loads the pure twin and, when it is
built, the Cython twin, by module (not through llamafast's selection), so both run side by side.
"""

from __future__ import annotations

import importlib
import io
import types
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import gen_stream
import llamafast.pure
from llamafast import Completion

PIECE = 1 << 16  # the SSE reader's read size: the 64 KiB pieces SseDecoder.feed gets
OPENAI_CHUNKS = 1_000  # the openai SDK path is ~500 µs a chunk: it runs a stream this long
# The class each twin workload needs, and the Cython module that class comes from: a partly
# built Cython twin is measured for what it has.
NEEDS = {
    "sse_feed": "SseDecoder",
    "sse_events": "Events",
    "assemble_bytes": "Assembler",
    "assemble_str": "Assembler",
    "whole": "ChatStream",
}
C_MODULES = {"SseDecoder": "_sse_c", "Events": "_sse_c", "Assembler": "_assemble_c"}
C_MODULES["ChatStream"] = "_chat_c"


def twins() -> dict[str, types.SimpleNamespace]:
    """Both twins' classes by name; what is not built is absent, with its reason in `missing`."""
    pure = types.SimpleNamespace(IMPLEMENTATION="python", missing={})
    cython = types.SimpleNamespace(IMPLEMENTATION="cython", missing={})
    for name, module in C_MODULES.items():
        setattr(pure, name, getattr(llamafast.pure, name))
        try:
            setattr(
                cython, name, getattr(importlib.import_module(f"llamafast._engine.{module}"), name)
            )
        except (ImportError, AttributeError):
            cython.missing[name] = f"not built (llamafast._engine.{module})"
    return {"python": pure, "cython": cython}


def missing(fn: Any, impl: Any) -> str | None:
    """Why `impl` cannot run the workload `fn`, or None when it can."""
    reason: str | None = impl.missing.get(NEEDS.get(fn.__name__, ""))
    return reason


@dataclass
class Stream:
    """One generated stream, in every form a workload takes it."""

    chunks: int = gen_stream.CHUNKS
    seed: int = gen_stream.SEED

    @cached_property
    def body(self) -> bytes:
        return gen_stream.sse(self.chunks, self.seed)

    @cached_property
    def pieces(self) -> list[bytes]:
        return [self.body[i : i + PIECE] for i in range(0, len(self.body), PIECE)]

    @cached_property
    def payloads(self) -> list[str]:
        return list(gen_stream.payloads(self.chunks, self.seed))

    @cached_property
    def payload_bytes(self) -> list[bytes]:
        """As the fused path hands them over: bytes straight from the read buffer."""
        return [p.encode("utf-8") for p in self.payloads]


# --- the workloads: each takes (implementation, stream) ---------------------------------------


def sse_feed(impl: Any, s: Stream) -> int:
    """The SSE reader alone, no I/O: SseDecoder.feed over 64 KiB pieces."""
    decoder = impl.SseDecoder()
    items = 0
    for piece in s.pieces:
        items += len(decoder.feed(piece))
    decoder.close()
    return items


def sse_events(impl: Any, s: Stream) -> int:
    """The SSE reader over a reader: Events over io.BytesIO."""
    items = 0
    for _ in impl.Events(io.BytesIO(s.body)):
        items += 1
    return items


def assemble_bytes(impl: Any, s: Stream) -> Completion:
    """The assembler alone, payloads as bytes (as the fused path gives them)."""
    assembler = impl.Assembler()
    push = assembler.push
    for payload in s.payload_bytes:
        push(payload)
    completion: Completion = assembler.finish()
    return completion


def assemble_str(impl: Any, s: Stream) -> Completion:
    """The assembler alone, payloads as str (as the SSE reader hands them out)."""
    assembler = impl.Assembler()
    push = assembler.push
    for payload in s.payloads:
        push(payload)
    completion: Completion = assembler.finish()
    return completion


def whole(impl: Any, s: Stream) -> Completion:
    """The whole path: ChatStream over io.BytesIO, bytes in, Completion out."""
    stream = impl.ChatStream(io.BytesIO(s.body))
    for _ in stream:
        pass
    completion: Completion = stream.completion
    return completion


def openai_sdk(s: Stream) -> Any:
    """The openai SDK's own path: its SSEDecoder, its chunk model, ChatCompletionStreamState.

    What `Stream.__stream__` does per event (`[DONE]` check, `sse.json()`, `construct_type` of
    ChatCompletionChunk) and what `client.chat.completions.stream` adds (`handle_chunk`).
    """
    from openai._models import construct_type
    from openai._streaming import SSEDecoder
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    state: Any = ChatCompletionStreamState()
    for sse in SSEDecoder().iter_bytes(iter(s.pieces)):
        if sse.data.startswith("[DONE]"):
            break
        chunk = construct_type(type_=ChatCompletionChunk, value=sse.json())
        for _ in state.handle_chunk(chunk):
            pass
    return state.get_final_completion()


def simdjson_floor(s: Stream) -> int:
    """The floor: `simdjson.Parser().parse` of every payload from Python, one parser reused.

    The document each parse returns is dropped at once (a Parser cannot parse again while proxies
    of its last document are alive).
    """
    import simdjson

    parse = simdjson.Parser().parse
    n = 0
    for payload in s.payload_bytes:
        parse(payload)
        n += 1
    return n


def check(impl: Any, s: Stream) -> None:
    """The workloads `impl` can run do the whole job: every item, and the same completion."""
    if not missing(sse_feed, impl):
        assert sse_feed(impl, s) == s.chunks + 1  # every payload and [DONE]
        assert sse_events(impl, s) == s.chunks + 1
    completions = [
        fn(impl, s) for fn in (assemble_bytes, assemble_str, whole) if not missing(fn, impl)
    ]
    for c in completions:
        assert c == completions[0]
        assert c.finish_reason.value == "tool_calls" and len(c.tool_calls) == 1
        assert c.content and c.reasoning_content
