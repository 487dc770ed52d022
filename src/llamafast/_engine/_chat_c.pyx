# cython: language_level=3, boundscheck=False, wraparound=False
# cython: embedsignature=True
"""The body's bytes to events, Cython twin (docs/assembler.md, "The whole response in one loop").

`Sink` is the one engine, as in _chat_py.py: the bytes land in the SSE decoder's buffer (`feed`
copies an arrival's pieces there; ChatStream's reader reads straight into it through _sse_c's
BoundReader), and `take` finds the next data lines there and hands each payload to simdjson as a
pointer and a length (`next_line`, then `push_into`, parsing in place thanks to the decoder's
padding): no bytes object and no str is built for a payload, only the events. `ChatStream` and
`AsyncChatStream` adapt it through its C-level methods (_chat_c.pxd), with no Python call per
item. Same behaviour, errors and latching as _chat_py.py.
"""

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE

from ._assemble_c cimport Assembler
from ._sse_c cimport SSE_DONE, SSE_ITEM, SSE_PADDING, BoundReader, SseDecoder

from ._assemble_c import PADDING
from .._errors import CancelledReadError, busy_error, uninitialised_error
from .._limits import MAX_LINE
from ._stream_state import not_over  # the words of every stream's state (StreamView's)

# The pure twin's public names (the stub, _chat_c.pyi, declares them for both).
__all__ = ["AsyncChatStream", "ChatStream", "Sink", "aiter_chat"]


# The decoder guarantees SSE_PADDING readable bytes after each payload; when that covers
# simdjson's SIMDJSON_PADDING, payloads are parsed where they lie (else push_into copies them).
cdef bint _PADDED = SSE_PADDING >= PADDING


cdef class Sink:
    """The body's bytes to ChatEvents, with no I/O (see the pure twin): `feed` copies the
    pieces into the SSE decoder's buffer, which is the queue of lines not taken yet, and `take`
    decodes and assembles the next lines there, so a fault is found, and raised, only once
    everything before it has been taken. One caller at a time; made without `__init__`, `take`
    gives [] until a `feed` latches the "never initialised" error, and `end` raises it."""

    def __cinit__(self):
        # made without __init__: no decoder; feed latches, take raises, never a crash
        self._error = None
        self._feed_error = None
        self.done = False

    def __init__(self, max_line):
        if self._busy:
            raise busy_error(self, "__init__")
        dec = SseDecoder(max_line)
        self._asm = Assembler()
        self._dec = dec
        self.assembler = self._asm
        self._error = None
        self._feed_error = None
        self.done = False

    def feed(self, pieces):
        """Queue the bytes of `pieces` (bytes-like objects), in order."""
        self._feed_all(pieces)

    cdef int _feed_all(self, object pieces) except -1:
        if self._error is not None or self._feed_error is not None or self.done:
            return 0
        if self._busy:  # a finalizer or a thread inside take(): the line it reads must not move
            self._feed_error = busy_error(self, "feed")
            return 0
        if self._dec is None:
            self._feed_error = uninitialised_error(self)
            return 0
        self._busy = True
        try:
            for piece in pieces:
                if self._feed_error is not None:  # a call back in while iterating failed:
                    break  # nothing after it is kept
                self._dec.append(piece)
        except Exception as err:  # MemoryError, or a piece that is not bytes-like
            self._feed_error = err
        finally:
            self._busy = False
        return 0

    @property
    def backlog(self):
        """Bytes fed and not taken yet (the decoder's buffer)."""
        return self._backlog()

    cdef Py_ssize_t _backlog(self) noexcept:
        if self._dec is None or self._error is not None or self.done:
            return 0
        return self._dec.end - self._dec.start

    def take(self):
        """The events of the next item fed so far that gives any; [] when there is none yet.
        Raises a latched error once nothing precedes it."""
        cdef list events = []
        self._take_into(events)
        return events

    cdef int _take_into(self, list out) except -1:
        cdef const char* data
        cdef Py_ssize_t length
        cdef Py_ssize_t n0 = PyList_GET_SIZE(out)
        cdef int code
        if self._busy:
            raise busy_error(self, "take")
        if self._error is not None:
            raise self._error
        if self.done:
            return 0
        if self._dec is None:  # never initialised: nothing until a feed latched that error
            if self._feed_error is not None:
                self._error = self._feed_error
                raise self._error
            return 0
        self._busy = True
        try:
            while True:
                code = self._dec.next_line(&data, &length)
                if code == SSE_ITEM:
                    self._asm.push_into(data, length, None, _PADDED, out)
                    if PyList_GET_SIZE(out) > n0:
                        return 1
                elif code == SSE_DONE:  # nothing after it is read, not even a fault
                    self.done = True
                    return 0
                elif self._feed_error is not None:  # after all the bytes fed before it
                    raise self._feed_error
                else:
                    return 0
        except Exception as err:
            # A payload is all or nothing: the events of one that failed are never handed out.
            del out[n0:]
            self._error = err
            raise
        finally:
            self._busy = False

    def end(self):
        """The body ended (cleanly, or with DONE): the Completion, or the error that says why
        there is none (a line cut: TruncatedError; no finish reason: StreamClosedEarlyError)."""
        return self._end()

    cdef object _end(self):
        cdef list scratch = []
        if self._busy:
            raise busy_error(self, "end")
        while self._take_into(scratch):  # lines fed and never taken still count
            del scratch[:]
        if self._dec is None:
            raise uninitialised_error(self)
        if not self.done:
            self._busy = True
            try:
                self._dec.finish()
            finally:
                self._busy = False
        return self._asm.finish()


cdef class _State:
    """What the sync and async streams share (as _chat_py._State): the Sink, the current item's
    events not handed out yet, and the outcome; what it shows mirrors _stream_state.StreamView
    over C fields. The Sink is the stream's own, used under the
    stream's guard."""

    cdef Sink _sink              # None until __init__ runs
    cdef list _pending           # events; those before _pos have been handed out
    cdef Py_ssize_t _pos
    cdef object _completion
    cdef object _error           # the latched error
    cdef bint _ended             # iteration is over: it ended cleanly, or the stream was closed
    cdef bint _closed
    cdef bint _eof               # the reader / source has no more bytes
    cdef bint _busy              # a call is running: a second one (a thread, the reader, a
                                 # finalizer, another task) is refused and the first goes on

    def __cinit__(self, *args, **kwargs):
        # Every field has a safe value before __init__ runs: an object made without it
        # (X.__new__(X), a subclass that skips super().__init__) raises on use (_sink is None).
        self._pending = []
        self._pos = 0

    cdef int _reset(self, Sink sink) except -1:
        """The state of a new stream (for __init__, called again too, as the pure twin's)."""
        self._sink = sink
        self._pending = []
        self._pos = 0
        self._completion = None
        self._error = None
        self._ended = self._closed = self._eof = False
        return 0

    cdef inline int _ready(self) except -1:
        """RuntimeError for a stream whose __init__ never ran (as the pure twin's, for every
        property and method)."""
        if self._sink is None:
            raise uninitialised_error(self)
        return 0

    cdef int _latch(self, object err) except -1:
        """Latch `err`. A chunk is all or nothing: the events already built from the chunk
        that failed (past _pos) are dropped, never handed out after its error."""
        del self._pending[self._pos:]
        self._error = err
        return 0

    @property
    def completion(self):
        """The Completion once iteration has ended cleanly.

        docs/assembler.md, rule STREAM-COMPLETION.
        """
        self._ready()
        if self._completion is not None:
            return self._completion
        if self._error is not None:
            raise self._error
        raise not_over(self._closed)

    @property
    def id(self):
        self._ready()
        return self._sink._asm._id

    @property
    def reasoning_tokens(self):
        self._ready()
        return self._sink._asm._reasoning_tokens

    @property
    def in_reasoning(self):
        self._ready()
        return self._sink._asm._in_reasoning

    @property
    def is_finished(self):
        self._ready()
        return self._sink._asm._finish_reason is not None

    def partial_arguments(self, index):
        """The assembler's partial_arguments: tool call `index`'s arguments parsed so far."""
        self._ready()
        return self._sink._asm.partial_arguments(index)

    cdef inline int _next_event(self, Sink sink, list pending) except -1:
        """1 with the next event at pending[_pos - 1]; 0 when more bytes are needed, or the
        stream is over (then `_ended` is set). Errors propagate (the caller latches them)."""
        # Every event in `pending` has been handed out (_pos == len): rather than empty the
        # list per item, let it grow a little and empty it now and then.
        if self._pos >= 16:
            del pending[:]
            self._pos = 0
        if sink._take_into(pending):
            self._pos += 1
            return 1
        # DONE ends the iteration (nothing after it is read); so does a clean end of the body,
        # and then end() decides: TruncatedError for a cut line, StreamClosedEarlyError without
        # a finish reason (docs/assembler.md, rules STREAM-DONE and FINISH).
        if sink.done or self._eof:
            self._completion = sink._end()
            self._ended = True
        return 0

    cdef int _mark_closed(self) except -1:
        """Stop the iteration; 1 if this is the first close."""
        self._ready()
        cdef bint first = not self._closed
        self._closed = self._ended = True
        self._pending = []
        self._pos = 0
        return first


cdef class ChatStream(_State):
    """The ChatEvents of a blocking reader's response, in order; then `.completion`."""

    cdef object _reader
    cdef BoundReader _src        # reads into the Sink's decoder buffer

    def __init__(self, reader, max_line=MAX_LINE):
        if self._busy:
            raise busy_error(self, "__init__")
        self._busy = True  # getattr(reader, ...) may run the reader's code
        try:
            sink = Sink(max_line)
            src = BoundReader(reader, (<Sink>sink)._dec)
            self._reset(sink)
            self._reader = reader
            self._src = src
        finally:
            self._busy = False

    def __iter__(self):
        return self

    def __next__(self):
        cdef list pending = self._pending
        if self._busy:
            raise busy_error(self, "__next__")
        if self._pos < PyList_GET_SIZE(pending):
            self._pos += 1
            return <object>PyList_GET_ITEM(pending, self._pos - 1)
        if self._error is not None:
            raise self._error  # errors are latched (docs/assembler.md, rule STREAM-LATCH)
        if self._ended:
            raise StopIteration
        if self._src is None:
            raise uninitialised_error(self)
        self._busy = True
        try:
            while True:
                if self._next_event(self._sink, pending):
                    return <object>PyList_GET_ITEM(pending, self._pos - 1)
                if self._ended:
                    raise StopIteration
                self._src.fill()  # one read into the Sink's decoder buffer
                self._eof = self._src.eof
        except StopIteration:
            raise
        except Exception as err:
            self._latch(err)
            raise
        finally:
            self._busy = False

    def close(self):
        """Close the reader (if it has close()); iteration stops."""
        if self._mark_closed():
            close = getattr(self._reader, "close", None)
            if callable(close):
                close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()


cdef class AsyncChatStream(_State):
    """The same over an async byte source (httpx `aiter_bytes`, aiohttp `iter_any`)."""

    cdef object _source
    cdef object _chunks  # the source's async iterator, from the first __anext__ on
    cdef bint _interrupted  # a read was cancelled and nothing arrived since

    def __init__(self, source, max_line=MAX_LINE):
        if self._busy:
            raise busy_error(self, "__init__")
        sink = Sink(max_line)
        self._reset(sink)
        self._source = source
        self._chunks = None
        self._interrupted = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        cdef list pending = self._pending
        if self._busy:
            raise busy_error(self, "__anext__")
        if self._pos < PyList_GET_SIZE(pending):
            self._pos += 1
            return <object>PyList_GET_ITEM(pending, self._pos - 1)
        if self._error is not None:
            raise self._error
        if self._ended:
            raise StopAsyncIteration
        if self._sink is None:
            raise uninitialised_error(self)
        self._busy = True
        try:
            while True:
                if self._next_event(self._sink, pending):
                    return <object>PyList_GET_ITEM(pending, self._pos - 1)
                if self._ended:
                    break
                if self._chunks is None:
                    self._chunks = self._source.__aiter__()
                try:
                    chunk = await self._chunks.__anext__()
                except StopAsyncIteration:
                    # A cancelled read may have ended an async generator source for good: its
                    # end then is not the end of the body (as aiter_events, in both twins).
                    if self._interrupted:
                        raise CancelledReadError() from None
                    self._eof = True
                except Exception:
                    raise
                except BaseException:  # cancelled while waiting: the next call goes on
                    self._interrupted = True
                    raise
                else:
                    self._interrupted = False
                    self._sink._dec.append(chunk)  # into the Sink's decoder buffer
        except Exception as err:
            self._latch(err)
            raise
        finally:
            self._busy = False
        raise StopAsyncIteration

    async def aclose(self):
        """Close the source (if it has aclose()); iteration stops."""
        if self._mark_closed():
            close = getattr(self._source, "aclose", None)
            if callable(close):
                await close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb):
        await self.aclose()


def aiter_chat(source, max_line=MAX_LINE):
    """`async for event in aiter_chat(source)`, then `.completion` (docs/assembler.md)."""
    return AsyncChatStream(source, max_line)
