# Strategy: llama-server's resumable streams (docs/client.md, rule RESUME), as the chat exchange's
# base: the POST carries a fresh random `X-Conversation-Id`, so the server tees the answer's event
# stream into a buffer that outlives the connection. A break after the head (a reset, an EOF inside
# the body, a stall) is not the stream's end: `resume` closes the broken connection and asks
# `GET /v1/stream?conv_id=ID&from=N`, N the body bytes read so far (the parsers count them per
# chunk, so no arrival pays for it), and the answer goes on into the same Sink, through the same
# parser, limits and deadlines; the POST is never sent again. With the header a closed connection
# no longer stops the generation, so a stream closed before its end asks `DELETE /v1/stream` (the
# driver sends `stop_request` in the background). What cannot resume ends in the error the break
# raises without resuming, saying why resuming failed.
"""`Resumable`: the resumed stream and the stop on close, for the chat exchange."""

from __future__ import annotations

import os
from typing import Any

from .._errors import InferError, ProtocolError, Resume, StalledError, server_message
from ._answers import is_break, resume_failure
from ._commands import Close, Phase, Release
from ._exchange import Exchange, answered
from ._session import CHAT_PATH

__all__ = ["STREAM_PATH", "Resumable", "Resume"]

STREAM_PATH = "/v1/stream"
CONVERSATION_HEADER = "X-Conversation-Id"
# llama-server's 404 for a stream it no longer has; any other 404 means no resumable streams.
EXPIRED = "Stream not found or expired"


class Resumable(Exchange):
    """The resume and stop rules of one chat request; the chat exchange extends it. `conv_id`:
    the request's id (None with `resume` off, or on a server known to lack the endpoints);
    `offset`: where the current connection's body starts in the event stream."""

    conn: Any
    sink: Any
    completion: Any
    closed: bool

    def start_resumable(self) -> None:
        core = self.core
        resumable = self.limits.resume and core.resumable is not False
        # Unguessable (another client of the server must not read the stream), and never two
        # requests in flight on one: a random one, or the id of this client's stream that
        # was last read to its end (`spare_conv_ids`).
        self.conv_id: str | None = None
        if resumable:
            try:
                self.conv_id = core.spare_conv_ids.pop()
            except IndexError:
                self.conv_id = os.urandom(16).hex()
        self.offset = 0
        self.resumes = 0
        self.posted = False  # the POST went out: the server may be generating
        self.stopped = False
        self.broken: BaseException | None = None

    def post_request(self, body: bytes) -> bytes:
        """The chat POST, with the conversation id when the stream may be resumed."""
        core = self.core
        self.posted = True
        if self.conv_id is None:
            return core.request("POST", CHAT_PATH, body)
        extra = b"%s: %s\r\n" % (CONVERSATION_HEADER.encode(), self.conv_id.encode())
        return core.request("POST", CHAT_PATH, body, extra)

    def check_break(self, err: BaseException) -> None:
        """`err` broke the stream: Resume when it may be resumed (rule RESUME)."""
        if self.conv_id is not None and is_break(err) and not self.closed:
            self.broken = err
            raise Resume

    def resume(self) -> Phase[None]:
        """Close the broken connection and ask the server for the rest of the event stream
        from the bytes read; `conn` is then the resumed answer, for the driver to attach to
        the Sink. A second break before the resumed answer brought a byte, more than
        `retries` resumes (at least one), a connection that fails, or any answer but a 200
        event stream end in the error the break raises without resuming (`resume_failed`)."""
        conn = self.conn
        read = conn.parser.body_read
        if self.resumes and not read:
            yield Close(conn)
            raise self.resume_failed("the resumed answer broke before bringing a byte")
        if self.resumes >= max(1, self.limits.retries):
            yield Close(conn)
            raise self.resume_failed(f"it was resumed {self.resumes} time(s) already")
        yield Close(conn)
        self.resumes += 1
        self.offset += read
        new = yield from self._ask_stream()
        self.conn = new

    def _ask_stream(self) -> Phase[Any]:
        """GET the event stream from `offset`, once: the connection of its 200 event stream."""
        core = self.core
        limits = self.limits
        clock = core.clock
        stall = limits.stall_timeout
        what = f"GET {core.target.prefix}{STREAM_PATH}"
        query = f"{STREAM_PATH}?conv_id={self.conv_id}&from={self.offset}"
        request = core.request_once("GET", query)
        first_by = clock() + stall
        try:
            conn, began = yield from self.send(
                request,
                clock() + limits.connect_timeout,
                first_by,
                lambda c: self._receive_until(c, answered, first_by, what),
            )
        except (OSError, InferError) as err:
            raise self.resume_failed(f"{what}: {err}") from None
        try:
            if not began:
                raise self.resume_failed(f"{what} was not answered within {stall:g} s")
            bound = (stall, "stall_timeout")
            status = yield from self._read_head(conn, clock() + stall, what, bound)
            kind = conn.parser.headers.get("content-type", "")
            if status == 200 and kind.startswith("text/event-stream"):
                return conn
            body = yield from self._courtesy_body(conn, clock() + stall, what, bound)
        except (OSError, ProtocolError, StalledError) as err:
            yield Close(conn)
            raise self.resume_failed(f"{what}: {err}") from None
        yield Release(conn)
        text = body.decode("utf-8", "replace")
        message = server_message(text) or text[:200]
        if status == 404 and message != EXPIRED:
            core.resumable = False  # no resumable streams here: nothing more is sent
        raise self.resume_failed(f"the server answered {status} to {what}: {message}")

    def resume_failed(self, why: str) -> InferError:
        """The error of today (the break's, as without resuming), saying why resuming failed;
        the reader's error is its `__cause__` (rule STREAM-ERRORS)."""
        err = self.broken
        assert isinstance(err, Exception)
        return resume_failure(err, self.limits, why)

    def read_to_its_end(self) -> None:
        """The stream was read to its end: its id may carry this client's next stream. The
        server keeps a finished stream's buffer for minutes (300 s), and frees it when a new
        stream takes its id: so it holds one per stream in flight, not one per request."""
        spare = self.core.spare_conv_ids
        if self.conv_id is not None and len(spare) < self.core.limits.max_connections:
            spare.append(self.conv_id)

    def stop_request(self) -> bytes | None:
        """The DELETE that stops the generation of a stream closed before its end (once): None
        when there is nothing to stop (no id, never sent, read to its end, stopped)."""
        if self.conv_id is None or not self.posted or self.stopped:
            return None
        if self.completion is not None or self.core.resumable is False:
            return None
        self.stopped = True
        return self.core.request_once("DELETE", f"{STREAM_PATH}?conv_id={self.conv_id}")

    def stop_answered(self, status: int) -> None:
        """What the DELETE's answer tells: anything but 204 means no resumable streams."""
        if status != 204:
            self.core.resumable = False
