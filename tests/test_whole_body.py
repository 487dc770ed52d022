# The rules of a body read whole (docs/client.md, rule WHOLE-BODY), in both twins: once the core
# asks for it (`whole(limit, taken)`), a body with a Content-Length is received straight into one
# buffer of that size, the bytes handed out before starting it; a declared length past the limit
# is refused before anything is allocated; a chunked or until-close body grows one buffer, kept
# up to the limit; the arrivals inside a whole body wake nobody until it is complete; the buffer
# is handed over with room after it, so a reader may parse it where it landed; the Cython twin
# reuses a buffer only once nobody holds it. Then through every client: a head declaring more
# than the call's limit fails at once, without waiting for the body.
"""A body read whole: one buffer, its limit, its wakes, its reuse; through the clients."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _cuts import fill
from _hostile import HostileServer, answer
from llamafast import Config, InferConfig, Limits, ProtocolError
from llamafast._core import MAX_SLOTS_BODY
from llamafast._limits import WHOLE_PAD

BODY = bytes(random.Random(7).randrange(256) for _ in range(300_000))


def head(length: int) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n".encode()


def chunked(body: bytes, size: int = 70_000) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for at in range(0, len(body), size):
        part = body[at : at + size]
        out += f"{len(part):x}\r\n".encode() + part + b"\r\n"
    return out + b"0\r\n\r\n"


def read_whole(impl: Any, raw: bytes, cuts: list[int], limit: int) -> tuple[Any, bytes]:
    """`raw` fed at `cuts`; the body asked whole (with what came before) once the head is in."""
    parser = impl.ResponseParser()
    taken: list[bytes] = []
    asked = False
    for views in fill(parser, raw, cuts):
        taken += [bytes(v) for v in views]
        if parser.head_done and not asked:
            assert parser.whole(limit, taken)
            asked = True
            taken = []
    assert not taken  # after whole(), nothing more is handed out as views
    return parser, bytes(parser.take_body())


@pytest.mark.parametrize("seed", range(6))
def test_a_content_length_body_lands_in_one_buffer_of_its_size(impl: Any, seed: int) -> None:
    raw = head(len(BODY)) + BODY
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(raw)), 5))
    parser = impl.ResponseParser()
    taken: list[bytes] = []
    for views in fill(parser, raw[: cuts[0] + 40], [cuts[0]]):
        taken += [bytes(v) for v in views]
    assert parser.head_done
    assert parser.whole(len(BODY), taken)
    left = len(BODY) - sum(map(len, taken))
    assert parser.body_left == left
    assert len(parser.free()) == left  # where the rest lands: exactly the rest, one buffer
    parser2, body = read_whole(impl, raw, cuts, len(BODY))
    assert body == BODY and parser2.done and parser2.body_left == 0


def test_the_whole_body_is_handed_over_with_room_after_it(impl: Any) -> None:
    parser = impl.ResponseParser()
    for _ in fill(parser, head(len(BODY)) + BODY[:10], []):
        pass
    parser.whole(len(BODY), [BODY[:10]])
    free = parser.free()
    free[:] = BODY[10:]
    assert parser.filled(len(BODY) - 10) == [] and parser.done
    view = parser.take_body()
    assert bytes(view) == BODY
    assert isinstance(view.obj, bytearray) and len(view.obj) >= len(BODY) + WHOLE_PAD


def test_a_declared_length_past_the_limit_is_refused_before_allocating(impl: Any) -> None:
    parser = impl.ResponseParser()
    for _ in fill(parser, head(1 << 40), []):
        pass
    assert parser.whole(1 << 31, []) is False  # a terabyte declared: nothing allocated
    assert parser.body_left == 0


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
def test_a_declared_length_holds_no_memory_before_its_bytes_come(impl: Any) -> None:
    # A head may declare up to the call's limit (2 GiB for embeddings) and send little: the
    # buffer of a whole body costs what has come, not what was declared.
    declared = 1 << 30
    parser = impl.ResponseParser()
    for _ in fill(parser, head(declared) + BODY[:10], []):
        pass
    before = _resident()
    assert parser.whole(1 << 31, [BODY[:10]])
    free = parser.free()
    free[:1000] = BODY[10:1010]
    del free
    assert parser.filled(1000) == []
    assert parser.body_left == declared - 1010
    assert _resident() - before < 256 << 20


@pytest.mark.parametrize("seed", range(4))
def test_the_pure_twins_buffer_grows_past_its_up_front_size(seed: int, monkeypatch: Any) -> None:
    # Past UP_FRONT the pure twin's buffer grows as the bytes come: the same body, however cut.
    from llamafast._engine import _http_py

    monkeypatch.setattr(_http_py, "UP_FRONT", 4096)
    raw = head(len(BODY)) + BODY
    cuts = sorted(random.Random(seed).sample(range(1, len(raw)), 7))
    parser, body = read_whole(_http_py, raw, cuts, len(BODY))
    assert body == BODY and parser.done
    parser = _http_py.ResponseParser()
    for _ in fill(parser, head(len(BODY)), []):
        pass
    assert parser.whole(len(BODY), [])
    assert len(parser.free()) == 4096  # the rest lands where room was made for it


@pytest.mark.parametrize("seed", range(4))
def test_a_chunked_body_grows_one_buffer(impl: Any, seed: int) -> None:
    raw = chunked(BODY)
    cuts = sorted(random.Random(seed).sample(range(1, len(raw)), 7))
    parser, body = read_whole(impl, raw, cuts, len(BODY))
    assert body == BODY and parser.done and not parser.overflow


def test_a_chunked_body_past_the_limit_overflows_and_keeps_no_more(impl: Any) -> None:
    parser = impl.ResponseParser()
    taken: list[bytes] = []
    for views in fill(parser, chunked(BODY)[:200], []):
        taken += [bytes(v) for v in views]
    parser.whole(1000, taken)
    for _ in fill(parser, chunked(BODY)[200:], []):
        pass
    assert parser.overflow
    assert len(parser.take_body()) <= 1000


def test_arrivals_inside_a_whole_body_wake_nobody_until_it_is_complete(impl: Any) -> None:
    receiver = impl.Receiver(impl.ResponseParser())
    wakes: list[int] = []

    def arrive(data: bytes) -> None:
        receiver.waker = lambda _: wakes.append(len(data))
        buf = receiver.get_buffer(-1)
        buf[: len(data)] = data
        receiver.buffer_updated(len(data))

    raw = head(len(BODY)) + BODY
    arrive(raw[:1000])
    assert wakes == [1000]  # the head: the core is woken to read it
    taken, receiver.early = receiver.early, []
    assert receiver.parser.whole(len(BODY), taken)
    arrive(raw[1000:50_000])
    arrive(raw[50_000:-1])
    assert wakes == [1000]
    arrive(raw[-1:])
    assert wakes == [1000, 1]
    assert bytes(receiver.parser.take_body()) == BODY


def test_the_cython_twin_reuses_a_body_buffer_only_once_nobody_holds_it(c_impl: Any) -> None:
    def read() -> memoryview:
        parser = c_impl.ResponseParser()
        taken: list[bytes] = []
        for views in fill(parser, head(len(BODY)) + BODY[:10], []):
            taken += [bytes(v) for v in views]
        parser.whole(len(BODY), taken)
        parser.free()[: len(BODY) - 10] = BODY[10:]
        parser.filled(len(BODY) - 10)
        return parser.take_body()

    first = read()
    held = read()  # `first` is held: another buffer
    assert held.obj is not first.obj and bytes(first) == bytes(held) == BODY
    buffer = id(first.obj)  # not a reference: one would hold it
    del first
    gc.collect()
    again = read()
    assert id(again.obj) == buffer  # let go of: reused
    assert bytes(held) == BODY  # and the one still held untouched


CLIENTS = [
    llamafast.Client,
    llamafast.AsyncClient,
    llamafast.pure.Client,
    llamafast.pure.AsyncClient,
]


@pytest.mark.parametrize("client_class", CLIENTS, ids=["sync", "async", "pure-sync", "pure-async"])
def test_a_head_declaring_more_than_the_limit_fails_at_once(client_class: Any) -> None:
    # /props may hold MAX_SLOTS_BODY bytes; the head says one more and the body never comes
    server = HostileServer({"/props": answer(head(MAX_SLOTS_BODY + 1), end="hold")}).start()
    limits = Limits(retries=0, connect_timeout=5.0, stall_timeout=5.0, wait_timeout=5.0)
    cfg = Config(InferConfig(url=server.url), limits)
    started = time.monotonic()
    try:
        with pytest.raises(ProtocolError, match=f"longer than {MAX_SLOTS_BODY} bytes"):
            if client_class in (llamafast.Client, llamafast.pure.Client):
                with client_class(cfg) as client:
                    client.props()
            else:

                async def main() -> None:
                    async with client_class(cfg) as client:
                        await client.props()

                asyncio.run(main())
    finally:
        server.stop()
    assert time.monotonic() - started < 4  # not the stall bound: refused once the head said it


# --- the Cython twin's rows, kept for the next call ----------------------------------------------


class _Buffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


def address(value: Any) -> int:
    """Where `value`'s buffer is in memory."""
    view = _Buffer()
    obj = ctypes.py_object(value)
    assert ctypes.pythonapi.PyObject_GetBuffer(obj, ctypes.byref(view), 0) == 0
    where = int(view.buf)
    ctypes.pythonapi.PyBuffer_Release(ctypes.byref(view))
    return where


REUSE = """
import gc, sys
sys.path[:0] = sys.argv[1:]
from test_whole_body import address
from _embed import answer
from llamafast._engine import _twins

rows = [[float(i + j) for j in range(256)] for i in range(200)]
raw = answer(rows)


def embed():
    vectors = _twins.CYTHON.Vectors(len(rows))
    vectors.add([raw], 0, len(rows))
    return vectors.finish()


held = embed()
where = address(held)
other = embed()  # `held` is held: other rows
assert address(other) != where
assert held.tolist() == other.tolist() == rows
kept = address(other)
del other
gc.collect()
blocker = bytearray(200 * 256 * 4 + 1)  # would take the memory were it freed
again = embed()
assert address(again) == kept, "let go of: the next call's rows"
assert held.tolist() == again.tolist() == rows  # the rows held never written
print("ok")
"""


def test_the_cython_twin_reuses_rows_let_go_of_never_rows_held(c_impl: Any) -> None:
    # in a process of its own: the rows kept are the whole process's
    here = str(Path(__file__).parent)
    done = subprocess.run(
        [sys.executable, "-c", REUSE, here], capture_output=True, text=True, check=False
    )
    assert done.stdout == "ok\n", done.stderr
