# cython: language_level=3, boundscheck=False, wraparound=False
# cython: embedsignature=True
# Strategy: the pure twin's ResponseParser (_http_py.py), with the body framing scanned in C over
# the same fixed buffer. The head is parsed by the pure twin's parse_head (once per response),
# and every message and state change matches the pure twin's, so both give equal results and
# raise the same errors for every input however it is split. Receiver is the pure twin's too,
# written here so that an arrival (get_buffer, buffer_updated, the framing, the Sink's feed,
# cimported from _chat_c) runs no Python frame.
"""HTTP/1.1 response head and body framing, and the asyncio arrival path: Cython twin of
`_http_py`."""

from cpython.bytearray cimport PyByteArray_AS_STRING
from libc.string cimport memchr, memmove

from ._chat_c cimport Sink as CSink

from ._chat_c import Sink  # the body's bytes to events; re-exported here for the transports
from ._errors import TruncatedError
from ._http_py import BACKLOG, BUFFER, HttpParseError, parse_head

# Reading pauses while more than BACKLOG bytes wait in a Sink for the consumer; it reads again
# once the consumer has taken everything there is, so a long line still arriving is only
# slowed, never stopped.
cdef Py_ssize_t BACKLOG_BYTES = BACKLOG

cdef enum:
    HEAD = 0
    SIZE = 1
    DATA = 2
    DATA_END = 3
    TRAILER = 4
    DONE = 5

cdef enum:
    CHUNKED = 0
    LENGTH = 1
    CLOSE = 2


cdef inline int _hex(unsigned char c) noexcept:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef class ResponseParser:
    """The head (`status`, `headers` with lower-case names) and the body of one response."""

    cdef bytearray _buf
    cdef object _view
    cdef Py_ssize_t _size, _start, _end
    cdef int _state, _framing
    cdef long long _left
    cdef public int status
    cdef public dict headers
    cdef public bint keep_alive

    def __cinit__(self):
        # Made without __init__ (ResponseParser.__new__): an empty buffer, so every use is a
        # clean error ("longer than 0 bytes"), never a read through None.
        self._buf = bytearray()
        self._view = memoryview(self._buf)
        self._size = 0
        self.headers = {}

    def __init__(self, Py_ssize_t size=BUFFER):
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)  # held: the bytearray can never be resized
        self._size = size
        self._start = 0
        self._end = 0
        self._state = HEAD
        self._framing = CLOSE
        self._left = 0
        self.status = 0
        self.headers = {}
        self.keep_alive = True

    @property
    def head_done(self):
        return self._state != HEAD

    @property
    def done(self):
        return self._state == DONE

    def free(self):
        """Where the transport writes next (at least one byte)."""
        return self._free()

    cdef object _free(self):
        cdef char* buf
        cdef Py_ssize_t start = self._start, end = self._end
        if start:
            if start < end:
                buf = PyByteArray_AS_STRING(self._buf)
                memmove(buf, buf + start, end - start)
            self._start = 0
            self._end = end - start
        if self._end == self._size:
            what = "head" if self._state == HEAD else "chunk-size line"
            raise HttpParseError(f"the response's {what} is longer than {self._size} bytes")
        return self._view[self._end:]

    def filled(self, Py_ssize_t n):
        """`n` bytes were written at `free()`: the body bytes they complete, as views (valid
        until the next `free()`)."""
        return self._filled(n)

    cdef list _filled(self, Py_ssize_t n):
        cdef list out = []
        cdef char* buf
        cdef Py_ssize_t pos = self._start, end, at, eol, take
        cdef int state
        # More than was free would scan past the buffer: refused, as in the pure twin.
        if not 0 <= n <= self._size - self._end:
            raise ValueError(f"filled({n}) with {self._size - self._end} bytes free")
        buf = PyByteArray_AS_STRING(self._buf)
        self._end += n
        end = self._end
        while pos < end:
            state = self._state
            if state == DATA:
                if self._framing == CLOSE:
                    out.append(self._view[pos:end])
                    pos = end
                    break
                take = end - pos
                if self._left < take:
                    take = <Py_ssize_t>self._left
                out.append(self._view[pos:pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._state = DATA_END if self._framing == CHUNKED else DONE
            elif state == HEAD:
                at = self._buf.find(b"\r\n\r\n", pos, end)
                if at < 0:
                    break
                head = parse_head(bytes(self._buf[pos:at]))
                self.status = head[0]
                self.headers = head[1]
                self.keep_alive = head[2]
                self._framing = head[3]
                self._left = head[4]
                self._state = head[5]
                pos = at + 4
            elif state == DONE:
                pos = end
            else:
                eol = _find_nl(buf, pos, end)
                if eol < 0:
                    break
                self._line(state, buf, pos, eol)
                pos = eol + 1
        self._start = pos
        return out

    cdef int _line(self, int state, char* buf, Py_ssize_t pos, Py_ssize_t eol) except -1:
        cdef Py_ssize_t stop = eol, a, b, i
        cdef long long size = 0
        cdef int d
        while stop > pos and buf[stop - 1] == 13:  # the line without its trailing CRs
            stop -= 1
        if state == SIZE:
            b = pos
            while b < stop and buf[b] != 59:  # up to the first ';'
                b += 1
            a = pos
            while a < b and (buf[a] == 32 or buf[a] == 9):
                a += 1
            while b > a and (buf[b - 1] == 32 or buf[b - 1] == 9):
                b -= 1
            if a == b or b - a > 15:
                self._bad_size(buf, pos, stop)
            for i in range(a, b):
                d = _hex(<unsigned char>buf[i])
                if d < 0:
                    self._bad_size(buf, pos, stop)
                size = size * 16 + d
            if size:
                self._left = size
                self._state = DATA
            else:
                self._state = TRAILER
        elif state == DATA_END:
            if stop > pos:
                line = buf[pos:stop]
                raise HttpParseError(f"a chunk does not end with CRLF: {line[:40]!r}")
            self._state = SIZE
        elif stop == pos:  # the blank line after the trailers
            self._state = DONE
        return 0

    cdef int _bad_size(self, char* buf, Py_ssize_t pos, Py_ssize_t stop) except -1:
        line = buf[pos:stop]
        raise HttpParseError(f"a chunk size is not a hexadecimal number: {line[:40]!r}")

    def eof(self):
        if self._state == HEAD:
            raise HttpParseError("the connection closed before a complete response head")
        if self._state != DONE and self._framing != CLOSE:
            raise TruncatedError()


cdef inline Py_ssize_t _find_nl(char* buf, Py_ssize_t pos, Py_ssize_t end) noexcept:
    cdef void* hit = memchr(buf + pos, 10, end - pos)
    if hit == NULL:
        return -1
    return <char*>hit - buf


cdef class Receiver:
    """The arrival path of an asyncio BufferedProtocol reading one response (see the pure
    twin): the parser's buffer out, each arrival parsed, fed to the Sink once one is
    attached, and the waiting task woken once."""

    cdef public object loop, transport, error, waiter, deliver
    cdef public ResponseParser parser
    cdef public CSink sink
    cdef public list early
    cdef public bint paused, watched
    cdef public double last
    cdef object _scratch

    def __init__(self, loop, ResponseParser parser):
        self.loop = loop
        self.parser = parser
        self.transport = None
        self.early = []
        self.sink = None
        self.error = None
        self.waiter = None
        self.paused = False
        self.watched = False
        self.last = 0.0
        self.deliver = None
        self._scratch = None

    def get_buffer(self, sizehint):
        if self.parser is None:
            raise _no_parser(self)
        if self.error is None:
            try:
                return self.parser._free()
            except HttpParseError as err:
                self._fail(err)
        if self._scratch is None:  # failed: what still arrives is dropped
            self._scratch = bytearray(4096)
        return memoryview(self._scratch)

    def buffer_updated(self, Py_ssize_t nbytes):
        cdef list pieces
        cdef CSink sink
        if self.error is not None:
            return
        if self.parser is None:
            raise _no_parser(self)
        try:
            pieces = self.parser._filled(nbytes)
        except HttpParseError as err:
            self._fail(err)
            return
        if self.watched:
            self.last = self.loop.time()
        if pieces:
            sink = self.sink
            if sink is None:
                self.early += [bytes(p) for p in pieces]
            else:
                sink._feed_all(pieces)
                if sink._backlog() > BACKLOG_BYTES and self.transport is not None:
                    self.paused = True
                    self.transport.pause_reading()
        deliver = self.deliver
        if deliver is not None:
            deliver()
            return
        self._wake()

    def _fail(self, err):
        self.error = err
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _wake(self):
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)


def _no_parser(receiver):
    return RuntimeError(
        f"this {type(receiver).__name__} has no ResponseParser (was its __init__ called?)"
    )
