# Strategy: the I/O the clients' core asks for, and nothing else. A connection is a Receiver (the
# arrival path: the response parser's buffer, the body's views straight to the Sink, no copy in
# between) plus the few calls that move bytes: open, send, receive (wait for the next arrival or a
# deadline), pump (the stream's read), close. The sync connection reads with recv_into into the
# parser's buffer and hands the count to the same `buffer_updated` that asyncio calls on the async
# one, so both clients turn bytes into events by one path, and the core reads what came (`parser`,
# `early`, `received`, `eof`, `error`, `stalled`) from the connection alike. The asyncio glue is
# all here: the Receiver only calls what the asyncio connection hands it (a future's set_result as
# its one-shot waker, the loop's clock while a stream is watched, the transport's abort on a
# fault, a pause on a backlog). Each twin of the Receiver gets its own pair of connection classes
# (`Engine`), so `llamafast.pure`'s clients run on the pure twins only.
"""Sync and asyncio connections for the clients, over either twin's Receiver and Sink."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import select
import socket
import ssl
import struct
import sys
import time
from collections.abc import Iterator
from typing import Any, cast

from .._engine import _twins
from .._errors import HandshakeClosed, HandshakeTimeout
from .._url import Target
from . import _tls
from ._pool import leave_pool, renew, shut

__all__ = ["PURE", "SELECTED", "Engine", "client_ssl_context", "ssl_context"]

_SSL: ssl.SSLContext | None = None


def ssl_context() -> ssl.SSLContext:
    global _SSL
    if _SSL is None:
        _SSL = ssl.create_default_context()
    return _SSL


def client_ssl_context(ca_file: str | None, given: object) -> ssl.SSLContext | None:
    """A client's TLS context: the one it was given, else one trusting `ca_file`'s CAs (read
    now, so a bad file fails when the client is made), else None (the system's, shared)."""
    if given is not None:
        if not isinstance(given, ssl.SSLContext):
            raise TypeError(f"ssl_context must be an ssl.SSLContext, not {type(given).__name__}")
        if ca_file is not None:
            raise ValueError(
                f"both ssl_context and infer.ca_file ({ca_file!r}) are given: the context "
                "decides what is trusted, so give only one"
            )
        return given
    if ca_file is None:
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError as err:  # an SSLError is an OSError too: this one is the file's content
        raise ValueError(
            f"infer.ca_file {ca_file!r} holds no CA certificate in PEM form ({err.reason})"
        ) from None
    except OSError as err:
        why = f"infer.ca_file {ca_file!r} cannot be read: {err.strerror}"
        raise type(err)(err.errno, why) from None


def _no_delay(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, AttributeError):
            pass


def _handshake_timeout() -> HandshakeTimeout:
    # A port that does not speak TLS says nothing to a ClientHello (docs/client.md, rule ONCE).
    return HandshakeTimeout("the TLS handshake did not finish within connect_timeout")


def _handshake_closed() -> HandshakeClosed:
    # A plain-HTTP port closes the connection once its wait for a request head ends.
    return HandshakeClosed("the server closed the connection inside the TLS handshake")


@contextlib.contextmanager
def _handshake_errors() -> Iterator[None]:
    """A handshake's failures in both clients' words: past its bound, or the connection closed
    inside it (a plain-HTTP port whose wait for a request head ended)."""
    try:
        yield
    except TimeoutError as err:
        raise _handshake_timeout() from err
    except (ssl.SSLEOFError, ConnectionResetError) as err:
        raise _handshake_closed() from err


def _connect_timeout() -> TimeoutError:
    # One message from both drivers (the socket module says "timed out", asyncio nothing).
    return TimeoutError("the connection did not open within connect_timeout")


# --- the sync connection ---------------------------------------------------------------------


class _SyncIO:
    """One request at a time on a blocking socket (kept alive between them: _pool.py); every
    byte read goes to `buffer_updated`."""

    sock: socket.socket
    parser: Any  # the Receiver's
    eof: bool
    stalled: bool
    error: BaseException | None
    early: list[bytes]
    sink: Any
    get_buffer: Any
    buffer_updated: Any
    Parser: Any  # the twin's ResponseParser (Engine.of)
    pool: Any = None  # the Pool that counts it, until it is closed
    reused = False  # it carried an earlier answer (kept alive)
    after_stream = False  # that answer was an event stream
    idle_since = 0.0  # when it was kept
    poller: Any = None  # `alive`'s, once asked
    rcv_timeout: float | None = None  # the SO_RCVTIMEO its socket has, once set

    @classmethod
    def open(cls, target: Target, until: float, tls: ssl.SSLContext | None = None) -> Any:
        """Connect to `target` (over TLS for https, with `tls` or the system's context)."""
        conn: Any = cast(Any, cls)(cls.Parser())
        conn.eof = conn.stalled = False
        left = max(0.001, until - time.monotonic())
        try:
            sock = socket.create_connection((target.host, target.port), left)
        except TimeoutError as err:
            raise _connect_timeout() from err
        try:
            _no_delay(sock)
            if target.scheme == "https":
                sock.settimeout(max(0.001, until - time.monotonic()))
                with _handshake_errors():
                    sock = (tls or ssl_context()).wrap_socket(sock, server_hostname=target.host)
        except BaseException:
            sock.close()
            raise
        conn.sock = sock
        return conn

    def send(self, data: bytes, until: float) -> None:
        sock = self.sock
        if sock.gettimeout() is None and not isinstance(sock, ssl.SSLSocket):
            # A kept plain socket is left blocking (its reads bounded by the kernel:
            # `start_stream`); a request that fits in its send buffer goes in one call that
            # cannot block, with no timeout to set and no poll before it (two system calls
            # fewer, and the one after the answer to set blocking again).
            try:
                sent = sock.send(data, socket.MSG_DONTWAIT)
            except BlockingIOError:
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        sock.settimeout(max(0.001, until - time.monotonic()))
        sock.sendall(data)

    def receive(self, until: float) -> None:
        """Read once: the bytes go to the parser; or the end, the failure, or `until`. A whole
        body's rest (WHOLE-BODY): one read the kernel waits out, else read on while it comes."""
        if self.eof or self.error is not None:
            return
        if self.parser.body_left and _WAIT_ALL and not isinstance(self.sock, ssl.SSLSocket):
            left = until - time.monotonic()  # the kernel waits for all of it, until `until`
            if left > 0:  # (none by then: `stalled`, which only a stream reads)
                _kernel_timeout(self.sock, left)
                self.rcv_timeout = left
                self._read(socket.MSG_WAITALL)
            return
        if self._ready(until - time.monotonic()):
            self._read()
            while self.parser.body_left and self._ready(0.0):
                self._read()

    def _ready(self, wait: float) -> bool:
        """Bytes to read within `wait` seconds (TLS: some already decrypted)."""
        if self.eof or self.error is not None:
            return False
        sock = self.sock
        pending = getattr(sock, "pending", None)  # TLS: bytes already decrypted
        if pending and pending():
            return True
        try:
            return wait >= 0 and bool(select.select([sock], [], [], wait)[0])
        except (OSError, ValueError) as err:  # closed from another thread
            self.error = err if isinstance(err, OSError) else ConnectionResetError(str(err))
            return False

    def start_stream(self, sink: Any, stall: float) -> None:
        """From now on the body becomes events in `sink`; each read of the stream waits at
        most `stall` seconds. On a plain socket the kernel keeps that bound (SO_RCVTIMEO: a
        late read fails with EAGAIN), which spares Python's poll before every read."""
        early, self.early = self.early, []
        self.sink = sink
        if early:
            sink.feed(early)
        sock = self.sock
        if isinstance(sock, ssl.SSLSocket) or not _WAIT_ALL:
            sock.settimeout(stall)
            return
        if self.rcv_timeout != stall:  # the socket keeps it: set once per connection and bound
            _kernel_timeout(sock, stall)
            self.rcv_timeout = stall
        if sock.gettimeout() is not None:  # (a system call: not when it is blocking already)
            sock.settimeout(None)

    def pump(self) -> None:
        """The stream's next read (the bytes go to the Sink), its end, or a stall."""
        self._read()

    def _read(self, flags: int = 0) -> None:
        try:
            n = self.sock.recv_into(self.get_buffer(-1), 0, flags)
        except (TimeoutError, BlockingIOError):
            self.stalled = True
            return
        except OSError as err:
            self.error = err
            return
        if n:
            self.buffer_updated(n)
        else:
            self.eof = True

    def renew(self) -> None:
        """Ready to carry the next request (kept alive): the parser reset, nothing of the last
        answer kept."""
        renew(self)

    def alive(self) -> bool:
        """Kept and idle, still open: nothing came on it, not even its close (the kernel is
        asked without blocking: a readable socket was closed, or holds bytes nobody asked
        for)."""
        if self.eof or self.error is not None:
            return False
        sock = self.sock
        pending = getattr(sock, "pending", None)  # TLS: bytes already decrypted
        if pending is not None and pending():
            return False
        try:
            poller = self.poller  # one per connection, registered once
            if poller is None:
                poller = self.poller = select.poll()
                poller.register(sock, select.POLLIN)
            return not poller.poll(0)
        except AttributeError:  # no poll (Windows)
            return not select.select([sock], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        leave_pool(self)
        sock = getattr(self, "sock", None)
        if sock is None:
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)  # the server sees the close at once
        except OSError:
            pass
        sock.close()


# Where a plain socket's blocking reads are bounded by the kernel (SO_RCVTIMEO), which can wait for
# a whole buffer (MSG_WAITALL): the stream's reads and a whole body's then skip Python's poll.
_WAIT_ALL = sys.platform.startswith(("linux", "darwin")) and hasattr(socket, "MSG_WAITALL")


def _kernel_timeout(sock: socket.socket, seconds: float) -> None:
    """Reads of `sock` block, each at most `seconds` (SO_RCVTIMEO: a late one fails with
    EAGAIN, or returns what came)."""
    whole = int(seconds)
    micros = min(999_999, round((seconds - whole) * 1e6)) or (0 if whole else 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", whole, micros))
    sock.settimeout(None)


# --- the asyncio connection ------------------------------------------------------------------


async def _open_tls(conn: Any, target: Target, until: float, tls: ssl.SSLContext) -> None:
    """Connect, then hand-shake, each within what is left of `until` (as the sync client), and
    attach `conn` to the TLS transport (_tls.py: cheaper per request than asyncio's)."""
    try:
        async with asyncio.timeout(max(0.001, until - time.monotonic())):
            sock = await _tls.connect(target.host, target.port)
    except TimeoutError as err:
        raise _connect_timeout() from err
    try:
        _no_delay(sock)
        wrapped = tls.wrap_socket(sock, server_hostname=target.host, do_handshake_on_connect=False)
    except BaseException:
        sock.close()
        raise
    try:
        # The handshake has its own bound, so that one that never finishes (TLS spoken to a
        # port that does not speak it) is told from a connection that never opens.
        with _handshake_errors():
            async with asyncio.timeout(max(0.001, until - time.monotonic())):
                await _tls.handshake(wrapped)
    except BaseException:
        wrapped.close()
        raise
    _tls.TlsTransport(asyncio.get_running_loop(), wrapped, conn)


class _AsyncIO:
    """One request at a time on a connection (kept alive between them: _pool.py), as an
    asyncio BufferedProtocol that reads into the parser's buffer (the arrival path is the
    Receiver's): before a Sink is attached the body's bytes are kept (`early`); after, they
    are decoded at once, and the task waiting in `pump()` is woken once per arrival (the
    Receiver calls the waker set here). A stream's stall
    watchdog is one deadline, checked by one timer re-armed only when it fires; a parse fault
    aborts the transport, and reading pauses while the Sink holds a backlog (the Receiver calls
    `on_fault` and `on_backlog`, set in `connection_made`)."""

    loop: asyncio.AbstractEventLoop
    transport: Any
    paused: bool
    error: BaseException | None
    eof: bool
    stalled: bool
    last: float
    received: int
    early: list[bytes]
    sink: Any
    clock: Any
    waker: Any
    on_fault: Any
    on_backlog: Any
    wake: Any  # the Receiver's: call the waker once
    _stall: float
    _timer: asyncio.TimerHandle | None
    _wait_timer: asyncio.TimerHandle | None = None  # `receive`'s, while armed
    _due: float | None = None  # the loop time by which the pending `receive` returns
    Parser: Any  # the twin's ResponseParser (Engine.of)
    pool: Any = None  # the AsyncPool that counts it, until it is closed
    reused = False  # it carried an earlier answer (kept alive)
    after_stream = False  # that answer was an event stream
    idle_since = 0.0  # when it was kept

    @classmethod
    async def open(cls, target: Target, until: float, tls: ssl.SSLContext | None = None) -> Any:
        """Connect to `target` (over TLS for https, with `tls` or the system's context)."""
        loop = asyncio.get_running_loop()
        conn: Any = cast(Any, cls)(cls.Parser())
        conn.loop = loop
        conn.transport = None
        conn.eof = conn.stalled = conn.paused = False
        conn._stall = 0.0
        conn._timer = None
        if target.scheme == "https":
            await _open_tls(conn, target, until, tls or ssl_context())
            return conn
        try:
            async with asyncio.timeout(max(0.001, until - time.monotonic())):
                await loop.create_connection(lambda: conn, target.host, target.port)
        except TimeoutError as err:
            raise _connect_timeout() from err
        return conn

    # --- the protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.on_fault = transport.abort  # type: ignore[attr-defined]
        self.on_backlog = self._pause
        _no_delay(transport.get_extra_info("socket"))

    def eof_received(self) -> bool:
        self.eof = True
        self.wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        if exc is not None and self.error is None:
            self.error = exc
        self._cancel_timer()
        # Nothing arrives after this: let go of the hooks, so that the connection (its
        # parser's buffer) is freed by reference counting when its request lets go of it,
        # not by the cycle collector (`on_backlog` is this connection's own method).
        self.on_fault = self.on_backlog = None
        self.wake()

    def _pause(self) -> None:
        # Reading pauses while the Sink holds more than BACKLOG bytes for the consumer; `pump`
        # reads again once the consumer has taken them.
        self.paused = True
        self.transport.pause_reading()

    # --- what the driver calls ---------------------------------------------------------------

    def send(self, data: bytes, until: float) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the connection was closed")
        self.transport.write(data)

    async def receive(self, until: float) -> None:
        """Until the next arrival, the end, a failure, or the clock reading `until`. One
        timer per connection serves every wait by a deadline (the first byte's, a head's, a
        whole body's): one armed to fire no later than this wait's is left to fire, and
        re-armed from the wait then pending (`_wait_over`), so a wait that ends by an arrival
        touches no timer (a timer armed and cancelled per wait grew the loop's heap)."""
        if self.eof or self.error is not None:
            return
        loop = self.loop
        waiter = loop.create_future()
        self.waker = waiter.set_result
        self._due = due = loop.time() + (until - time.monotonic())
        timer = self._wait_timer
        if timer is None or timer.when() > due:
            if timer is not None:
                timer.cancel()
            self._wait_timer = loop.call_at(due, self._wait_over)
        try:
            await waiter
        finally:
            self._due = None

    def _wait_over(self) -> None:
        # The wait pending now (if any) is woken when its deadline has come, else the timer
        # is armed again for it; with no wait pending it lapses.
        self._wait_timer = None
        due = self._due
        if due is None:
            return
        if self.loop.time() >= due:
            self.wake()
        else:
            self._wait_timer = self.loop.call_at(due, self._wait_over)

    def start_stream(self, sink: Any, stall: float) -> None:
        """From now on the body becomes events; the stall watchdog starts."""
        self.sink = sink
        early, self.early = self.early, []
        if early:
            sink.feed(early)
        self._stall = stall
        loop = self.loop
        self.last = now = loop.time()
        self.clock = loop.time
        # The last stream's timer, still armed on a kept connection, serves when it fires by
        # this stream's deadline (it re-arms from the newest arrival): not one per request.
        timer = self._timer
        if timer is None or timer.when() > now + stall:
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(now + stall, self._check_stall)

    def resume(self) -> None:
        """Read again: the consumer has caught up with a backlog."""
        self.paused = False
        if self.transport is not None:
            self.transport.resume_reading()

    async def pump(self) -> None:
        """Until the next arrival, the end, a failure or a stall."""
        if self.paused:
            self.resume()
        waiter = self.loop.create_future()
        self.waker = waiter.set_result
        await waiter

    def _check_stall(self) -> None:
        # One timer per stream: it fires at the last arrival + stall; if bytes came meanwhile
        # it is set again from the newest arrival, so arrivals themselves never touch a timer.
        # Between streams (kept, idle: no clock) it lapses.
        if self.clock is None:
            self._timer = None
            return
        now = self.loop.time()
        due = self.last + self._stall
        if now >= due:
            self._timer = None
            self.stalled = True
            self.wake()
        else:
            self._timer = self.loop.call_at(due, self._check_stall)

    def _cancel_timer(self) -> None:
        self.clock = None
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        timer, self._wait_timer = self._wait_timer, None
        if timer is not None:
            timer.cancel()

    def renew(self) -> None:
        """Ready to carry the next request (kept alive): the parser reset, nothing of the last
        answer kept, no stall watch (its timer, if armed, lapses or serves the next stream),
        reading on (so a close while idle is seen)."""
        self._stall = 0.0
        renew(self)
        if self.paused:
            self.resume()

    def alive(self) -> bool:
        """Kept and idle, still open: the event loop has seen no byte and no close on it."""
        transport = self.transport
        return (
            not self.eof
            and self.error is None
            and not self.received
            and transport is not None
            and not transport.is_closing()
        )

    def close(self) -> None:
        leave_pool(self)
        if self.loop.is_closed():  # kept past its loop (asyncio.run returned): only its
            shut(self.transport)  # socket is left, shut (the GC closes the transport)
            return
        self._cancel_timer()
        transport = self.transport
        if transport is not None:
            transport.abort()  # at once: the server sees the close and frees the slot


# --- the engines: each twin's Sink and connections ---------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Engine:
    """What a client runs on, built from one twin (`Engine.of`): its Sink (the body's bytes to
    events), its Vectors, its ResponseParser, and the sync and asyncio connection classes over
    its Receiver, so `llamafast.pure`'s clients run on the pure twin only."""

    IMPLEMENTATION: str
    Sink: Any
    Vectors: Any
    ResponseParser: Any
    SyncConnection: Any
    AsyncConnection: Any

    @classmethod
    def of(cls, twin: _twins.Twin) -> Engine:
        """The twin's engine: its connection classes are its Receiver with this module's I/O."""
        name, receiver, parser = twin.IMPLEMENTATION, twin.Receiver, twin.ResponseParser

        class SyncConnection(_SyncIO, receiver):  # type: ignore[valid-type,misc]
            Parser = parser

        class AsyncConnection(_AsyncIO, receiver, asyncio.BufferedProtocol):  # type: ignore[valid-type,misc]
            Parser = parser

        for conn in (SyncConnection, AsyncConnection):
            conn.__qualname__ = f"{conn.__name__}[{name}]"
        return cls(name, twin.Sink, twin.Vectors, parser, SyncConnection, AsyncConnection)


PURE = Engine.of(_twins.PURE)
SELECTED = PURE if _twins.SELECTED is _twins.PURE else Engine.of(_twins.SELECTED)
ResponseParser = SELECTED.ResponseParser  # for the benchmarks' bare-transport rows
