# Strategy: what the server's whole answers mean, as pure functions of their text: each reader
# parses the answer with the one strict reader (`read_json`: STRICT-JSON, as a stream's chunk
# is parsed, so no answer can raise a builtin exception), checks its shape and turns it into
# the library's values; an answer that is not what the call expects is ProtocolError quoting it
# (cut). The mapping of a stream's reader
# faults to the clients' errors (STREAM-ERRORS) lives here too: it is a reading of what came.
"""The readers of the server's whole answers, and the mapping of a stream's faults."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .._config import Limits
from .._errors import (
    HttpError,
    HttpParseError,
    InferError,
    LineTooLongError,
    NotUtf8Error,
    ProtocolError,
    SseIoError,
    SseTimeoutError,
    StalledError,
    StreamClosedEarlyError,
    TruncatedError,
    cut,
    server_message,
    shown_body,
)
from .._limits import COUNT_MAX
from .._strict_json import parse_answer
from .._values import ModelInfo, Ranked, ServerProps

__all__ = [
    "check_slot",
    "control_accepted",
    "count_of",
    "describe",
    "is_loading",
    "json_object",
    "map_stream_error",
    "model_entry",
    "not_served",
    "read_json",
    "read_models",
    "read_props",
    "read_ranked",
    "read_slots",
    "text_of",
]


def is_loading(status: int, body: str) -> bool:
    """llama-server's answer to every request while it loads its model (chat_while_loading)."""
    return status == 503 and server_message(body) == "Loading model"


def read_json(text: str | bytes, what: str) -> Any:
    """The whole answer `text` (its text, or its bytes) to `what` ("GET /slots"), parsed as
    strictly as a stream's chunk (docs/assembler.md, rule STRICT-JSON: nesting at most 256,
    integers within 64 bits, finite numbers, no NaN, no lone surrogate); else ProtocolError
    naming `what` and quoting the answer, whatever the input (docs/client.md, rule WHOLE)."""
    try:
        return parse_answer(text)
    except ValueError as err:
        raise ProtocolError(
            f"{what} answered something that is not JSON ({err}): {cut(text)}"
        ) from None


def read_slots(text: str) -> dict[int, bool]:
    """The 200 answer of GET /slots as {slot position: is processing}. Only `id` and
    `is_processing` are read; an answer that is not a list of slots is ProtocolError."""
    slots = read_json(text, "GET /slots")
    if not isinstance(slots, list) or not all(isinstance(s, dict) for s in slots):
        raise ProtocolError(
            f"GET /slots answered something that is not a list of slots: {cut(text)}"
        )
    busy = {i: s.get("is_processing") is True for i, s in enumerate(slots)}
    for s in slots:  # a slot's own id wins over its position, where it has one
        sid = s.get("id")
        if isinstance(sid, int) and 0 <= sid < len(slots):
            busy[sid] = s.get("is_processing") is True
    return busy


def json_object(text: str, what: str) -> dict[str, Any]:
    """The whole answer `text` to `what`, which must be a JSON object (`read_json`)."""
    answer = read_json(text, what)
    if not isinstance(answer, dict):
        raise ProtocolError(f"{what} answered something that is not a JSON object: {cut(text)}")
    return answer


def count_of(text: str, what: str, key: str) -> int:
    """The count `key` of the object `text` answered to `what`: an int from 0 to COUNT_MAX
    (docs/assembler.md, rule COUNTS), else ProtocolError."""
    count = json_object(text, what).get(key)
    if type(count) is not int or not 0 <= count <= COUNT_MAX:
        raise ProtocolError(f"{what} answered no token count: {cut(text)}")
    return count


def read_props(text: str) -> ServerProps:
    """The 200 answer of GET /props as ServerProps: `default_generation_settings.n_ctx`,
    `model_alias` (else `model_path`), the `modalities` that are true, `total_slots` (0 when
    absent, as a router's own answer). An answer without an integer n_ctx is ProtocolError."""
    props = json_object(text, "GET /props")
    settings = props.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    if type(n_ctx) is not int:
        raise ProtocolError(f"GET /props answered without an integer context size: {cut(text)}")
    model = props.get("model_alias")
    if not isinstance(model, str):
        model = props.get("model_path")
    modalities = props.get("modalities")
    slots = props.get("total_slots")
    return ServerProps(
        n_ctx=n_ctx,
        model=model if isinstance(model, str) else "",
        modalities=frozenset(k for k, v in modalities.items() if v is True)
        if isinstance(modalities, dict)
        else frozenset(),
        slots=slots if type(slots) is int else 0,
    )


def read_models(text: str) -> tuple[tuple[ModelInfo, tuple[str, ...]], ...] | None:
    """The 200 answer of GET /models as (ModelInfo, its aliases) per model, or None when the
    server is not a router (its entries carry no `status`: its one model is loaded and a
    request's `model` is not routed). An answer without a `data` list is ProtocolError."""
    data = json_object(text, "GET /models").get("data")
    if not isinstance(data, list) or not all(
        isinstance(m, dict) and isinstance(m.get("id"), str) for m in data
    ):
        raise ProtocolError(f"GET /models answered without a list of models: {cut(text)}")
    router = any(isinstance(m.get("status"), dict) for m in data)
    out = []
    for m in data:
        status = m.get("status")
        state = status.get("value") if isinstance(status, dict) else None
        aliases = m.get("aliases")
        names = tuple(a for a in aliases if isinstance(a, str)) if isinstance(aliases, list) else ()
        out.append((ModelInfo(m["id"], state if isinstance(state, str) else "loaded"), names))
    return tuple(out) if router else None


def model_entry(models: tuple[tuple[ModelInfo, tuple[str, ...]], ...], name: str) -> ModelInfo:
    """The router's entry for `name` (an id or an alias); an unknown name is ValueError naming
    it and the models the server has."""
    for info, aliases in models:
        if name == info.id or name in aliases:
            return info
    ids = [cut(info.id, 80) for info, _ in models]
    known = ", ".join(ids[:10]) + (f", ... ({len(ids)} in all)" if len(ids) > 10 else "")
    raise ValueError(f"the server has no model {cut(name)} (its models: {known or 'none'})")


def check_slot(slot: int, count: int) -> None:
    """A slot the server does not have is ValueError: llama-server would silently wrap it
    (slot_out_of_range.http)."""
    if slot < count:
        return
    raise ValueError(
        f"slot {slot} does not exist: the server has {count} slot"
        f"{'' if count == 1 else 's'} (0 to {count - 1})"
        if count
        else f"slot {slot} does not exist: the server reports no slots"
    )


def control_accepted(status: int, body: str) -> bool:
    """The control endpoint's answer: True for `{"success":true}`; a `success:false` answer
    (reasoning_control_unknown_id.http: the completion already ended) is False; any other status
    is the server refusing the request: HttpError."""
    if status != 200:
        raise HttpError(status, body)
    answer = read_json(body, "the control endpoint")
    if not isinstance(answer, dict) or not isinstance(answer.get("success"), bool):
        raise ProtocolError(f"the control endpoint answered without a success flag: {cut(body)}")
    return bool(answer["success"])


def map_stream_error(err: Exception, limits: Limits) -> InferError:
    """The InferError for a failure of the reader once the stream has started."""
    if isinstance(err, SseTimeoutError):
        return StalledError(limits.stall_timeout)
    if isinstance(err, TruncatedError):
        return StreamClosedEarlyError(f"the body was cut: {err}")
    if isinstance(err, SseIoError):
        return StreamClosedEarlyError(f"the connection failed: {err.error!r}")
    if isinstance(err, (LineTooLongError, NotUtf8Error)):
        return ProtocolError(f"the server sent a malformed event stream: {err}")
    if isinstance(err, InferError):
        return err
    if isinstance(err, HttpParseError):
        return ProtocolError(f"the server's answer is not HTTP/1.1: {err}")
    return ProtocolError(f"the server sent a malformed response body: {err!r}")


def resume_failure(err: Exception, limits: Limits, why: str) -> InferError:
    """The error of today for a break that could not be resumed (docs/client.md, rule RESUME):
    the one `map_stream_error` gives, saying why resuming failed, the reader's error its
    `__cause__`."""
    today = map_stream_error(err, limits)
    if isinstance(err, SseTimeoutError):
        seconds = limits.stall_timeout
        today = StalledError(
            seconds, f"no byte arrived for {seconds:g} s, and resuming failed: {why}"
        )
    elif isinstance(today, StreamClosedEarlyError):
        today = StreamClosedEarlyError(f"{today.detail}; resuming failed: {why}")
    today.__cause__ = err
    return today


def is_break(err: BaseException) -> bool:
    """A break of the connection, not a fault of the answer: a reset, a stall, a cut."""
    return isinstance(err, (SseIoError, SseTimeoutError, TruncatedError))


def describe(err: BaseException) -> str:
    return str(err) if isinstance(err, InferError) else f"{type(err).__name__}: {err}"


def text_of(parts: Sequence[bytes | memoryview]) -> str:
    return b"".join(parts).decode("utf-8", "replace")


def not_served(
    status: int,
    parts: Sequence[bytes | memoryview],
    flag: str,
    what: str,
    request: str = "",
    url: str = "",
) -> HttpError:
    """The error for a non-200 answer to an embeddings or rerank request (HttpError's `request`
    and `url`); llama-server started without the flag that serves it answers 501 (an older one
    404), and the error says so."""
    err = HttpError(status, text_of(parts), request, url)
    if status in (501, 404):
        said = err.message or shown_body(err.body)
        err.message = f"the server does not serve {what}: start llama-server with {flag} ({said})"
    return err


def read_ranked(text: bytes, count: int, top_n: int | None) -> tuple[Ranked, ...]:
    """The 200 answer of /rerank as Ranked, in the server's order. Each result needs an int
    `index` among the `count` documents, not repeated, and a finite number
    `relevance_score`; at most `top_n` of them (every document when it is None)."""
    doc = read_json(text, "POST /rerank")
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise ProtocolError(f"the rerank answer has no `results` list of objects: {cut(text)}")
    want = count if top_n is None else min(top_n, count)
    if len(results) > want:
        raise ProtocolError(f"the rerank answer has {len(results)} results for {want} wanted")
    seen: set[int] = set()
    ranked = []
    for pos, r in enumerate(results):
        index = r.get("index")
        score = r.get("relevance_score")
        if type(index) is not int or not 0 <= index < count:
            raise ProtocolError(
                f"rerank result {pos} has index {cut(index)}: not one of the {count} documents"
            )
        if index in seen:
            raise ProtocolError(f"rerank result {pos} repeats document {index}")
        if type(score) not in (int, float) or not math.isfinite(score):
            raise ProtocolError(
                f"rerank result {pos} (document {index}) has a score that is not a finite "
                f"number: {cut(score)}"
            )
        seen.add(index)
        ranked.append(Ranked(index, float(score)))
    if top_n is None and len(ranked) < count:
        missing = min(set(range(count)) - seen)
        raise ProtocolError(f"the rerank answer has no result for document {missing}")
    return tuple(ranked)
