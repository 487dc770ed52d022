# cython: language_level=3, boundscheck=False, wraparound=False
# cython: embedsignature=True
"""The vectors of `/v1/embeddings` answers into one float32 buffer, Cython twin.

The answer's pieces are copied once into a padded buffer and parsed by simdjson's DOM parser
(its SIMD kernels, chosen at run time); only `data`, `model` and `usage` are then read: a base64
vector is decoded (four characters to three bytes through lookup tables) straight into its row
of the call's one buffer; each number of a list goes from the parsed tape into that row as
float32. No Python object is made per vector or per value. Same rules and the same errors as
_vectors_py.py (the fault codes and words are _errors.embedding_error's); a number simdjson
cannot hold (an integer beyond 64 bits, `1e400` beyond a double) makes the answer not JSON in
both.
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
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy

from .._errors import E_MISSING, embedding_error

# _embeddings imports this module for _RowsExport (on Python 3.11), so these are bound at first use.
cdef object Embeddings = None
cdef object Usage = None


cdef _bind_values():
    global Embeddings, Usage
    from ._embeddings import Embeddings as embeddings
    from .._values import Usage as usage
    Embeddings = embeddings
    Usage = usage

__all__ = ["Vectors"]


# The C++ side (simdjson parsing, base64 and numbers into float32 rows) is
# _vectors_parse.hpp, beside this file.
cdef extern from "_vectors_parse.hpp":
    ctypedef struct lf_vecs:
        pass
    lf_vecs* lf_vecs_new(size_t n)
    void lf_vecs_free(lf_vecs* v)
    char* lf_body(lf_vecs* v, size_t n)
    int lf_vecs_add(lf_vecs* v, size_t n, size_t first, size_t count)
    size_t lf_dim(lf_vecs* v)
    float* lf_rows(lf_vecs* v)
    float* lf_vecs_take(lf_vecs* v)
    int lf_vecs_has_model(lf_vecs* v)
    const char* lf_vecs_model(lf_vecs* v, size_t* n)
    int64_t lf_vecs_tokens(lf_vecs* v)
    int64_t lf_vecs_item(lf_vecs* v)
    int64_t lf_vecs_got(lf_vecs* v)
    int64_t lf_vecs_want(lf_vecs* v)


cdef extern from "<cstdlib>":
    void free(void* p)


cdef class _Rows:
    """The float32 rows of one call, owned; exported as bytes (Embeddings shapes them)."""

    cdef float* data
    cdef Py_ssize_t size

    def __dealloc__(self):
        free(self.data)
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

    def __init__(self, Py_ssize_t n):
        if self._v != NULL:
            lf_vecs_free(self._v)
        self._v = lf_vecs_new(n)
        if self._v == NULL:
            raise MemoryError()
        self.n = n

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

    def add(self, list parts, Py_ssize_t first, Py_ssize_t count):
        """Decode the answer (the body's pieces, in order) to the request for the texts
        `first` to `first + count - 1`, into their rows."""
        cdef lf_vecs* v = self._vecs()
        cdef Py_ssize_t total = 0, at = 0, size
        cdef const unsigned char[::1] piece
        if first < 0 or count < 1 or first + count > self.n:
            raise ValueError(f"texts {first} to {first + count - 1} are not among {self.n}")
        for part in parts:
            total += len(part)
        cdef char* buf = lf_body(v, total)
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
        cdef int code = lf_vecs_add(v, total, first, count)
        if code == 0:
            return
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
        if Embeddings is None:
            _bind_values()
        usage = None if tokens < 0 else Usage(tokens, 0)
        return Embeddings(rows, self.n, dim, model=model, usage=usage)
