"""The Assembler under hostile use, in both twins: one caller at a time (a finalizer that calls
back into the same Assembler from inside push or finish, another thread), objects made without
__init__, and the nesting depth limit at its edge.

A second call while a push or finish is running is refused with a RuntimeError that names the
Assembler, and the first call goes on as if nothing had happened: its events, the state and the
Completion are those of the same pushes on an undisturbed Assembler.
"""

from __future__ import annotations

import gc
import io
import json
import sys
import threading
import types
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from llamafast import Completion, Content, ProtocolError, Reasoning, ToolCallDelta
from llamafast._engine import _twins

ID = "chatcmpl-safe"
BUSY = (
    r"^Assembler\.(push|finish|partial_arguments)\(\) was called while this Assembler is still"
    r" running"
)

# A chunk with every kind of event (Progress, Reasoning, Content, two tool-call pieces) and
# timings: a push that reads the wrong document, or folds in another push half-way, shows here.
RICH = json.dumps(
    {
        "id": ID,
        "choices": [
            {
                "index": 0,
                "delta": {
                    "reasoning_content": "think",
                    "content": "answer",
                    "tool_calls": [
                        {"index": 0, "id": "c0", "function": {"name": "f", "arguments": "{"}},
                        {"index": 1, "id": "c1", "function": {"name": "g", "arguments": "}"}},
                    ],
                },
                "finish_reason": None,
            }
        ],
        "timings": {"cache_n": 1, "prompt_n": 2, "predicted_n": 3},
        "prompt_progress": {"total": 9, "cache": 1, "processed": 9},
    }
)
STOP = json.dumps({"id": ID, "choices": [{"delta": {}, "finish_reason": "stop"}]})
# What a callback pushes: a different, valid chunk; if it were folded in, the result would show it.
INTRUDER = json.dumps(
    {
        "id": "chatcmpl-other",
        "choices": [{"delta": {"content": "INTRUDER", "tool_calls": [{"index": 0}]}}],
        "timings": {"cache_n": 7, "prompt_n": 7, "predicted_n": 7},
    }
)


PARTIAL = object()  # what Reentrant passes to ask for partial_arguments(0) instead of a push


def undisturbed(impl: types.SimpleNamespace, *payloads: str | bytes) -> tuple[Any, ...]:
    """The events of each push, the state after them and finish's Completion (or its error),
    on a fresh Assembler that nothing disturbs."""
    asm = impl.Assembler()
    events = [asm.push(p) for p in payloads]
    try:
        completion = asm.finish()
    except Exception as err:
        completion = (type(err).__name__, str(err))
    return events, state(asm), completion


def state(asm: Any) -> tuple[Any, ...]:
    return (asm.id, asm.reasoning_tokens, asm.in_reasoning, asm.is_finished)


# --- a finalizer that calls back into the same Assembler ------------------------------------


class Reentrant:
    """Cyclic garbage whose finalizer pushes `payload` into `asm` (or calls its finish when
    `payload` is None), records what happened in `log`, and leaves a new one behind: with gc's
    threshold at 1, every allocation inside push or finish runs one of these finalizers."""

    def __init__(self, asm: Any, payload: Any, log: list[Any], stop: list[bool]) -> None:
        self.asm = asm
        self.payload = payload
        self.log = log
        self.stop = stop
        self.cycle = self

    def __del__(self) -> None:
        if self.stop or len(self.log) >= 300:  # bounded
            return
        try:
            if self.payload is None:
                result: Any = self.asm.finish()
            elif self.payload is PARTIAL:
                result = self.asm.partial_arguments(0)
            else:
                result = self.asm.push(self.payload)
            self.log.append(("ok", result))
        except Exception as err:
            self.log.append((type(err).__name__, str(err)))
        Reentrant(self.asm, self.payload, self.log, self.stop)


class Log(list[Any]):
    """What the finalizers did, and whether the Assembler they call is the Cython twin's."""

    cython = False


# From CPython 3.12 on, the gc runs only between bytecodes (at the eval breaker), never inside
# a C function: no finalizer can run inside the Cython twin's push or finish, so there is no
# such re-entry to refuse there (the threads below still reach it). The tests then say so.
GC_INSIDE_C = sys.version_info < (3, 12)


@contextmanager
def calling_back(asm: Any, payload: Any) -> Iterator[list[Any]]:
    """Within the block, finalizers keep calling back into `asm` (see Reentrant); yields their
    log. No finalizer of this kind runs after the block."""
    log = Log()
    log.cython = _twins.CYTHON is not None and isinstance(asm, _twins.CYTHON.Assembler)
    stop: list[bool] = []
    old = gc.get_threshold()
    gc.collect()
    Reentrant(asm, payload, log, stop)
    gc.set_threshold(1, 1, 1)
    try:
        yield log
    finally:
        stop.append(True)
        gc.set_threshold(*old)
        gc.collect()


def skip_where_no_finalizer_can_run_inside(log: list[Any], busy: list[int]) -> None:
    if not busy and getattr(log, "cython", False) and not GC_INSIDE_C:
        pytest.skip(
            "no finalizer runs inside a C function on Python 3.12+ (the gc waits for the next "
            "bytecode): there is no re-entry from a finalizer to refuse"
        )


def split_log(log: list[Any], method: str) -> tuple[list[Any], list[Any], list[Any]]:
    """The callbacks that ran before the call under test started, the refused ones (while it
    ran) and those after it: every refusal names the Assembler and the `method` the callback
    called, and no callback between the first and the last refusal got in."""
    busy = [i for i, entry in enumerate(log) if entry[0] == "RuntimeError"]
    skip_where_no_finalizer_can_run_inside(log, busy)
    assert busy, "no callback ran inside the call: the test did not test anything"
    first, last = busy[0], busy[-1]
    during = log[first : last + 1]
    for entry in during:
        assert entry[0] == "RuntimeError", entry
        assert entry[1].startswith(f"Assembler.{method}() was called while this Assembler")
    return log[:first], during, log[last + 1 :]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_a_finalizer_pushing_during_push_is_refused(
    impl: types.SimpleNamespace, as_bytes: bool
) -> None:
    payload: str | bytes = RICH.encode() if as_bytes else RICH
    asm = impl.Assembler()
    with calling_back(asm, INTRUDER) as log:
        got = asm.push(payload)
    before, _, after = split_log(log, "push")
    # The push is exactly the one after the callbacks that got in before it started, and the
    # state is that of every push in the order they got in.
    assert all(entry[0] == "ok" for entry in before + after)
    want, _, _ = undisturbed(impl, *[INTRUDER] * len(before), payload, STOP)
    assert got == want[len(before)]
    assert [type(e) for e in got] == [type(e) for e in want[len(before)]]
    asm.push(STOP)  # the first caller goes on with an intact Assembler
    pushes = [INTRUDER] * len(before) + [payload] + [INTRUDER] * len(after) + [STOP]
    _, want_state, want_completion = undisturbed(impl, *pushes)
    assert state(asm) == want_state
    assert asm.finish() == want_completion


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_a_finalizer_pushing_into_another_assembler_during_push_disturbs_neither(
    impl: types.SimpleNamespace, as_bytes: bool
) -> None:
    # The Cython twin parses with one simdjson parser shared by every Assembler: a push that
    # starts while another's document is still being read must not parse into it.
    payload: str | bytes = RICH.encode() if as_bytes else RICH
    asm, other = impl.Assembler(), impl.Assembler()
    with calling_back(other, INTRUDER) as log:
        got = asm.push(payload)
    skip_where_no_finalizer_can_run_inside(log, [1] if len(log) > 1 else [])
    assert len(log) > 1 and all(entry[0] == "ok" for entry in log), log[:3]
    assert got == undisturbed(impl, payload)[0][0]
    asm.push(STOP)
    assert asm.finish() == undisturbed(impl, payload, STOP)[2]
    intruders = [INTRUDER] * len(log)
    want_events, want_state, _ = undisturbed(impl, *intruders)
    assert [entry[1] for entry in log] == want_events
    assert state(other) == want_state


def test_a_finalizer_finishing_during_push_is_refused(impl: types.SimpleNamespace) -> None:
    asm = impl.Assembler()
    asm.push(STOP)
    with calling_back(asm, None) as log:
        got = asm.push(RICH)
    before, _, after = split_log(log, "finish")
    assert got == undisturbed(impl, STOP, RICH)[0][1]
    for entry in before + after:  # a finish outside the push sees a whole state
        assert entry[0] == "ok" and isinstance(entry[1], Completion)
    assert asm.finish() == undisturbed(impl, STOP, RICH)[2]


def test_a_finalizer_asking_for_partial_arguments_during_push_is_refused(
    impl: types.SimpleNamespace,
) -> None:
    # partial_arguments reads the calls that push folds and keeps its own parse state: it is a
    # caller like the others, refused while a push runs.
    def piece(arguments: str, **call: str) -> str:
        function = {"arguments": arguments, **({"name": call["name"]} if call else {})}
        delta = {"index": 0, **({"id": call["id"]} if call else {}), "function": function}
        return json.dumps({"id": ID, "choices": [{"delta": {"tool_calls": [delta]}}]})

    first, more = piece('{"a": "x', id="c0", name="f"), piece("yz")
    asm = impl.Assembler()
    asm.push(first)
    with calling_back(asm, PARTIAL) as log:
        got = asm.push(more)
    before, _, after = split_log(log, "partial_arguments")
    assert got == undisturbed(impl, first, more)[0][1]
    assert {repr(entry) for entry in before} <= {repr(("ok", {"a": "x"}))}
    assert {repr(entry) for entry in after} <= {repr(("ok", {"a": "xyz"}))}
    assert asm.partial_arguments(0) == {"a": "xyz"}


@pytest.mark.parametrize("callback", [INTRUDER, None], ids=["push", "finish"])
def test_a_finalizer_calling_back_during_finish_is_refused(
    impl: types.SimpleNamespace, callback: str | None
) -> None:
    asm = impl.Assembler()
    asm.push(RICH)
    asm.push(STOP)
    with calling_back(asm, callback) as log:
        got = asm.finish()
    before, _, _ = split_log(log, "push" if callback else "finish")
    pushes = [RICH, STOP] + [INTRUDER] * len(before) * (callback is not None)
    assert got == undisturbed(impl, *pushes)[2]


def test_the_refusal_names_the_assembler(impl: types.SimpleNamespace) -> None:
    class Named(impl.Assembler):  # type: ignore[name-defined,misc]
        pass

    asm = Named()
    with calling_back(asm, "{}") as log:
        asm.push(RICH)
    skip_where_no_finalizer_can_run_inside(
        log, [i for i, entry in enumerate(log) if entry[0] == "RuntimeError"]
    )
    (message,) = {entry[1] for entry in log if entry[0] == "RuntimeError"}
    assert message == (
        "Named.push() was called while this Named is still running a push or finish (from "
        "another thread, or from code it called back, such as a finalizer); use one Named per "
        "consumer"
    )


@pytest.mark.parametrize(
    "payload", [INTRUDER, INTRUDER.encode(), "not json", b"\xff", 42, "\ud800", STOP]
)
def test_a_refused_push_of_any_payload_changes_nothing(
    impl: types.SimpleNamespace, payload: Any
) -> None:
    """A good chunk, a bad one, a wrong type: refused while a push runs, whatever it is."""
    asm = impl.Assembler()
    with calling_back(asm, payload) as log:
        got = asm.push(RICH)
    before, during, after = split_log(log, "push")
    assert during
    good = [p for p in (before + after) if p[0] == "ok"]
    pushes = [payload] * len(good) + [RICH]
    if payload in (INTRUDER, INTRUDER.encode(), STOP):
        assert got == undisturbed(impl, *[payload] * len(before), RICH)[0][-1]
    else:  # bad payloads never get in, before or after
        assert not good
        assert got == undisturbed(impl, RICH)[0][0]
        assert state(asm) == undisturbed(impl, *pushes)[1]


# --- threads ----------------------------------------------------------------------------------

# Each payload's events do not depend on the state (no tool calls, no id), so whichever thread
# gets in, a push that is not refused must return exactly these.
PIECES = [chr(ord("a") + i) * (1 + i) for i in range(8)]


def thread_payloads() -> list[tuple[str | bytes, list[Any] | type[Exception]]]:
    out: list[tuple[str | bytes, list[Any] | type[Exception]]] = []
    for i, piece in enumerate(PIECES):
        good = json.dumps({"choices": [{"delta": {"content": piece, "reasoning_content": "r"}}]})
        out.append((good if i % 2 else good.encode(), [Reasoning("r"), Content(piece)]))
    # payloads that make push run Python code (the strict checks, the error message, the
    # deeper parser) and so let the GIL go to another thread in the middle of a push
    deep = "[" * 254 + "]" * 254
    out.append((f'{{"choices":[{{"delta":{{"content":"z"}}}}],"x":{deep}}}', [Content("z")]))
    out.append(('{"choices":[], "x": 1e400}', ProtocolError))
    out.append((b'{"choices":[],"x":"\xff"}', ProtocolError))
    out.append(('{"error":{"code":503,"message":"busy"}}', Exception))
    return out


class Noise:
    """Cyclic garbage whose finalizer runs a little Python code (a point where CPython may hand
    the GIL to another thread) and leaves a new one behind: with gc's threshold at 1, pushes
    are interrupted in the middle, as by any finalizer in a real program."""

    def __init__(self, stop: list[bool]) -> None:
        self.stop = stop
        self.cycle = self

    def __del__(self) -> None:
        if not self.stop:
            sum(range(20))
            Noise(self.stop)


def hammer(asm: Any, payloads: list[Any], rounds: int, log: list[Any], noise: bool) -> None:
    stop: list[bool] = []
    if noise:
        Noise(stop)
    for r in range(rounds):
        for k in range(len(payloads)):
            payload, want = payloads[(k + r) % len(payloads)]
            try:
                got = asm.push(payload)
            except RuntimeError as err:
                log.append(("refused", str(err)))
                continue
            except Exception as err:
                log.append(("error", payload, type(err), want))
                continue
            log.append(("ok", payload, got, want))
    stop.append(True)


def hammer_in_threads(asms: list[Any], payloads: list[Any], noise: bool) -> list[list[Any]]:
    """One thread per entry of `asms` runs `hammer` on it, all at once; their logs."""
    logs: list[list[Any]] = [[] for _ in asms]
    old = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as CPython can
    if noise:
        gc.set_threshold(1, 1, 1)
    try:
        threads = [
            threading.Thread(target=hammer, args=(asm, payloads, 10, log, noise))
            for asm, log in zip(asms, logs, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old[0])
        gc.set_threshold(*old[1])
        gc.collect()
    return logs


@pytest.mark.parametrize("noise", [False, True], ids=["quiet", "finalizers"])
@pytest.mark.parametrize("loop", range(15))
def test_threads_pushing_into_one_assembler(
    impl: types.SimpleNamespace, loop: int, noise: bool
) -> None:
    """Four threads push into one Assembler: each push is whole or refused, never mixed, and
    the Completion holds every accepted piece once."""
    payloads = thread_payloads()
    asm = impl.Assembler()
    logs = hammer_in_threads([asm] * 4, payloads, noise)
    text: Counter[str] = Counter()
    for log in logs:
        for entry in log:
            if entry[0] == "refused":
                assert entry[1].startswith("Assembler.push() was called while this Assembler")
            elif entry[0] == "error":
                _, payload, cls, want = entry
                assert isinstance(want, type) and issubclass(cls, want), (payload, cls)
                assert cls is not RuntimeError
            else:
                _, payload, got, want = entry
                assert got == want, payload
                text.update("".join(e.text for e in got if type(e) is Content))
    asm.push(json.dumps({"id": ID, "choices": [{"finish_reason": "stop"}]}))
    completion = asm.finish()
    assert Counter(completion.content) == text  # every accepted piece, once, whole
    assert completion.reasoning_content == "r" * sum(
        1 for log in logs for e in log if e[0] == "ok" and Reasoning("r") in e[2]
    )


@pytest.mark.parametrize("noise", [False, True], ids=["quiet", "finalizers"])
@pytest.mark.parametrize("loop", range(5))
def test_threads_pushing_into_their_own_assemblers(
    impl: types.SimpleNamespace, loop: int, noise: bool
) -> None:
    """Four threads, one Assembler each, pushing at once (the GIL handed over inside pushes):
    nothing is refused, and every push gives exactly its own events. The Cython twin's shared
    parser is taken by one push at a time; the others parse with their own."""
    payloads = thread_payloads()
    logs = hammer_in_threads([impl.Assembler() for _ in range(4)], payloads, noise)
    for log in logs:
        assert len(log) == 10 * len(payloads)
        for entry in log:
            assert entry[0] != "refused", entry
            if entry[0] == "error":
                _, payload, cls, want = entry
                assert isinstance(want, type) and issubclass(cls, want), (payload, cls)
            else:
                _, payload, got, want = entry
                assert got == want, payload


# --- objects made without __init__ -----------------------------------------------------------


def made_without_init(impl: types.SimpleNamespace) -> list[Callable[[], Any]]:
    class Forgets(impl.Assembler):  # type: ignore[name-defined,misc]
        def __init__(self, tag: str) -> None:
            self.tag = tag  # no super().__init__()

    class Slotted(impl.Assembler):  # type: ignore[name-defined,misc]
        __slots__ = ()

        def __init__(self) -> None:
            pass

    return [
        lambda: impl.Assembler.__new__(impl.Assembler),
        lambda: Forgets("x"),
        lambda: Slotted(),
        lambda: Slotted.__new__(Slotted),
    ]


@pytest.mark.parametrize("which", range(4))
def test_an_assembler_made_without_init_works(impl: types.SimpleNamespace, which: int) -> None:
    asm = made_without_init(impl)[which]()
    assert state(asm) == (None, 0, False, False)
    want_events, want_state, want_completion = undisturbed(impl, RICH, STOP)
    assert [asm.push(RICH), asm.push(STOP.encode())] == want_events
    assert state(asm) == want_state
    assert asm.finish() == want_completion


def test_an_assembler_made_without_init_can_finish_at_once(impl: types.SimpleNamespace) -> None:
    from llamafast import StreamClosedEarlyError

    for make in made_without_init(impl):
        with pytest.raises(StreamClosedEarlyError):
            make().finish()


def test_calling_init_again_changes_nothing(impl: types.SimpleNamespace) -> None:
    """Both twins make their state with the object; __init__ neither resets nor breaks it."""
    asm = impl.Assembler()
    asm.push(RICH)
    asm.__init__()
    asm.push(STOP)
    assert asm.finish() == undisturbed(impl, RICH, STOP)[2]


def test_init_takes_no_arguments(impl: types.SimpleNamespace) -> None:
    with pytest.raises(TypeError):
        impl.Assembler(1)
    with pytest.raises(TypeError):
        impl.Assembler(x=1)


# --- the nesting limit: at most 256 levels, the chunk's own object being the first ------------


def nested(depth: int, kind: str) -> str:
    """A chunk whose deepest container sits at `depth` (the chunk's object is level 1), with a
    content piece so that a chunk that gets through must also be read right."""
    levels = [
        kind == "objects" or (kind == "mixed" and i % 2 == 1) for i in range(depth - 1)
    ]  # below the chunk's object: True for an object, False for an array
    full = kind == "full arrays"  # the deepest container holds a value (else it is empty)
    deepest = ('{"k":1}' if full else "{}") if levels[-1] else ("[1]" if full else "[]")
    value = (
        "".join('{"k":' if o else "[" for o in levels[:-1])
        + deepest
        + "".join("}" if o else "]" for o in reversed(levels[:-1]))
    )
    return (
        f'{{"id":"{ID}","choices":[{{"delta":{{"content":"deep"}},"finish_reason":"stop"}}],'
        f'"x":{value}}}'
    )


def depth_of(payload: str) -> int:
    """How deep objects and arrays nest, counted here independently of both twins."""
    deepest = level = 0
    in_string = escaped = False
    for ch in payload:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            level += 1
            deepest = max(deepest, level)
        elif ch in "]}":
            level -= 1
    return deepest


KINDS = ["arrays", "objects", "full arrays", "mixed"]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("depth", [255, 256])
def test_a_chunk_nested_256_deep_is_accepted(
    impl: types.SimpleNamespace, depth: int, kind: str, as_bytes: bool
) -> None:
    text = nested(depth, kind)
    assert depth_of(text) == depth
    json.loads(text)  # it is JSON
    asm = impl.Assembler()
    assert asm.push(text.encode() if as_bytes else text) == [Content("deep")]
    assert asm.finish().content == "deep"


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("depth", [257, 258, 600])
def test_a_chunk_nested_deeper_than_256_is_refused(
    impl: types.SimpleNamespace, depth: int, kind: str, as_bytes: bool
) -> None:
    text = nested(depth, kind)
    assert depth_of(text) == depth
    payload = text.encode() if as_bytes else text
    asm = impl.Assembler()
    asm.push(RICH)
    with pytest.raises(ProtocolError) as err:
        asm.push(payload)
    assert str(err.value).startswith("the chunk is not valid JSON (nested deeper than 256): ")
    # all or nothing: the refused chunk left no trace
    assert asm.push(STOP) == []
    assert asm.finish() == undisturbed(impl, RICH, STOP)[2]


def test_256_deep_chunks_in_a_row_keep_their_state(impl: types.SimpleNamespace) -> None:
    """The deeper parser used for exactly 256 levels folds into the same state: tool calls and
    text go on across chunks that take it and chunks that do not."""
    deep = "[" * 254 + "]" * 254

    def piece(i: int, with_deep: bool) -> str:
        call = {"index": 0, "function": {"arguments": str(i)}}
        if i == 0:
            call.update(id="c0", function={"name": "f", "arguments": "0"})
        body = json.dumps(
            {"id": ID, "choices": [{"delta": {"content": str(i), "tool_calls": [call]}}]}
        )
        return body[:-1] + f',"x":{deep}}}' if with_deep else body

    payloads = [piece(i, i % 2 == 0) for i in range(6)] + [STOP]
    want = [
        [
            Content(str(i)),
            ToolCallDelta(0, "c0" if i == 0 else None, "f" if i == 0 else None, str(i)),
        ]
        for i in range(6)
    ]
    asm = impl.Assembler()
    assert [asm.push(p) for p in payloads[:-1]] == want
    asm.push(STOP)
    completion: Completion = asm.finish()
    assert completion.content == "012345"
    assert completion.tool_calls[0].arguments == "012345"


@pytest.mark.parametrize("depth", [255, 256, 257])
def test_the_fused_chat_stream_has_the_same_depth_limit(
    impl: types.SimpleNamespace, depth: int
) -> None:
    """The Cython ChatStream parses payloads where the reader left them: the limit is the same."""
    body = f"data: {nested(depth, 'full arrays')}\n\ndata: [DONE]\n\n".encode()
    stream = impl.ChatStream(io.BytesIO(body))
    if depth > 256:
        with pytest.raises(ProtocolError, match=r"^the chunk is not valid JSON \(nested deeper"):
            list(stream)
    else:
        assert list(stream) == [Content("deep")]
        assert stream.completion.content == "deep"


class OddStr(str):
    def __repr__(self) -> str:
        return "OddStr!"

    def encode(self, *args: Any, **kwargs: Any) -> bytes:  # type: ignore[override]
        return b"{}"


class OddBytes(bytes):
    def __repr__(self) -> str:
        return "OddBytes!"

    def decode(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        return "{}"


@pytest.mark.parametrize(
    "payload", [OddStr("not json"), OddBytes(b"not json")], ids=["str", "bytes"]
)
def test_a_str_or_bytes_subclass_is_taken_as_what_it_holds(
    impl: types.SimpleNamespace, payload: Any
) -> None:
    """Its own methods never change what is parsed or what a message shows."""
    plain = str(payload) if isinstance(payload, str) else bytes(payload)
    with pytest.raises(ProtocolError) as err:
        impl.Assembler().push(payload)
    assert str(err.value).endswith(f": {plain!r}")
    body = '{"error":{"code":503,"message":"busy"}}'
    with pytest.raises(Exception) as http:
        impl.Assembler().push(OddStr(body))
    assert type(http.value.body) is str and http.value.body == body


@pytest.mark.parametrize("capped", [False, True, 0, 1, None, "yes"])
def test_finish_hands_thinking_capped_over_as_given_in_both_twins(
    py_impl: types.SimpleNamespace, c_impl: types.SimpleNamespace, capped: Any
) -> None:
    got = []
    for impl in (py_impl, c_impl):
        asm = impl.Assembler()
        asm.push(STOP)
        got.append(asm.finish(capped).thinking_capped)
    assert got[0] is capped and got[1] is capped
