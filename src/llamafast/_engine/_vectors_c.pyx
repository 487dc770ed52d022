# cython: language_level=3, boundscheck=False, wraparound=False
# cython: embedsignature=True
"""The vectors of `/v1/embeddings` answers into one float32 buffer, Cython twin.

An answer received whole (one memoryview at the start of a bytearray with WHOLE_PAD bytes after
it: docs/client.md, rule WHOLE-BODY) is parsed where it landed; other pieces are copied once into
a padded buffer. Either is parsed by simdjson's DOM parser
(its SIMD kernels, chosen at run time), first through its skeleton (the long base64 vectors cut
out and decoded where they lie, _vectors_skeleton.hpp; anything unusual, and every fault, read
again in full); only `data`, `model` and `usage` are then read: a base64 vector is decoded (32
characters at a time with AVX2, else four through lookup tables) straight into its row of the
call's one buffer; each number of a list goes from the parsed tape into that row as
float32. No Python object is made per vector or per value. Same rules and the same errors as
_vectors_py.py (the fault codes and words are _errors.embedding_error's; the sizes' checks and
words are _embeddings'); a number simdjson cannot hold (an integer beyond 64 bits, `1e400`
beyond a double) makes the answer not JSON in both, as do a byte order mark, a lone surrogate
and nesting past MAX_DEPTH (docs/assembler.md, rule STRICT-JSON). The rows are handed over
read-only (`_Rows`), and the parser's capacity does not outlive a large answer (LF_RETAIN in
_vectors_parse.hpp; docs/client.md, rule EMBEDDINGS).
"""

from cpython.buffer cimport (
    PyBUF_FORMAT,
    PyBUF_ND,
    PyBUF_SIMPLE,
    PyBUF_STRIDES,
    PyBUF_WRITABLE,
    PyBuffer_FillInfo,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy

from .. import _limits
from .._errors import E_MISSING, E_NOT_JSON, embedding_error
from .._strict_json import parse as strict_parse

# _embeddings imports this module for _RowsExport (on Python 3.11), so these are bound at first use.
cdef object Embeddings = None
cdef object Usage = None
cdef object text_count = None
cdef object texts_in_call = None
cdef object rows_bytes = None


cdef _bind_values():
    global Embeddings, Usage, text_count, texts_in_call, rows_bytes
    from . import _embeddings
    from .._values import Usage as usage
    Embeddings = _embeddings.Embeddings
    text_count = _embeddings.text_count
    texts_in_call = _embeddings.texts_in_call
    rows_bytes = _embeddings.rows_bytes
    Usage = usage

# The nesting limit (docs/assembler.md, rule STRICT-JSON): the answer's own object is depth 1,
# an empty [] or {} a level. A parser allocated for depth N refuses N levels that are not empty,
# so the shared parser (depth MAX_DEPTH) accepts only answers at most MAX_DEPTH deep; one it
# refuses for depth is judged by _strict_json (the pure twin's reader), and one that passes
# (exactly MAX_DEPTH deep) is read by a parser of depth MAX_DEPTH + 1, on that cold path only.
cdef size_t MAX_DEPTH = _limits.MAX_DEPTH

__all__ = ["Vectors"]


# The C++ side (simdjson parsing, base64 and numbers into float32 rows) is
# _vectors_parse.hpp, beside this file.
cdef extern from "_vectors_parse.hpp":
    ctypedef struct lf_vecs:
        pass
    enum:
        LF_NO_MEMORY
        LF_TOO_BIG
        LF_TOO_DEEP
    lf_vecs* lf_vecs_new(size_t n)
    void lf_vecs_free(lf_vecs* v)
    char* lf_body(lf_vecs* v, size_t n)
    void lf_body_trim(lf_vecs* v)
    int lf_vecs_add(
        lf_vecs* v, const char* body, size_t n, size_t first, size_t count, size_t max_depth,
        bint fresh
    )
    size_t SIMDJSON_PADDING
    size_t lf_dim(lf_vecs* v)
    float* lf_rows(lf_vecs* v)
    float* lf_vecs_take(lf_vecs* v)
    void lf_rows_free(float* rows, size_t size)
    int lf_vecs_has_model(lf_vecs* v)
    const char* lf_vecs_model(lf_vecs* v, size_t* n)
    int64_t lf_vecs_tokens(lf_vecs* v)
    int64_t lf_vecs_item(lf_vecs* v)
    int64_t lf_vecs_got(lf_vecs* v)
    int64_t lf_vecs_want(lf_vecs* v)


cdef extern from "<cstdlib>":
    void free(void* p)


cdef class _Rows:
    """The float32 rows of one call, owned; exported as read-only bytes (Embeddings shapes them):
    no consumer can write them (docs/client.md, rule EMBEDDINGS)."""

    cdef float* data
    cdef Py_ssize_t size

    def __dealloc__(self):
        lf_rows_free(self.data, <size_t>self.size + 1)  # kept for the next call when small
        self.data = NULL

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, <void*>self.data, self.size, 1, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass


cdef char* _FLOAT32 = b"f"


cdef class _RowsExport:
    """The base of `Embeddings` on Python 3.11, where a class written in Python cannot export a
    buffer (`__buffer__` is 3.12's, PEP 688): `memoryview(e)` is the rows, read-only, 2-D
    `(n, dim)`, format `f`, as on 3.12. `_hold` takes the rows' memory once, for life."""

    cdef Py_buffer _rows
    cdef bint _held
    cdef Py_ssize_t _shape[2]
    cdef Py_ssize_t _strides[2]

    def _hold(self, rows, Py_ssize_t n, Py_ssize_t dim):
        """Export `rows` (C-contiguous, exactly `n * dim` float32 values) from now on."""
        if self._held:
            raise TypeError("these Embeddings already hold their rows")
        PyObject_GetBuffer(rows, &self._rows, PyBUF_SIMPLE)
        if self._rows.len != n * dim * 4:
            PyBuffer_Release(&self._rows)
            raise ValueError(f"{n}x{dim} float32 rows need {n * dim * 4} bytes")
        self._held = True
        self._shape[0] = n
        self._shape[1] = dim
        self._strides[0] = dim * 4
        self._strides[1] = 4

    def __dealloc__(self):
        if self._held:
            self._held = False
            PyBuffer_Release(&self._rows)

    def __getbuffer__(self, Py_buffer* view, int flags):
        if not self._held:
            raise BufferError("these Embeddings were made without their rows")
        if flags & PyBUF_WRITABLE:
            raise BufferError("Embeddings are read-only")
        view.buf = self._rows.buf
        view.obj = self
        view.len = self._rows.len
        view.readonly = 1
        view.itemsize = 4
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = _FLOAT32
        # a consumer that asks for no shape reads plain bytes (one dimension, itemsize ignored)
        view.ndim = 1
        view.shape = NULL
        view.strides = NULL
        if flags & PyBUF_ND:
            view.ndim = 2
            view.shape = self._shape
        if (flags & PyBUF_STRIDES) == PyBUF_STRIDES:
            view.strides = self._strides
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer* view):
        pass  # the rows are held until the Embeddings go


cdef class Vectors:
    """The rows of one `embed` call of `n` texts (see the pure twin): `add` each answer,
    then `finish()`."""

    cdef lf_vecs* _v
    cdef public Py_ssize_t n

    def __cinit__(self):
        self._v = NULL
        self.n = 0

    def __init__(self, n):
        if Embeddings is None:
            _bind_values()
        cdef Py_ssize_t count = text_count(n)
        if self._v != NULL:
            lf_vecs_free(self._v)
        self._v = lf_vecs_new(count)
        if self._v == NULL:
            raise MemoryError()
        self.n = count

    def __dealloc__(self):
        lf_vecs_free(self._v)
        self._v = NULL

    cdef lf_vecs* _vecs(self) except NULL:
        if self._v == NULL:
            raise RuntimeError("this Vectors was made without __init__")
        return self._v

    @property
    def dim(self):
        return lf_dim(self._vecs())

    def add(self, list parts, first, count):
        """Decode the answer (the body's pieces, in order) to the request for the texts
        `first` to `first + count - 1`, into their rows."""
        cdef lf_vecs* v = self._vecs()
        cdef Py_ssize_t start, size_of
        start, size_of = texts_in_call(first, count, self.n)
        try:
            self._add(v, parts, start, size_of)
        finally:
            lf_body_trim(v)

    cdef _add(self, lf_vecs* v, list parts, Py_ssize_t first, Py_ssize_t count):
        cdef Py_ssize_t total = 0
        cdef const char* buf = _in_place(parts, &total)
        if buf == NULL:
            buf = _joined(v, parts, &total)
        cdef int code = lf_vecs_add(v, buf, total, first, count, MAX_DEPTH, False)
        if code == LF_TOO_DEEP:
            if not _strictly_json(buf[:total]):
                code = E_NOT_JSON
            else:
                code = lf_vecs_add(v, buf, total, first, count, MAX_DEPTH + 1, True)
        if code == 0:
            return
        if code == LF_TOO_BIG:
            rows_bytes(self.n, lf_vecs_got(v))  # raises its OverflowError
        if code < 0:
            raise MemoryError()
        raise embedding_error(
            code, lf_vecs_item(v), lf_vecs_got(v), lf_vecs_want(v), buf[:total]
        )

    def finish(self):
        """The Embeddings, once every request's answer has been added."""
        cdef lf_vecs* v = self._vecs()
        cdef size_t n
        cdef const char* m
        cdef size_t dim = lf_dim(v)
        if lf_rows(v) == NULL:
            raise embedding_error(E_MISSING, 0, 0, self.n, b"")
        rows = _Rows()
        rows.size = <Py_ssize_t>(self.n * dim * 4)
        rows.data = lf_vecs_take(v)
        model = None
        if lf_vecs_has_model(v):
            m = lf_vecs_model(v, &n)
            model = m[:n].decode("utf-8", "replace")
        tokens = lf_vecs_tokens(v)
        usage = None if tokens < 0 else Usage(tokens, 0)
        return Embeddings._of_rows(rows, self.n, dim, model, usage)


cdef const char* _in_place(list parts, Py_ssize_t* total):
    """The answer where it was received, when it is one memoryview at the start of a bytearray
    with SIMDJSON_PADDING bytes after it (a body read whole); NULL otherwise."""
    cdef const unsigned char[::1] piece
    if len(parts) != 1 or type(parts[0]) is not memoryview:
        return NULL
    view = <object>parts[0]
    owner = view.obj
    if type(owner) is not bytearray or not view.c_contiguous or view.itemsize != 1:
        return NULL
    cdef const char* start = PyByteArray_AS_STRING(owner)
    piece = view
    if piece.shape[0] == 0 or <const char*>&piece[0] != start:
        return NULL
    if <size_t>len(owner) < <size_t>piece.shape[0] + SIMDJSON_PADDING:
        return NULL
    total[0] = piece.shape[0]
    return start


cdef const char* _joined(lf_vecs* v, list parts, Py_ssize_t* total) except NULL:
    """The pieces copied once into the Vectors' padded buffer."""
    cdef Py_ssize_t at = 0, size
    cdef const unsigned char[::1] piece
    for part in parts:
        total[0] += len(part)
    cdef char* buf = lf_body(v, total[0])
    if buf == NULL:
        raise MemoryError()
    for part in parts:
        if type(part) is bytes:
            size = PyBytes_GET_SIZE(part)
            memcpy(buf + at, PyBytes_AS_STRING(part), size)
        else:
            piece = part
            size = piece.shape[0]
            if size:
                memcpy(buf + at, &piece[0], size)
        at += size
    return buf


cdef bint _strictly_json(bytes raw):
    """Whether the pure twin's strict reader takes `raw` (cold: an answer the shared parser
    refused for its depth)."""
    try:
        strict_parse(raw.decode("utf-8"), raw)
    except ValueError:  # UnicodeDecodeError too; the strict reader's only fault, at any depth
        return False
    return True
