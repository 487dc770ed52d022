"""The public surface: `llamafast.pure` is a drop-in for the package, the client streams are
exported, and `is DONE` narrows `str | Done` for a type checker.

`llamafast.pure` holds every public name of the package; values, errors, config, build_body and
the clients are the very same objects, and its twins are always the pure-Python ones.
"""

from __future__ import annotations

import asyncio
import importlib.util
import pickle
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import llamafast
import llamafast.pure
from _mypy import strict_mypy
from llamafast import DONE, ChatRequest, Config, Done, InferConfig, User
from llamafast._engine import _twins

# The names each twin defines for itself, and the pure module of each; every other public name
# is one shared object.
TWINS = {name: f"llamafast._engine.{_twins.STEMS[name]}_py" for name in _twins.PUBLIC}
OWN = {"IMPLEMENTATION", "pure"}  # differ by design: which twin runs, and the module itself
CLIENTS = {"Client", "AsyncClient"}  # pure's are the top level's run on the pure twins


def test_pure_has_every_public_name_of_the_package() -> None:
    assert set(llamafast.__all__) == set(llamafast.pure.__all__)
    assert len(llamafast.pure.__all__) == len(set(llamafast.pure.__all__))
    for name in llamafast.__all__:
        assert hasattr(llamafast, name), name
        assert hasattr(llamafast.pure, name), name


def test_the_client_streams_are_exported() -> None:
    assert {"ClientStream", "AsyncClientStream"} <= set(llamafast.__all__)


def test_shared_names_are_the_same_objects() -> None:
    shared = set(llamafast.__all__) - set(TWINS) - OWN - CLIENTS
    assert {"DONE", "Done", "Config", "build_body", "ClientStream", "LlamafastError"} <= shared
    for name in sorted(shared):
        assert getattr(llamafast.pure, name) is getattr(llamafast, name), name


def test_the_twins_of_pure_are_the_pure_ones() -> None:
    for name, module in TWINS.items():
        obj = getattr(llamafast.pure, name)
        assert obj.__module__ == module, name
        assert obj is getattr(importlib.import_module(module), name), name
    assert llamafast.pure.IMPLEMENTATION == "python"
    assert llamafast.pure.pure is llamafast.pure


def test_the_clients_of_pure_run_on_the_pure_twins_only() -> None:
    from llamafast._engine import _chat_py, _http_py

    for name in CLIENTS:
        pure, top = getattr(llamafast.pure, name), getattr(llamafast, name)
        assert issubclass(pure, top) and pure.__module__ == "llamafast.pure", name
        engine = pure._engine
        assert engine.IMPLEMENTATION == "python" and engine.Sink is _chat_py.Sink, name
        for conn in (engine.SyncConnection, engine.AsyncConnection):
            assert issubclass(conn, _http_py.Receiver), name
        assert top._engine.IMPLEMENTATION == llamafast.IMPLEMENTATION, name


def test_pure_is_a_drop_in_for_the_package() -> None:
    # A user module written against the package, given llamafast.pure under its name.
    code = textwrap.dedent(
        """
        import llamafast.pure as llamafast

        items = llamafast.SseDecoder().feed(b'data: {"a":1}\\n\\ndata: [DONE]\\n\\n')
        assert items == ['{"a":1}', llamafast.DONE], items
        assert type(items[1]) is llamafast.Done
        assert llamafast.IMPLEMENTATION == "python"
        assert llamafast.pure.Assembler is llamafast.Assembler
        body = llamafast.build_body(
            llamafast.Config(), llamafast.ChatRequest(0, [llamafast.User("hi")])
        )
        assert '"content":"hi"' in body
        try:
            llamafast.Assembler().push("[]")
        except llamafast.LlamafastError as err:
            assert isinstance(err, llamafast.ProtocolError)
        else:
            raise AssertionError("no error")
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def _closed_port() -> int:
    """A loopback port nothing listens on (so a client that did connect would fail)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_client_stream_is_llamafast_client_stream_without_connecting() -> None:
    cfg = Config(InferConfig(url=f"http://127.0.0.1:{_closed_port()}"))
    stream = llamafast.Client(cfg).stream(ChatRequest(0, [User("hi")]))
    try:
        assert type(stream) is llamafast.ClientStream
        assert type(stream) is llamafast.pure.ClientStream
    finally:
        stream.close()


def test_async_client_stream_is_llamafast_async_client_stream_without_connecting() -> None:
    cfg = Config(InferConfig(url=f"http://127.0.0.1:{_closed_port()}"))

    async def main() -> type:
        async with llamafast.AsyncClient(cfg) as client:
            stream = client.stream(ChatRequest(0, [User("hi")]))
            try:
                return type(stream)
            finally:
                await stream.aclose()

    kind = asyncio.run(main())
    assert kind is llamafast.AsyncClientStream
    assert kind is llamafast.pure.AsyncClientStream


# --- DONE -----------------------------------------------------------------------------------


def test_done_is_the_one_member_of_done() -> None:
    assert list(Done) == [DONE]
    assert isinstance(DONE, Done)
    assert pickle.loads(pickle.dumps(DONE)) is DONE
    assert repr(DONE) == str(DONE) == "DONE"
    assert DONE != "[DONE]"


USER_SCRIPT = """
from llamafast import DONE, Events, SseDecoder, SseItem


def payloads(data: bytes) -> list[str]:
    out: list[str] = []
    for item in SseDecoder().feed(data):
        if item is DONE:
            break
        out.append(item)  # narrowed to str
    return out


def describe(item: SseItem) -> str:
    if item is not DONE:
        return item.upper()
    return "the end"


def first(events: Events) -> str | None:
    item = events.next_item()
    if item is None or item is DONE:
        return None
    return item.strip()
"""


def test_is_done_narrows_for_mypy_strict(tmp_path: Path) -> None:
    script = tmp_path / "user_script.py"
    script.write_text(USER_SCRIPT, encoding="utf-8")
    done = strict_mypy(tmp_path, script)
    assert done.returncode == 0, done.stdout + done.stderr
