# cython: language_level=3, boundscheck=False, wraparound=False
# cython: embedsignature=True
# Strategy: the pure twin's ResponseParser (_http_py.py), with the body framing and the head's
# line ends scanned in C over the same fixed buffer. The head is parsed by _http_head's
# parse_head (once per response, shared with the pure twin), and every message and state change matches the pure twin's,
# so both give equal results and raise the same errors for every input however it is split
# (tests/test_http_differential.py). A fault is latched, not raised, inside the scan, so the
# body views framed before it are handed out first. Receiver is the pure twin's too, written
# here so that an arrival (get_buffer, buffer_updated, the framing, the Sink's feed, cimported
# from _chat_c) runs no Python frame but the transport's callables. A body read whole (`whole`)
# lands in a buffer taken from a bounded set of spares (`_body_buffer`): one is reused only when
# the spares' list is all that still refers to it, so no view of an earlier answer sees it change.
"""HTTP/1.1 response head and body framing, and the arrival path (parse, feed the Sink):
Cython twin of `_http_py`."""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.ref cimport Py_REFCNT
from libc.string cimport memchr, memmove, memset

from ._chat_c cimport Sink as CSink

from .._errors import HttpParseError, TruncatedError
from ._http_head import parse_head, status_line, too_long
from .._limits import BACKLOG, BUFFER, WHOLE_PAD, WHOLE_SPARES

# The pure twin's public names (the stub, _http_c.pyi, declares them for both).
__all__ = ["BACKLOG", "BUFFER", "HttpParseError", "Receiver", "ResponseParser", "parse_head"]

# Reading pauses while more than BACKLOG bytes wait in a Sink for the consumer; it reads again
# once the consumer has taken everything there is, so a long line still arriving is only
# slowed, never stopped.
cdef Py_ssize_t BACKLOG_BYTES = BACKLOG
cdef Py_ssize_t PAD = WHOLE_PAD

# The whole-body buffers kept for the next answers (docs/client.md, rule WHOLE-BODY), at most
# WHOLE_SPARES bytes of them; sizes rounded up to SPARE_STEP so bodies of about one size share.
cdef list _spares = []
cdef Py_ssize_t _spare_bytes = 0
cdef Py_ssize_t SPARE_LIMIT = WHOLE_SPARES
cdef Py_ssize_t SPARE_STEP = 1 << 16


cdef bytearray _body_buffer(Py_ssize_t need):
    """A buffer of at least `need` bytes: a kept one that nobody else holds (the list and this
    frame are its only references), else a new one (not zeroed), kept while the spares stay
    within their bound. Kept ones too small for `need` and free are let go of. Runs with the
    GIL held and no Python code, so two threads never take the same one."""
    global _spare_bytes
    cdef Py_ssize_t i = len(_spares) - 1, size
    cdef bytearray buf
    while i >= 0:
        buf = <bytearray>_spares[i]
        if Py_REFCNT(buf) == 2:  # the list's reference and `buf`'s: free
            if len(buf) >= need:
                return buf
            _spare_bytes -= len(buf)
            del _spares[i]
        i -= 1
    size = (need + SPARE_STEP - 1) // SPARE_STEP * SPARE_STEP
    buf = PyByteArray_FromStringAndSize(NULL, size)
    if _spare_bytes + size <= SPARE_LIMIT:
        _spares.append(buf)
        _spare_bytes += size
    return buf

# The parser states and framings: _http_head's numbers (parse_head returns them).
cdef enum:
    HEAD = 0
    SIZE = 1
    DATA = 2
    DATA_END = 3
    TRAILER = 4
    DONE = 5

cdef enum:
    MAX_SIZE_DIGITS = 15  # a chunk size of at most 15 hex digits fits the signed 64-bit count

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
    """The head (`status`, `headers` with lower-case names) and the body of one response
    (see the pure twin: interim answers skipped, faults latched in `fault`)."""

    cdef bytearray _buf
    cdef object _view
    cdef Py_ssize_t _size, _start, _end, _seen
    cdef bint _line1  # the status line of the head being read was checked
    cdef int _state, _framing
    cdef long long _left
    cdef long long _framed  # body bytes framed so far (the pure twin's, rule RESUME)
    cdef object _fault
    cdef public int status
    cdef public dict headers
    cdef public bint keep_alive
    cdef public bint surplus  # bytes came after the body's end
    cdef bint _whole, _overflow  # the body goes into `_body`; it passed `_limit`
    cdef object _body, _body_view
    cdef Py_ssize_t _got, _limit

    def __cinit__(self):
        # Made without __init__ (ResponseParser.__new__): an empty buffer, so every use is a
        # clean error ("longer than 0 bytes"), never a read through None.
        self._buf = bytearray()
        self._view = memoryview(self._buf)
        self._size = 0
        self._fault = None
        self.headers = {}
        self._body = self._body_view = None

    def __init__(self, Py_ssize_t size=BUFFER):
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)  # held: the bytearray can never be resized
        self._size = size
        self.reset()

    def reset(self):
        """Ready for the next response in the same buffer (see the pure twin)."""
        self._start = 0
        self._end = 0
        self._seen = 0  # bytes after _start already scanned for the end of the head or line
        self._line1 = False
        self._state = HEAD
        self._framing = CLOSE
        self._left = 0
        self._framed = 0
        self._fault = None
        self.status = 0
        self.headers = {}
        self.keep_alive = True
        self.surplus = False
        self._whole = False
        self._overflow = False
        self._body = self._body_view = None  # a body handed out stays its taker's
        self._got = 0
        self._limit = 0

    @property
    def head_done(self):
        return self._state != HEAD

    @property
    def done(self):
        return self._state == DONE

    @property
    def body_read(self):
        """Bytes of the body handed out so far (see the pure twin)."""
        return self._framed - self._left if self._state != HEAD else 0

    @property
    def fault(self):
        """The parse error found so far (None until then); every later call raises it."""
        return self._fault

    # --- a body read whole (docs/client.md, rule WHOLE-BODY) --------------------------------

    def whole(self, Py_ssize_t limit, list taken):
        """From now on the body goes into one buffer, which `taken` starts (see the pure
        twin): of the Content-Length (False, nothing allocated, past `limit`), else grown."""
        cdef Py_ssize_t size = 0, total
        for piece in taken:
            size += len(piece)
        if self._framing == LENGTH:
            total = size + (<Py_ssize_t>self._left if self._state == DATA else 0)
            if total > limit:
                return False
            self._body = _body_buffer(total + PAD)
            self._body_view = memoryview(self._body)
        else:
            self._body = bytearray()
        self._got = 0
        self._limit = limit
        self._whole = True
        for piece in taken:
            self._keep(piece)
        return True

    @property
    def body_left(self):
        """Bytes of a whole Content-Length body still to come, all into `free()`."""
        return self._body_left()

    cdef inline long long _body_left(self) noexcept:
        if self._whole and self._framing == LENGTH and self._state == DATA:
            return self._left
        return 0

    @property
    def collecting(self):
        return self._collecting()

    cdef inline bint _collecting(self) noexcept:
        return self._whole and self._state != DONE and not self._overflow

    @property
    def overflow(self):
        return self._overflow

    def take_body(self):
        """The whole body, WHOLE_PAD bytes of room after it (zeroed); the parser lets go."""
        body = self._body
        self._body = self._body_view = None
        if body is None:
            return memoryview(b"")
        if len(body) < self._got + PAD:
            body += bytes(self._got + PAD - len(body))
        memset(PyByteArray_AS_STRING(body) + self._got, 0, PAD)
        return memoryview(body)[:self._got]

    cdef int _keep(self, piece) except -1:
        cdef Py_ssize_t got = self._got + len(piece)
        if self._overflow or got > self._limit:
            self._overflow = True
            return 0
        if self._framing == LENGTH:
            self._body_view[self._got:got] = piece
        else:
            self._body += piece
        self._got = got
        return 0

    # --- the buffer --------------------------------------------------------------------------

    def free(self):
        """Where the transport writes next (at least one byte)."""
        return self._free()

    cdef object _free(self):
        cdef char* buf
        cdef Py_ssize_t start = self._start, end = self._end
        if self._fault is not None:
            raise self._fault
        if self._body_left():
            return self._body_view[self._got:self._got + <Py_ssize_t>self._left]
        if start:
            if start < end:
                buf = PyByteArray_AS_STRING(self._buf)
                memmove(buf, buf + start, end - start)
            self._start = 0
            self._end = end - start
        if self._end == self._size:
            self._fault = too_long(self._state, self._size)
            raise self._fault
        return self._view[self._end:]

    def filled(self, Py_ssize_t n):
        """`n` bytes were written at `free()`: the body bytes they complete, as views (valid
        until the next `free()`)."""
        return self._filled(n)

    cdef list _filled(self, Py_ssize_t n):
        cdef list out = []
        cdef Py_ssize_t pos
        if self._body_left():  # a whole Content-Length body, written where free() said
            if not 0 <= n <= self._left:
                raise ValueError(f"filled({n}) with {self._left} bytes free")
            self._got += n
            self._left -= n
            self._state = DATA if self._left else DONE
            return out
        # More than was free would scan past the buffer: refused, as in the pure twin.
        if not 0 <= n <= self._size - self._end:
            raise ValueError(f"filled({n}) with {self._size - self._end} bytes free")
        if self._fault is not None:
            raise self._fault
        self._end += n
        pos = self._run(PyByteArray_AS_STRING(self._buf), self._start, self._end, out)
        if pos < 0:  # a fault, latched: raised now only if no body bytes came before it
            if not out:
                raise self._fault
            return out
        self._start = pos
        return out

    cdef Py_ssize_t _run(self, char* buf, Py_ssize_t pos, Py_ssize_t end, list out) except -2:
        """The bytes from `pos` to `end`: the body's views appended to `out`; where the next
        unconsumed byte is, or -1 after latching a fault in `_fault`."""
        cdef Py_ssize_t stop, eol, take
        cdef int state
        while pos < end:
            state = self._state
            if state == DATA:
                if self._framing == CLOSE:
                    self._framed += end - pos
                    if self._whole:
                        self._keep(self._view[pos:end])
                    else:
                        out.append(self._view[pos:end])
                    return end
                take = end - pos
                if self._left < take:
                    take = <Py_ssize_t>self._left
                if self._whole:
                    self._keep(self._view[pos:pos + take])
                else:
                    out.append(self._view[pos:pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._state = DATA_END if self._framing == CHUNKED else DONE
            elif state == DATA_END:
                if end - pos < 2:
                    break
                if buf[pos] != 13 or buf[pos + 1] != 10:
                    self._fault = HttpParseError(
                        f"a chunk does not end with CRLF: {buf[pos:pos + 2]!r}"
                    )
                    return -1
                pos += 2
                self._state = SIZE
            elif state == HEAD:
                stop = self._head_end(buf, pos, end)
                if stop == -1:
                    break
                if stop < 0:
                    return -1
                try:
                    self._head(buf[pos:stop])
                except HttpParseError as err:
                    self._fault = err
                    return -1
                pos = stop + 4 if stop > pos else stop + 2
            elif state == DONE:
                self.surplus = True  # bytes after the body are not ours
                return end
            else:
                eol = _find_nl(buf, pos + self._seen, end)
                if eol < 0:
                    self._seen = end - pos
                    break
                self._seen = 0
                if self._line(state, buf, pos, eol) < 0:
                    return -1
                pos = eol + 1
        return pos

    cdef Py_ssize_t _head_end(self, char* buf, Py_ssize_t pos, Py_ssize_t end) except -2:
        """Where the head that starts at `pos` ends (as the pure twin's), -1 when it has not
        all come, -3 after latching the fault of a bare LF."""
        cdef Py_ssize_t at = pos + self._seen, lf, start
        while True:
            lf = _find_nl(buf, at, end)
            if lf < 0:
                self._seen = end - pos
                return -1
            if lf == pos or buf[lf - 1] != 13:
                start = lf
                while start > pos and buf[start - 1] != 10:
                    start -= 1
                line = buf[start:lf]
                self._fault = HttpParseError(
                    f"a line of the response head ends in LF without CR: {line[:80]!r}"
                )
                return -3
            if not self._line1:
                try:
                    status_line(buf[pos:lf - 1])
                except HttpParseError as err:
                    self._fault = err
                    return -3
                self._line1 = True
            if lf == pos + 1:  # the first line is empty
                self._seen = 0
                self._line1 = False
                return pos
            if buf[lf - 2] == 10:  # an empty line after the fields: the head ends
                self._seen = 0
                self._line1 = False
                return lf - 3
            at = lf + 1

    cdef int _head(self, bytes head) except -1:
        result = parse_head(head)
        if result[5] == HEAD:  # an interim answer: the final one comes next
            return 0
        self.status = result[0]
        self.headers = result[1]
        self.keep_alive = result[2]
        self._framing = result[3]
        self._left = result[4]
        self._framed = self._left
        self._state = result[5]
        return 0

    cdef int _line(self, int state, char* buf, Py_ssize_t pos, Py_ssize_t eol) except -2:
        """A chunk-size or trailer line (as the pure twin's): 0, or -1 after latching its
        fault. Both end in CRLF, with no other CR."""
        cdef Py_ssize_t stop = eol, i
        cdef long long size = 0
        cdef int d
        cdef bint crlf = eol > pos and buf[eol - 1] == 13
        if crlf:
            stop = eol - 1
            crlf = memchr(buf + pos, 13, stop - pos) == NULL
        if state == SIZE:
            if not crlf:
                self._fault = _line_error(
                    "a chunk-size line does not end with CRLF", buf, pos, stop
                )
                return -1
            i = pos
            while i < stop:
                d = _hex(<unsigned char>buf[i])
                if d < 0:
                    break
                if i - pos < MAX_SIZE_DIGITS:  # more digits are refused below, unsummed
                    size = size * 16 + d
                i += 1
            d = <int>(i - pos)  # the digits
            while i < stop and (buf[i] == 32 or buf[i] == 9):
                i += 1
            if d == 0 or d > MAX_SIZE_DIGITS or (i < stop and buf[i] != 59):
                self._fault = _line_error(
                    "a chunk size is not a hexadecimal number", buf, pos, stop
                )
                return -1
            if size:
                self._left = size
                self._framed += size
                self._state = DATA
            else:
                self._state = TRAILER
        else:  # a trailer field (skipped), or the blank line after them
            if not crlf:
                self._fault = _line_error("a trailer line does not end with CRLF", buf, pos, stop)
                return -1
            if stop == pos:
                self._state = DONE
        return 0

    def eof(self):
        if self._fault is not None:
            raise self._fault
        if self._state == HEAD:
            raise HttpParseError("the connection closed before a complete response head")
        if self._state != DONE and self._framing != CLOSE:
            raise TruncatedError()


cdef object _line_error(str what, char* buf, Py_ssize_t pos, Py_ssize_t stop):
    line = buf[pos:stop]
    return HttpParseError(f"{what}: {line[:40]!r}")


cdef inline Py_ssize_t _find_nl(char* buf, Py_ssize_t pos, Py_ssize_t end) noexcept:
    cdef void* hit = memchr(buf + pos, 10, end - pos)
    if hit == NULL:
        return -1
    return <char*>hit - buf


cdef class Receiver:
    """The arrival path of one response, parsing and feeding only (see the pure twin): the
    parser's buffer out, each arrival parsed, fed to the Sink once one is attached, a parse
    fault latched only after the bytes before it; the transport's `clock`, `waker`, `deliver`,
    `on_fault` and `on_backlog` called as the pure twin calls them."""

    cdef public object error, clock, waker, deliver, on_fault, on_backlog
    cdef public ResponseParser parser
    cdef public CSink sink
    cdef public list early
    cdef public double last
    cdef public Py_ssize_t received  # bytes that arrived, parsed or not
    cdef object _scratch

    def __init__(self, ResponseParser parser):
        self.parser = parser
        self.early = []
        self.sink = None
        self.error = None
        self.last = 0.0
        self.clock = None
        self.waker = None
        self.deliver = None
        self.on_fault = None
        self.on_backlog = None
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
        cdef bint quiet
        self.received += nbytes
        if self.error is not None:
            return
        if self.parser is None:
            raise _no_parser(self)
        # An arrival inside a whole body that does not complete it wakes nobody (WHOLE-BODY).
        quiet = self.parser._collecting()
        try:
            pieces = self.parser._filled(nbytes)
        except HttpParseError as err:
            self._fail(err)
            return
        clock = self.clock
        if clock is not None:
            self.last = clock()
        if pieces:
            sink = self.sink
            if sink is None:
                self.early += [bytes(p) for p in pieces]
            else:
                sink._feed_all(pieces)
                if sink._backlog() > BACKLOG_BYTES and self.on_backlog is not None:
                    self.on_backlog()
        if self.parser._fault is not None:  # found after the body bytes just handed on
            self._fail(self.parser._fault)
            return
        if quiet and self.parser._collecting():
            return
        deliver = self.deliver
        if deliver is not None:
            deliver()
            return
        self._wake()

    def wake(self):
        """Call `waker` if it is set, and clear it (a wake that fails is dropped, as in the
        pure twin)."""
        self._wake()

    cdef int _wake(self) except -1:
        waker = self.waker
        if waker is not None:
            self.waker = None
            try:
                waker(None)
            except Exception:  # nobody is waiting any more (a cancelled task): nothing to wake
                pass
        return 0

    cdef int _fail(self, err) except -1:
        self.error = err
        if self.on_fault is not None:
            self.on_fault()
        self._wake()
        return 0


def _no_parser(receiver):
    return RuntimeError(
        f"this {type(receiver).__name__} has no ResponseParser (was its __init__ called?)"
    )
