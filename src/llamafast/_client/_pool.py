# Strategy: keep-alive (docs/client.md, rule KEEP-ALIVE). A client keeps each connection whose
# answer was read to its end, and sends its next request on the one released last (the warmest);
# a connection closed early (a break, a close, a stall, a fault) is never kept, so closing still
# stops the generation. What the pool may hand out is decided without a round trip: a connection
# idle past the server's Keep-Alive timeout (less a margin) or past its `max` is closed, not sent
# on, and one the server closed while idle is seen closed before anything is sent on it (the sync
# client asks the kernel, without blocking; the asyncio one was told by its event loop). A server
# that closes every connection after a streamed answer while its header says keep-alive (what
# llama-server does) is learnt from the first such close, and from then on those connections are
# closed by the client at the stream's end, so no request pays a failed send on one known dead.
# One lock guards the counts and the idle list (the sync client is shared by threads); it is held
# for no I/O. The open count (busy and idle) is bounded by `max_connections`; a request beyond it
# waits for one to come free, by its own deadline.
"""The client's pool of kept-alive connections to its server: `Pool` and `AsyncPool`."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from .._errors import WaitTimeoutError

__all__ = [
    "IDLE_S",
    "AsyncPool",
    "Pool",
    "give_back",
    "keep_alive_terms",
    "leave_pool",
    "renew",
    "shut",
]

IDLE_S = 5.0  # an idle connection is kept at most this long (httpx's keepalive_expiry)
MARGIN_S = 0.5  # and closed this long before the server's Keep-Alive timeout would close it
# A connection found closed within this long of a streamed answer was closed because the answer
# was a stream (llama-server closes at once); later, it may be an idle timeout of the server's.
AFTER_STREAM_S = 1.0


def keep_alive_terms(headers: Mapping[str, str]) -> tuple[float | None, int | None]:
    """The `timeout` (seconds) and `max` (requests on the connection) of a `Keep-Alive` header;
    None for what it does not say or says in a form that is not a number."""
    timeout: float | None = None
    most: int | None = None
    terms = headers.get("keep-alive")
    if not terms:  # a proxy's answers say none: nothing to parse per request
        return timeout, most
    for term in terms.split(","):
        name, _, value = term.partition("=")
        name, value = name.strip().lower(), value.strip()
        if name == "timeout" and value.isdigit():
            timeout = float(value)
        elif name == "max" and value.isdigit():
            most = int(value)
    return timeout, most


def _closed_for_a_stream(conn: Any, now: float) -> bool:
    """`conn`, kept after a streamed answer, was found closed soon after it."""
    return bool(conn.after_stream) and now - conn.idle_since < AFTER_STREAM_S


def _pool_timeout(limit: int, seconds: float) -> WaitTimeoutError:
    err = WaitTimeoutError(round(seconds, 3))
    err.what = (
        f"waiting for one of the {limit} connections to the server (Limits.max_connections) "
        "to come free"
    )
    return err


class Pool:
    """The sync client's pool: `acquire` gives a kept connection or the right to open one (it
    waits, blocking, while `max_connections` are open); `put` keeps an answered connection or
    closes it; a connection's `close()` tells the pool (`gone`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.opened = 0  # connections opened in all (tests and benchmarks read it)
        self.resent = 0  # requests sent again because their kept connection was closed
        self.closes_after_stream = False  # learnt: the server closes after a streamed answer
        self._open = 0  # busy and idle
        self._idle: list[Any] = []  # the last released last
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0  # threads waiting in acquire: only they need a notify
        self._closed = False

    # --- handing out ----------------------------------------------------------------------------

    def _take(self, loop: object, fresh: bool, holding: bool) -> tuple[Any, bool, list[Any]]:
        """Under the lock: (a kept connection still open, or None; whether one may be opened,
        counted now; the kept ones found dead or expired, to close outside the lock)."""
        now = time.monotonic()
        dead: list[Any] = []
        idle = [] if fresh else self._idle
        for i in range(len(idle) - 1, -1, -1):
            conn = idle[i]
            owner = getattr(conn, "loop", None)
            if owner is not loop and not (owner is not None and owner.is_closed()):
                continue  # another running event loop's: only it may use or close it
            del idle[i]
            if owner is not loop:  # its loop has ended (asyncio.run returned): it goes too
                dead.append(conn)
                continue
            if now < conn.idle_until and conn.alive():
                return conn, False, dead
            self._seen_closed(conn, now)
            dead.append(conn)
        if holding or self._open - len(dead) < self.limit:
            self._open += 1
            self.opened += 1
            return None, True, dead
        return None, False, dead

    def _counted(self, conn: Any) -> Any:
        conn.pool = self
        conn.uses = 0
        conn.most = 1 << 62
        return conn

    def acquire(self, until: float, fresh: bool = False, holding: bool = False) -> Any:
        """A kept connection (its `reused` True), or None: open one (it is counted: hand it
        to `opened_one`, or call `unreserve` if opening fails); `fresh`: None, never a kept
        one. Waits while `limit` are open, until the clock reads `until`: WaitTimeoutError
        naming max_connections; but a request `holding` a connection already (a stream's
        `/slots` probe or control request) never waits for a second, so no request waits
        for itself."""
        start = time.monotonic()
        while True:
            with self._cond:
                conn, may_open, dead = self._take(None, fresh, holding)
                if not (conn is not None or may_open or dead):
                    left = until - time.monotonic()
                    if left <= 0:
                        raise _pool_timeout(self.limit, time.monotonic() - start)
                    self._waiting += 1
                    try:
                        self._cond.wait(left)
                    finally:
                        self._waiting -= 1
            for stale in dead:
                stale.close()
            if conn is not None or may_open:
                return conn

    def _notify(self) -> None:
        # Read after the change it tells of (made under the lock): a waiter counted later
        # found that change itself before it waited.
        if self._waiting:
            with self._cond:
                self._cond.notify()

    # --- giving back ----------------------------------------------------------------------------

    def opened_one(self, conn: Any) -> Any:
        """`conn` was opened on the right `acquire` gave: counted until it is closed."""
        conn.reused = False
        return self._counted(conn)

    def unreserve(self) -> None:
        """Opening the connection `acquire` allowed failed: it is not counted."""
        with self._cond:
            self._open -= 1
        self._notify()

    def gone(self, conn: Any) -> None:
        """`conn` was closed (its `close()` calls this once)."""
        self._untimed(conn)
        with self._cond:
            self._open -= 1
            if conn in self._idle:
                self._idle.remove(conn)
        self._notify()

    def _seen_closed(self, conn: Any, now: float) -> None:
        """`conn`, kept or being kept, was found closed by the server: within AFTER_STREAM_S
        of a streamed answer's end, that server closes after streams (learnt); later, it may
        have been an idle timeout, which teaches nothing."""
        if _closed_for_a_stream(conn, now):
            self.closes_after_stream = True

    def stale(self, conn: Any) -> None:
        """`conn`, kept, ended before any byte of its answer: the server had closed it."""
        self._seen_closed(conn, time.monotonic())
        self.resent += 1
        conn.close()

    def put(self, conn: Any, streamed: bool) -> None:
        """`conn`'s answer was read to its end: keep it for the next request when the server
        allows (HTTP/1.1 keep-alive, nothing after the body, not past its `max`, not a stream
        of a server that closes after streams), else close it."""
        parser = conn.parser
        conn.uses += 1
        timeout, most = keep_alive_terms(parser.headers)
        if most is not None:
            conn.most = min(conn.most, conn.uses - 1 + most)
        conn.after_stream = streamed
        conn.idle_since = time.monotonic()
        if parser.done and parser.keep_alive and (conn.eof or conn.error):
            self._seen_closed(conn, conn.idle_since)  # it said keep-alive, and closed
        keep = (
            parser.done
            and parser.keep_alive
            and not parser.surplus
            and conn.error is None
            and not conn.eof
            and conn.uses < conn.most
            and not (streamed and self.closes_after_stream)
            and not self._closed
        )
        if not keep:
            conn.close()
            return
        idle = IDLE_S if timeout is None else min(IDLE_S, timeout - MARGIN_S)
        conn.renew()
        if not conn.alive():  # closed as the answer ended
            self._seen_closed(conn, conn.idle_since)
            conn.close()
            return
        conn.idle_until = conn.idle_since + idle
        with self._cond:
            if self._closed:
                keep = False
            else:
                self._idle.append(conn)
        if not keep:
            conn.close()
            return
        self._timed(conn, idle)
        self._notify()

    def _timed(self, conn: Any, seconds: float) -> None:
        """Close `conn` if it is still idle after `seconds` (the sync client's are closed by
        the next request or the client's close: no thread of its own watches them)."""

    def _untimed(self, conn: Any) -> None:
        """`conn` is closed: its close when idle is called off."""

    def close(self) -> None:
        """Close every kept connection; keep none from now on (the client is closed)."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class AsyncPool(Pool):
    """The asyncio client's pool: the same, but a request beyond `max_connections` awaits a
    future of its own, woken when a connection comes free (from any thread, any loop), and an
    idle connection is closed by its loop's timer when its idle bound ends."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    async def acquire(self, until: float, fresh: bool = False, holding: bool = False) -> Any:
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        while True:
            with self._cond:
                conn, may_open, dead = self._take(loop, fresh, holding)
                if not (conn is not None or may_open or dead):
                    waiter = loop.create_future()
                    self._waiters.append((loop, waiter))
            for stale in dead:
                stale.close()
            if conn is not None or may_open:
                return conn
            if dead:
                continue
            try:
                async with asyncio.timeout_at(loop.time() + (until - time.monotonic())):
                    await waiter
            except TimeoutError:
                raise _pool_timeout(self.limit, time.monotonic() - start) from None
            finally:
                with self._cond:
                    if (loop, waiter) in self._waiters:
                        self._waiters.remove((loop, waiter))

    # One timer per connection, armed when it is kept and none is armed, re-armed only when it
    # fires: a connection taken and kept again before then (a request every few ms) costs its
    # loop no timer at all, where one per keep (and its cancel) grew the loop's heap of
    # cancelled timers. Idle past `idle_until` it is never handed out, fired or not (`_take`).
    def _timed(self, conn: Any, seconds: float) -> None:
        if getattr(conn, "expiry", None) is None:
            conn.expiry = conn.loop.call_later(max(0.0, seconds), self._expire, conn)

    def _untimed(self, conn: Any) -> None:
        expiry = getattr(conn, "expiry", None)
        if expiry is not None:
            conn.expiry = None
            expiry.cancel()

    def _expire(self, conn: Any) -> None:
        conn.expiry = None
        with self._cond:
            if conn not in self._idle:
                return  # busy (its next keep arms a timer), or closed
            left = conn.idle_until - time.monotonic()
            if left > 0:  # taken and kept again since this timer was armed
                conn.expiry = conn.loop.call_later(left, self._expire, conn)
                return
            self._idle.remove(conn)
        conn.close()

    def _notify(self) -> None:
        if not self._waiters:  # as Pool's: a waiter added later saw the change first
            return
        with self._cond:
            waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:  # each looks again; those that find none wait again
            _wake(loop, waiter)


def _wake(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None]) -> None:
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        if not waiter.done():
            waiter.set_result(None)
        return
    try:
        loop.call_soon_threadsafe(_settle, waiter)
    except RuntimeError:  # its loop is closed: nobody waits on it any more
        pass


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


# --- what the connections call ---------------------------------------------------------------


def renew(conn: Any) -> None:
    """`conn` (either driver's), kept: ready for its next answer."""
    conn.parser.reset()  # its buffer reused: no new 64 KiB per answer
    conn.early = []
    conn.sink = None
    conn.received = 0
    conn.stalled = False
    conn.clock = conn.waker = conn.deliver = None
    conn.reused = True


def give_back(conn: Any, streamed: bool) -> None:
    """`conn`'s answer was read to its end: its pool (its server's) keeps it or closes it."""
    pool = conn.pool
    if pool is None:  # closed meanwhile
        conn.close()
    else:
        pool.put(conn, streamed)


def leave_pool(conn: Any) -> None:
    """A connection being closed is no longer counted by its pool (once)."""
    pool = conn.pool
    if pool is not None:
        conn.pool = None
        pool.gone(conn)


def shut(transport: Any) -> None:
    """Shut an asyncio transport's socket whose event loop has ended (nothing else can be done
    with it): the server sees the close; the garbage collector closes the transport."""
    sock = None if transport is None else transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # the server sees the close at once
        except OSError:
            pass
