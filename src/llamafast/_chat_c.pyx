# cython: language_level=3, boundscheck=False, wraparound=False
"""Events and Assembler fused, Cython twin (API.md, The whole response in one loop).

The reader's bytes land straight in the SSE decoder's buffer (readinto1 / readinto into the
space `reserve` hands out); each data line's payload goes from there to simdjson as a pointer and
a length (`next_line`, then `push_into`, parsing in place thanks to the decoder's padding): no
bytes object and no str is built for a payload, only the events. Same behaviour, errors and
latching as _chat_py.py (whose structure this follows: pending events, one latched error).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.memoryview cimport PyMemoryView_FromMemory

from http.client import IncompleteRead

from ._assemble_c cimport Assembler
from ._sse_c cimport SSE_DONE, SSE_ITEM, SSE_PADDING, SseDecoder

from ._assemble_c import PADDING
from ._errors import SseIoError, SseTimeoutError, TruncatedError
from ._sse_c import MAX_LINE

__all__ = ["AsyncChatStream", "ChatStream", "aiter_chat"]

cdef str _NOT_ENDED = "the stream has not ended yet: iterate it to the end first"
cdef str _CLOSED = "the stream was closed before it ended"

cdef enum:
    READ_SIZE = 65536  # COMMON.md: reads of 65536 bytes
    MODE_READINTO1 = 0
    MODE_READ1 = 1
    MODE_READINTO = 2
    MODE_READ = 3

# The decoder guarantees SSE_PADDING readable bytes after each payload; when that covers
# simdjson's SIMDJSON_PADDING, payloads are parsed where they lie (else push_into copies them).
cdef bint _PADDED = SSE_PADDING >= PADDING


cdef int _append(SseDecoder dec, object data) except -1:
    """Append any bytes-like object to the decoder (as _sse_c's feed does)."""
    cdef Py_buffer view
    if PyBytes_CheckExact(data):
        return dec.feed_raw(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except BufferError:  # e.g. a non-contiguous memoryview
        data = bytes(data)
        return dec.feed_raw(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    try:
        dec.feed_raw(<const char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef object _read_error(object err):
    """The reader's exception mapped as _sse_py.Events does (05 rule 4, COMMON.md), or None to
    let it propagate unchanged."""
    if isinstance(err, TimeoutError):  # socket.timeout is TimeoutError
        e = SseTimeoutError()
    elif isinstance(err, IncompleteRead):  # http.client's cut chunked body
        e = TruncatedError()
    elif isinstance(err, OSError):
        e = SseIoError(err)
    else:
        return None
    e.__cause__ = err  # as the pure twin's `raise ... from err`
    e.__suppress_context__ = True
    return e


cdef class _State:
    """What the sync and async streams share (as _chat_py._State): the decoder, the assembler,
    the current item's events not handed out yet, and the outcome."""

    cdef SseDecoder _dec
    cdef Assembler _asm
    cdef list _pending           # events; those before _pos have been handed out
    cdef Py_ssize_t _pos
    cdef object _completion
    cdef object _error           # the latched error
    cdef bint _ended             # iteration is over: it ended cleanly, or the stream was closed
    cdef bint _closed
    cdef bint _eof               # the reader / source has no more bytes

    def __cinit__(self, *args, **kwargs):
        self._asm = Assembler()
        self._pending = []
        self._pos = 0

    @property
    def completion(self):
        """The Completion once iteration has ended cleanly (COMMON.md, ChatStream)."""
        if self._completion is not None:
            return self._completion
        if self._error is not None:
            raise self._error
        raise RuntimeError(_CLOSED if self._closed else _NOT_ENDED)

    @property
    def id(self):
        return self._asm._id

    @property
    def reasoning_tokens(self):
        return self._asm._reasoning_tokens

    @property
    def in_reasoning(self):
        return self._asm._in_reasoning

    @property
    def is_finished(self):
        return self._asm._finish_reason is not None

    cdef object _drain(self):
        """The next event from the bytes already buffered; None when more bytes are needed or the
        stream is over (then `_ended` is set). Errors propagate (the caller latches them)."""
        cdef const char* data
        cdef Py_ssize_t length
        cdef int code
        cdef list pending = self._pending
        while True:
            code = self._dec.next_line(&data, &length)
            if code == SSE_ITEM:
                # every event in `pending` has been handed out (_pos == len): rather than empty
                # the list per item, let it grow a little and empty it now and then
                if self._pos >= 16:
                    del pending[:]
                    self._pos = 0
                self._asm.push_into(data, length, None, _PADDED, pending)
                if self._pos < PyList_GET_SIZE(pending):
                    self._pos += 1
                    return <object>PyList_GET_ITEM(pending, self._pos - 1)
            elif code == SSE_DONE:  # COMMON.md: DONE ends the iteration; nothing more is read
                self._end()
                return None
            elif self._eof:  # a clean end of the body (or TruncatedError) also ends it
                self._dec.finish()
                self._end()
                return None
            else:
                return None

    cdef int _end(self) except -1:
        self._completion = self._asm.finish()  # API.md: StreamClosedEarlyError, ProtocolError
        self._ended = True
        return 0

    cdef int _mark_closed(self) except -1:
        """Stop the iteration; 1 if this is the first close."""
        cdef bint first = not self._closed
        self._closed = self._ended = True
        self._pending = []
        self._pos = 0
        return first


cdef class ChatStream(_State):
    """The ChatEvents of a blocking reader's response, in order; then `.completion`."""

    cdef object _reader
    cdef object _read
    cdef int _mode

    def __init__(self, reader, max_line=MAX_LINE):
        self._dec = SseDecoder(max_line)
        self._reader = reader
        for mode, name in enumerate(("readinto1", "read1", "readinto", "read")):
            method = getattr(reader, name, None)
            if callable(method):
                self._mode = mode
                self._read = method
                break
        else:
            raise TypeError(f"the reader has no read(n) method: {type(reader).__name__}")

    def __iter__(self):
        return self

    def __next__(self):
        cdef list pending = self._pending
        if self._pos < PyList_GET_SIZE(pending):
            self._pos += 1
            return <object>PyList_GET_ITEM(pending, self._pos - 1)
        if self._error is not None:
            raise self._error  # COMMON.md: errors are latched
        if self._ended:
            raise StopIteration
        try:
            while True:
                event = self._drain()
                if event is not None:
                    return event
                if self._ended:
                    raise StopIteration
                self._fill()
        except StopIteration:
            raise
        except Exception as err:
            self._error = err
            raise

    cdef int _fill(self) except -1:
        """One read into the decoder's buffer; sets `_eof` at the end of the body."""
        cdef char* p
        cdef Py_ssize_t n
        while True:
            try:
                if self._mode == MODE_READINTO1 or self._mode == MODE_READINTO:
                    p = self._dec.reserve(READ_SIZE)
                    view = PyMemoryView_FromMemory(p, READ_SIZE, PyBUF_WRITE)
                    try:
                        got = self._read(view)
                    finally:
                        view.release()
                    n = 0 if got is None else got
                    if n < 0 or n > READ_SIZE:
                        raise ValueError(f"readinto returned {got!r} for a {READ_SIZE}-byte buffer")
                    if n == 0:
                        self._eof = True
                    else:
                        self._dec.commit(n)
                else:
                    got = self._read(READ_SIZE)
                    if not got:
                        self._eof = True
                    else:
                        _append(self._dec, got)
                return 0
            except InterruptedError:
                continue  # retried
            except Exception as err:
                mapped = _read_error(err)
                if mapped is None:
                    raise
                raise mapped

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

    def __init__(self, source, max_line=MAX_LINE):
        self._dec = SseDecoder(max_line)
        self._source = source

    def __aiter__(self):
        return self

    async def __anext__(self):
        cdef list pending = self._pending
        if self._pos < PyList_GET_SIZE(pending):
            self._pos += 1
            return <object>PyList_GET_ITEM(pending, self._pos - 1)
        if self._error is not None:
            raise self._error
        if self._ended:
            raise StopAsyncIteration
        try:
            while True:
                event = self._drain()
                if event is not None:
                    return event
                if self._ended:
                    break
                if self._chunks is None:
                    self._chunks = self._source.__aiter__()
                try:
                    chunk = await self._chunks.__anext__()
                except StopAsyncIteration:
                    self._eof = True
                else:
                    _append(self._dec, chunk)
        except Exception as err:
            self._error = err
            raise
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
    """`async for event in aiter_chat(source)`, then `.completion` (API.md)."""
    return AsyncChatStream(source, max_line)
