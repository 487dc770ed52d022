"""The values both implementations hand out: one definition, imported by the pure twins and the
Cython twins alike, so `==`, `match` and `isinstance` behave the same whichever one runs.

Frozen, slotted dataclasses: immutable, equal by value, usable in `match`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, FrozenInstanceError, dataclass, is_dataclass
from typing import Any, Final, Literal, TypeAlias

from ._errors import ProtocolError, cut
from ._partial_json import locate
from ._strict_json import parse as strict_parse

__all__ = [
    "DONE",
    "Assistant",
    "Audio",
    "ChatEvent",
    "ChatMessage",
    "ChatRequest",
    "Completion",
    "Content",
    "Done",
    "FinishReason",
    "Image",
    "ModelInfo",
    "Part",
    "Progress",
    "Queued",
    "Ranked",
    "Reasoning",
    "Retrying",
    "ServerProps",
    "SseItem",
    "System",
    "Text",
    "ThinkingCapped",
    "Timings",
    "TokenLogprob",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolSchema",
    "Usage",
    "User",
    "Waiting",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One finished tool call: `id` (the server's call id, which a `Tool` message answers),
    `name` (the function called) and `arguments` (the JSON text exactly as received, never
    parsed; `parse_arguments()` parses it)."""

    id: str
    name: str
    arguments: str

    def parse_arguments(self) -> Any:
        """`arguments` as a Python value, parsed as strictly as the assembler parses a chunk
        (no NaN or Infinity, integers within 64 bits, no lone surrogate, nesting at most 256).

        Raises ProtocolError naming the call and the position of the fault.
        """
        text = self.arguments
        try:
            return strict_parse(text, text.encode("utf-8"))
        except ValueError as err:  # the strict reader's only fault, at any depth
            fault = locate(text) if isinstance(text, str) else None
            where = (
                f"at position {fault.position}: {fault.reason}" if fault is not None else f"({err})"
            )
            raise ProtocolError(
                f"tool call {self.id!r} ({self.name}) has arguments that are not valid JSON "
                f"{where}: {cut(text)}"
            ) from None


# The content parts a System or User message may hold instead of plain text (docs/request-body.md,
# rule PARTS): OpenAI's content-part shape, which llama-server started with --mmproj reads.


@dataclass(frozen=True, slots=True)
class Text:
    """A piece of a message's content parts: `text`."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"Text.text must be a string, not {cut(self.text)}")


def _bytes(owner: str, data: object) -> bytes:
    """`data` (any bytes-like object) as immutable bytes, so the part stays equal and hashable."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"{owner}.data must be bytes, not {type(data).__name__}")


@dataclass(frozen=True, slots=True, repr=False)
class Image:
    """An image: its bytes with their MIME type (`data` and `mime`, such as "image/png"), or
    `url`, which the server fetches (http:// or https://) or decodes (a `data:` URI)."""

    data: bytes | None = None
    mime: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if self.url is not None:
            if self.data is not None or self.mime is not None:
                raise ValueError("Image takes either data and mime, or url, not both")
            if not isinstance(self.url, str) or not self.url:
                raise TypeError(f"Image.url must be a non-empty string, not {cut(self.url)}")
            return
        if self.data is None:
            raise ValueError("Image needs data (with its mime type) or a url")
        object.__setattr__(self, "data", _bytes("Image", self.data))
        # llama-server decodes only a data:image/...;base64 URI as an image.
        mime = self.mime
        if not isinstance(mime, str) or not mime.startswith("image/") or "," in mime:
            raise ValueError(
                f"Image.mime must be an image MIME type such as 'image/png', not {cut(mime)}"
            )

    def __repr__(self) -> str:
        if self.url is not None:
            return f"Image(url={cut(self.url)})"
        return f"Image(data=<{len(self.data or b'')} bytes>, mime={self.mime!r})"


@dataclass(frozen=True, slots=True, repr=False)
class Audio:
    """A sound: its bytes (`data`) and their `format`, such as "wav" or "mp3"."""

    data: bytes
    format: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", _bytes("Audio", self.data))
        if not isinstance(self.format, str) or not self.format:
            raise ValueError(
                f"Audio.format must be a format name such as 'wav' or 'mp3', not {cut(self.format)}"
            )

    def __repr__(self) -> str:
        return f"Audio(data=<{len(self.data)} bytes>, format={self.format!r})"


Part: TypeAlias = Text | Image | Audio
"""A content part: `Text`, `Image` or `Audio`."""


def _content(owner: str, content: object) -> str | tuple[Part, ...]:
    """A System or User message's content: a string, or its parts as a tuple (checked)."""
    if isinstance(content, str):
        return content
    what = "a string or a sequence of Text, Image and Audio parts"
    return _parts(owner, content, what, (Text, Image, Audio))


def _assistant_content(content: object) -> str | tuple[Text, ...] | None:
    """An assistant's content: None, a string, or its text parts as a tuple (checked): the
    server reads only text parts in an assistant message."""
    if content is None or isinstance(content, str):
        return content
    return _parts("Assistant", content, "a string, a sequence of Text parts or None", (Text,))


def _parts(owner: str, content: object, what: str, kinds: tuple[type, ...]) -> tuple[Any, ...]:
    """`content`'s parts as a tuple: a sequence, not empty, of the `kinds` only (else the error
    says `what` the content may be, or the kinds a part may be, naming the part's index)."""
    if isinstance(content, (bytes, bytearray)) or not isinstance(content, Sequence):
        raise TypeError(f"{owner}.content must be {what}, not {cut(content)}")
    parts = tuple(content)
    if not parts:
        raise ValueError(f"{owner}.content is an empty sequence of parts: give at least one")
    for i, part in enumerate(parts):
        if not isinstance(part, kinds):
            names = " or ".join(", ".join(k.__name__ for k in kinds).rsplit(", ", 1))
            raise TypeError(
                f"{owner}.content[{i}] must be {names}, not {type(part).__name__}: {cut(part)}"
            )
    return parts


def _check_name(owner: str, name: object) -> None:
    """A message's `name` (docs/request-body.md, rule MESSAGES): None, or a string the server
    hands to the template as it is; an empty one it would drop, so it is refused."""
    if name is None:
        return
    if not isinstance(name, str):
        raise TypeError(f"{owner}.name must be a string or None, not {cut(name)}")
    if not name:
        raise ValueError(f"{owner}.name is empty: give the name or leave it None")


# The four kinds of chat message (docs/request-body.md, rule MESSAGES). `name` (the speaker's
# name, which llama-server hands to the chat template) is on the roles openai gives one.


@dataclass(frozen=True, slots=True)
class System:
    """A system message: `content`, its text or a sequence of parts (`Text`, `Image`, `Audio`;
    kept as a tuple), and `name` (the speaker's, or `None`)."""

    content: str | Sequence[Part]
    name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", _content("System", self.content))
        _check_name("System", self.name)


@dataclass(frozen=True, slots=True)
class User:
    """A user message: `content`, its text or a sequence of parts (`Text`, `Image`, `Audio`;
    kept as a tuple), and `name` (the speaker's, or `None`)."""

    content: str | Sequence[Part]
    name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", _content("User", self.content))
        _check_name("User", self.name)


@dataclass(frozen=True, slots=True)
class Assistant:
    """An assistant message, sent back as it arrived so the prompt cache holds: `content` (the
    answer, `None` when there was none; a sequence of `Text` parts is kept as a tuple and sent
    as parts), `reasoning_content` (the reasoning, or `None`), `tool_calls` (the `ToolCall`s it
    made) and `name` (the speaker's, or `None`)."""

    content: str | Sequence[Text] | None = None
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    name: str | None = None

    def __post_init__(self) -> None:
        if self.content is not None and not isinstance(self.content, str):
            object.__setattr__(self, "content", _assistant_content(self.content))
        _check_name("Assistant", self.name)


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool's answer: `tool_call_id` (the `ToolCall.id` it answers) and `content` (the result
    as text)."""

    tool_call_id: str
    content: str


ChatMessage: TypeAlias = System | User | Assistant | Tool
"""Any chat message: `System`, `User`, `Assistant` or `Tool`."""


# reasoning_effort's levels, as llama-server names them (`--reasoning-effort` in its
# common/arg.cpp): "none" turns thinking off (server-common.cpp), the others reach the template.
# The one list of them: a type checker refuses any other, and so does the body (_body.EFFORTS).
ReasoningEffort: TypeAlias = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """A tool the model may call: `name` (what the model calls it by), `description` (what it
    does, for the model) and `parameters` (a JSON Schema object for its arguments)."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def __post_init__(self) -> None:
        # The server reads `parameters` as a JSON Schema object; anything else is refused here,
        # when the tool is made, naming it (docs/request-body.md, rule TOOLS).
        if not isinstance(self.parameters, Mapping):
            raise ValueError(
                f"ToolSchema {cut(self.name)}: parameters must be a JSON Schema object (a dict), "
                f"not {type(self.parameters).__name__}: {cut(self.parameters)}"
            )


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat request (docs/request-body.md says how each field is sent).

    `slot`: the server slot to run on (an int from 0), or `None` to let the server pick (the
    clients then keep no per-slot order for it). `messages`: the conversation, `System`, `User`,
    `Assistant` and `Tool` messages. `tools`: the `ToolSchema`s the model may call. `thinking`:
    whether the model reasons first (`enable_thinking`).

    Keyword fields, `None` (or empty) when not set: one left `None` takes the `Config` value where
    the config has one (`max_tokens`, `temperature`, `top_p`, `top_k`) and is otherwise left out
    of the body. `min_p` (from 0 to 1) and `seed` sample; `stop` lists strings that end the
    answer; `tool_choice` is "auto", "none", "required" or a tool's name; `response_format`
    (such as a JSON schema) and `grammar` (GBNF text) constrain the answer; `model` names the
    model a router-mode server routes the request to (None: `InferConfig.model`); `logprobs`
    asks for each answer token's log probability (on the `Content` events and the
    `Completion`), and `top_logprobs` for that many most likely alternatives too (it needs
    `logprobs`); `reasoning_effort` ("none" turns thinking off; "minimal", "low", "medium",
    "high", "xhigh", "max" go to the chat template) and `reasoning_budget_tokens` (the
    reasoning tokens the server itself allows: 0 ends it at once, -1 is the server's default)
    steer the reasoning; `extra` adds fields llama-server accepts that have no field here.
    `conversation` is never sent: with several servers (`InferConfig.urls`) it is the key that
    keeps the conversation on one server, its prompt cache (None: one derived from the first
    system and user messages; docs/client.md, rule FLEET)."""

    slot: int | None
    messages: Sequence[ChatMessage]
    tools: Sequence[ToolSchema] = ()
    thinking: bool = False
    _: KW_ONLY
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: Sequence[str] = ()
    tool_choice: str | None = None
    response_format: Mapping[str, Any] | None = None
    grammar: str | None = None
    model: str | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    reasoning_budget_tokens: int | None = None
    extra: Mapping[str, Any] | None = None
    conversation: str | None = None


class FinishReason(enum.Enum):
    """Why the model stopped: `STOP` (it finished, or hit a stop string), `TOOL_CALLS` (it
    called tools and waits for their answers) or `LENGTH` (it reached `max_tokens`)."""

    STOP = "stop"
    TOOL_CALLS = "tool_calls"
    LENGTH = "length"


@dataclass(frozen=True, slots=True)
class Timings:
    """The server's counts and times (milliseconds) for one completion: `cache_n` prompt tokens
    came from the cache, `prompt_n` were processed in `prompt_ms`, `predicted_n` generated in
    `predicted_ms`. The server's other timing fields are derived from these and ignored."""

    cache_n: int = 0
    prompt_n: int = 0
    predicted_n: int = 0
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0

    @property
    def prompt_per_second(self) -> float:
        """Prompt tokens processed per second; 0.0 when no time was measured."""
        return self.prompt_n / self.prompt_ms * 1000.0 if self.prompt_ms else 0.0

    @property
    def predicted_per_second(self) -> float:
        """Tokens generated per second; 0.0 when no time was measured."""
        return self.predicted_n / self.predicted_ms * 1000.0 if self.predicted_ms else 0.0


@dataclass(frozen=True, slots=True)
class Usage:
    """The token counts the server reports for one request, as it sent them: `prompt_tokens`
    (the prompt, cached ones included), `completion_tokens` (generated) and `cached_tokens` (the
    prompt tokens served from the cache; 0 when the server did not say)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token and how likely the model found it: `token` (its text), `logprob` (its
    natural log probability) and `top` (the most likely tokens at that place, `(text, logprob)`
    pairs, most likely first, as many as `top_logprobs` asked for)."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class ServerProps:
    """What `GET /props` says of the server: `n_ctx` (the context size of a slot, in tokens),
    `model` (its alias or path), `modalities` (the inputs beyond text it takes: "vision",
    "audio", ...) and `slots` (how many it has). A router-mode server answers for itself: n_ctx
    0, no slots."""

    n_ctx: int
    model: str
    modalities: frozenset[str]
    slots: int


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One model a router-mode server serves (`GET /models`): `id` (the name a request gives as
    `model`) and `state` as the server says it ("loaded", "loading", "unloaded", ...). A server
    with one model lists it as "loaded"."""

    id: str
    state: str


@dataclass(frozen=True, slots=True)
class Completion:
    """The whole answer, once the stream has finished: `id` (the server's completion id),
    `content` and `reasoning_content` (the answer and the reasoning text, `None` when there was
    none), `tool_calls` (the `ToolCall`s, in order), `finish_reason` (a `FinishReason`),
    `timings` (the server's last `Timings`), `reasoning_tokens` (tokens generated up to the end
    of the reasoning), `thinking_capped` (whether the client ended the reasoning early at
    `thinking_budget`), `model` (the model the server says answered, `None` when it did not
    say), `usage` (the server's token counts, `None` when it sent none) and `logprobs` (the
    `TokenLogprob`s of the answer, those of the `Content` events in order; empty unless the
    request asked for them)."""

    id: str
    content: str | None
    reasoning_content: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    timings: Timings
    reasoning_tokens: int
    thinking_capped: bool
    model: str | None = None
    usage: Usage | None = None
    logprobs: tuple[TokenLogprob, ...] = ()

    def to_message(self) -> dict[str, Any]:
        """The assistant message of the next turn, as the openai SDK and llama-server write it
        (docs/request-body.md, rule TO-MESSAGE): `role`, `content` (`None` when there was no
        text), `reasoning_content` (only when there was reasoning) and `tool_calls` (only when
        there were calls: `id`, `type` "function", `function` with `name` and `arguments`, the
        JSON text exactly as received, never parsed). A new dict on every call.

        `stream` and `complete` read it back as `Assistant(content, reasoning_content,
        tool_calls)` and send the very bytes that value gives, so the prompt cache holds."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content is not None:
            message["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        return message


# The ChatEvent kinds.


@dataclass(frozen=True, slots=True)
class Queued:
    """This request waits behind `ahead` earlier requests of this client for the same slot."""

    ahead: int


@dataclass(frozen=True, slots=True)
class Waiting:
    """The server cannot start yet: its slot is busy (`slot_busy`) or its model is loading."""

    slot_busy: bool


@dataclass(frozen=True, slots=True)
class Progress:
    """Prompt processing: `processed` of `total` prompt tokens, `cache` of them from the cache."""

    total: int
    cache: int
    processed: int


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A piece of the model's reasoning: `text`, never empty."""

    text: str


@dataclass(frozen=True, slots=True)
class Content:
    """A piece of the answer: `text`, never empty, and `logprobs`, the `TokenLogprob`s of the
    tokens the server sent with it (empty unless the request asked for them)."""

    text: str
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """One streamed piece of tool call `index` (0 for the first call): `id` and `name` are set
    only in the piece that has them (`None` otherwise), and `arguments` is this piece's text of
    the arguments (`""` when it has none)."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True, slots=True)
class ThinkingCapped:
    """The client ended the model's reasoning after `tokens` reasoning tokens."""

    tokens: int


@dataclass(frozen=True, slots=True)
class Retrying:
    """Attempt `attempt` failed with `error`; the next starts after `after_ms` milliseconds."""

    attempt: int
    after_ms: int
    error: str


ChatEvent: TypeAlias = (
    Queued | Waiting | Progress | Reasoning | Content | ToolCallDelta | ThinkingCapped | Retrying
)
"""Anything a chat stream hands out while the answer arrives; `match` on the kind."""


# The documents a rerank orders (the vectors of an embeddings request, `Embeddings`, are
# _engine/_embeddings.py's: on Python 3.11 their class stands on the Cython twin).


@dataclass(frozen=True, slots=True)
class Ranked:
    """One document of a rerank: `index` (its place in the documents sent) and `score` (the
    server's relevance score)."""

    index: int
    score: float


# The SSE reader's items: a data payload as str, or DONE (docs/sse.md, rule DONE).


class Done(enum.Enum):
    """The type of `DONE`, the item for `data: [DONE]`; it has that one member, so a type
    checker narrows `str | Done` with `if item is DONE:`."""

    DONE = "[DONE]"

    def __repr__(self) -> str:
        return "DONE"

    __str__ = __repr__


DONE: Final = Done.DONE
"""The item for `data: [DONE]`, the end of the answer; test it with `item is DONE`."""

SseItem: TypeAlias = str | Done
"""What the SSE reader hands out: a data line's text, or `DONE`."""


def _refuse_setattr(self: object, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to {type(self).__name__}.{name}: it is immutable")


def _refuse_delattr(self: object, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete {type(self).__name__}.{name}: it is immutable")


def seal(namespace: dict[str, object]) -> None:
    """Make every dataclass in `namespace` refuse every assignment with FrozenInstanceError.

    Python 3.11's frozen+slots dataclasses answer an assignment to a name that is not a field
    with "TypeError: super(type, obj)..." (their generated __setattr__ names the class that
    slots=True replaced); these answer it the way they answer one to a field.
    """
    for obj in namespace.values():
        if isinstance(obj, type) and is_dataclass(obj):
            obj.__setattr__ = _refuse_setattr  # type: ignore[method-assign]
            obj.__delattr__ = _refuse_delattr  # type: ignore[method-assign]


seal(globals())
