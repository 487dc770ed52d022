"""What the safety tests of the reader and of the chat stream share: the messages they look
for, and the sources and settings they misuse the twins with."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

ALL_BUSY = "is still running"  # in every "one caller at a time" message
UNINIT = "was never initialised"  # in every "__init__ did not run" message


def split(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


async def achunks(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for c in chunks:
        yield c


class QueueSource:
    """An async source that survives a cancelled read: each read awaits a queue (None: the end)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    def __aiter__(self) -> QueueSource:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self.queue.get()
        if chunk is None:
            raise StopAsyncIteration
        return chunk


async def queue_generator(queue: asyncio.Queue[bytes | None]) -> AsyncIterator[bytes]:
    """An async generator source (as httpx's aiter_bytes is): a cancelled read ends it."""
    while True:
        chunk = await queue.get()
        if chunk is None:
            return
        yield chunk


@contextlib.contextmanager
def fast_switching() -> Iterator[None]:
    """Threads switch as often as the interpreter allows, to open every window there is."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


class Reader:
    """A readinto1 reader writing `chunks` one per read. At each read it first calls
    `back(target)` (both set after construction; its errors are kept in `raised`) and, with
    `pause`, lets other threads run (the GIL is released) before and after taking its chunk."""

    def __init__(self, chunks: list[bytes], pause: bool = False) -> None:
        self.chunks = list(chunks)
        self.pause = pause
        self.lock = threading.Lock()
        self.target: Any = None
        self.back: Callable[[Any], Any] = lambda t: None
        self.raised: list[BaseException] = []

    def readinto1(self, b: memoryview) -> int:
        try:
            self.back(self.target)
        except Exception as err:
            self.raised.append(err)
        if self.pause:
            time.sleep(0)
        with self.lock:
            chunk = self.chunks.pop(0) if self.chunks else b""
        if self.pause:
            time.sleep(0)
        b[: len(chunk)] = chunk
        return len(chunk)


def share(call: Callable[[], Any], threads: int = 2) -> tuple[list[list[Any]], list[BaseException]]:
    """`call` from several threads at once, each until it returns None or raises StopIteration,
    retrying the RuntimeError of a call refused while another runs; what each thread got, and
    every other error."""
    got: list[list[Any]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        while True:
            try:
                item = call()
            except RuntimeError as err:
                if ALL_BUSY not in str(err):
                    errors.append(err)
                    return
                time.sleep(0)
                continue
            except StopIteration:
                return
            except BaseException as err:
                errors.append(err)
                return
            if item is None:
                return
            got[i].append(item)

    with fast_switching():
        workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    return got, errors
