# The async client's TLS transport: a non-blocking ssl.SSLSocket read and written from the event
# loop's reader and writer callbacks, standing in for asyncio's own TLS transport (sslproto),
# whose layers of Python (a buffer of ciphertext, a loop of reads into the protocol's buffer, a
# queue of writes) cost ~6 µs of CPU more per short request than this (bench/request/tls_layers.py
# measures both). Only what `_AsyncIO` asks of a transport is here: write, abort, pause and resume
# reading, is_closing, get_extra_info("socket"); the protocol is called as asyncio calls a
# BufferedProtocol (connection_made, get_buffer, buffer_updated, eof_received, connection_lost),
# so a stream's bytes, ends and faults reach the Receiver exactly as over asyncio's transport.
"""An asyncio transport over a non-blocking SSLSocket, for the async client's https."""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

__all__ = ["TlsTransport", "connect", "handshake"]

# A record carries at most 16 KiB of plaintext: a read that filled one whole may have more
# records behind it (a whole body arriving), read on at once; a shorter one was the last the
# peer flushed, and the loop's reader fires again if more came meanwhile. One callback reads
# at most _TURN bytes (asyncio's own transports read 256 KiB a turn), so that a fast peer
# never keeps the loop from running the task that takes them.
_RECORD = 16384
_TURN = 1 << 18


class TlsTransport(asyncio.Transport):
    """One TLS connection (handshake done) driven by the loop's reader and writer callbacks."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: ssl.SSLSocket, protocol: Any):
        super().__init__()
        self._loop = loop
        self._sock: ssl.SSLSocket | None = sock
        self._protocol = protocol
        self._fd = sock.fileno()
        self._closing = False
        self._reading = False
        self._pending = b""  # a write that would have blocked, retried whole (OpenSSL's rule)
        protocol.connection_made(self)
        self.resume_reading()

    # --- asyncio.Transport -------------------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._sock if name == "socket" else default

    def is_closing(self) -> bool:
        return self._closing

    def is_reading(self) -> bool:
        return self._reading

    def pause_reading(self) -> None:
        if self._reading and not self._closing:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._reading = True
            self._loop.add_reader(self._fd, self._on_readable)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        if self._pending:
            self._pending += bytes(data)
            return
        self._pending = bytes(data)
        self._flush()

    def abort(self) -> None:
        self._close(None)

    def close(self) -> None:
        self._close(None)

    # --- the callbacks -----------------------------------------------------------------------

    def _on_readable(self) -> None:
        sock, protocol = self._sock, self._protocol
        if sock is None:
            return
        if self._pending:  # a write that waited for the peer (a key update, a renegotiation)
            self._flush()
        budget = _TURN
        while self._reading and budget > 0:
            buffer = protocol.get_buffer(-1)
            try:
                n = sock.recv_into(buffer)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return
            except Exception as err:  # a reset, a TLS alert, a bad record
                self._close(err)
                return
            if not n:  # the peer closed (close_notify, or the TCP close: ragged, as asyncio)
                self._eof()
                return
            protocol.buffer_updated(n)
            budget -= n
            if self._sock is None or (n < _RECORD and not sock.pending()):
                return

    def _flush(self) -> None:
        sock = self._sock
        if sock is None:
            return
        while self._pending:
            try:
                sent = sock.send(self._pending)  # all of it (Python's SSL_write is not partial)
            except (ssl.SSLWantWriteError, BlockingIOError):
                self._loop.add_writer(self._fd, self._on_writable)
                return
            except ssl.SSLWantReadError:  # retried when the peer's bytes come (`_on_readable`)
                return
            except Exception as err:
                self._close(err)
                return
            self._pending = self._pending[sent:]

    def _on_writable(self) -> None:
        self._loop.remove_writer(self._fd)
        self._flush()

    def _eof(self) -> None:
        if not self._protocol.eof_received():  # asyncio's rule: a falsy answer closes it
            self._close(None)

    def _close(self, error: BaseException | None) -> None:
        sock = self._sock
        if sock is None:
            return
        self._sock = None
        self._closing = True
        self._reading = False
        self._pending = b""
        loop = self._loop
        if not loop.is_closed():
            loop.remove_reader(self._fd)
            loop.remove_writer(self._fd)
        sock.close()  # at once, as asyncio's abort: no close_notify
        # As asyncio does: the protocol hears of the loss on the next turn of the loop.
        if not loop.is_closed():
            loop.call_soon(self._protocol.connection_lost, error)


async def connect(host: str, port: int) -> socket.socket:
    """A non-blocking TCP connection to `host`:`port`, each address in turn as
    `loop.create_connection` tries them (and its error when all fail)."""
    loop = asyncio.get_running_loop()
    try:  # an address needs no lookup (asyncio's create_connection skips it too)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:  # a name: looked up off the loop
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    errors: list[OSError] = []
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
            return sock
        except OSError as err:
            sock.close()
            errors.append(err)
        except BaseException:
            sock.close()
            raise
    # What loop.create_connection raises when every address failed.
    if not errors:
        raise OSError(f"getaddrinfo({host!r}) returned no address")
    if len(errors) == 1 or all(str(err) == str(errors[0]) for err in errors):
        raise errors[0]
    raise OSError(f"Multiple exceptions: {', '.join(str(err) for err in errors)}")


async def handshake(sock: ssl.SSLSocket) -> None:
    """Carry out `sock`'s TLS handshake (made with do_handshake_on_connect=False)."""
    loop = asyncio.get_running_loop()
    fd = sock.fileno()
    while True:
        try:
            sock.do_handshake()
            return
        except ssl.SSLWantReadError:
            wait, add, remove = loop.create_future(), loop.add_reader, loop.remove_reader
        except ssl.SSLWantWriteError:
            wait, add, remove = loop.create_future(), loop.add_writer, loop.remove_writer
        add(fd, _set, wait)
        try:
            await wait
        finally:
            remove(fd)


def _set(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
