"""`Embeddings`, the value an `embed` call hands out: beside the vector twins that make it.

One Python class whichever twin decoded the answer: `n` rows of `dim` float32 values in one
buffer the class wraps without copying. On Python 3.12 and later it exports that buffer itself
(`__buffer__`, PEP 688); on 3.11, where a class written in Python cannot, its base is the Cython
twin's `_RowsExport` (when the extensions are built and wanted), which exports it in C. So the
class lives here, in the engine, and not on the ground floor (`llamafast._values`, which
imports no twin).
"""

from __future__ import annotations

import importlib
import operator
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._values import Usage, _refuse_delattr, _refuse_setattr
from ._extensions import NO_EXTENSIONS

__all__ = ["Embeddings", "rows_bytes", "text_count", "texts_in_call"]

# --- the sizes of one call (docs/client.md, rule EMBEDDINGS) -----------------------------------
# A count of texts is 0 to sys.maxsize (ValueError past it); the rows take n * dim * 4 bytes, which
# one buffer holds only up to sys.maxsize (OverflowError past it, as Python's own sequences say);
# rows that fit but cannot be had are a MemoryError.


def text_count(n: object) -> int:
    """`n` as the count of texts of one call: ValueError outside 0 to sys.maxsize."""
    count = operator.index(n)  # type: ignore[arg-type]
    if not 0 <= count <= sys.maxsize:
        raise ValueError(f"a call's count of texts is 0 to {sys.maxsize}, not {count}")
    return count


def texts_in_call(first: object, count: object, n: int) -> tuple[int, int]:
    """`first` and `count` as one request's texts, `first` to `first + count - 1`, all among the
    call's `n`: ValueError when they are not."""
    start, size = operator.index(first), operator.index(count)  # type: ignore[arg-type]
    if start < 0 or size < 1 or start + size > n:
        raise ValueError(f"texts {start} to {start + size - 1} are not among {n}")
    return start, size


def rows_bytes(n: int, dim: int) -> int:
    """The bytes of `n` rows of `dim` float32: OverflowError past what one buffer holds."""
    size = n * dim * 4
    if size > sys.maxsize:
        raise OverflowError(
            f"{n} vectors of {dim} float32 need {size} bytes, more than {sys.maxsize}"
        )
    return size


def _rows_export() -> type:
    """The base that gives `Embeddings` the buffer protocol on Python 3.11, where a class written
    in Python cannot export a buffer (`__buffer__` is 3.12's, PEP 688): the Cython twin's
    `_RowsExport`, unless the extensions are not built or not wanted (then `e.view` only)."""
    if sys.version_info >= (3, 12) or NO_EXTENSIONS:
        return object
    try:
        from ._vectors_c import _RowsExport as rows_export  # type: ignore[attr-defined]
    except ImportError:
        return object
    return rows_export  # type: ignore[no-any-return]


if TYPE_CHECKING:
    _RowsExport = object
else:
    _RowsExport = _rows_export()


class Embeddings(_RowsExport):
    """The vectors of one `embed` call: `n` rows of `dim` float32 values in one buffer, in the
    order of the texts. No Python object per value: the buffer protocol (`memoryview(e)`, numpy;
    on Python 3.11 only with the Cython twin, and on every version `e.view`) gives a read-only
    2-D view of shape `(n, dim)`, format `f`; `to_numpy()` wraps it without a copy; `tolist()`
    builds the floats when they are really wanted. `len(e)` is `n`, `e[i]` the 1-D view of row
    `i` (to a type checker `memoryview[float]`, docs/client.md, rule EMBEDDINGS). `model` and
    `usage` are as the server sent them. Equal when shape, values, model and usage are."""

    __slots__ = ("_flat", "_view", "dim", "model", "n", "usage")

    n: int
    dim: int
    model: str | None
    usage: Usage | None
    _view: memoryview[float]
    _flat: memoryview[float]

    def __init__(
        self,
        data: Any,
        n: int,
        dim: int,
        *,
        model: str | None = None,
        usage: Usage | None = None,
    ) -> None:
        """The rows `data`, a C-contiguous buffer of exactly `n * dim` float32 values (native byte
        order): wrapped as they are when they are `bytes` (nothing can write them), else copied
        into `bytes` (the caller keeps a buffer it can still write)."""
        if type(data) is not bytes:
            data = bytes(memoryview(data).cast("B"))
        self._adopt(data, n, dim, model, usage)

    @classmethod
    def _of_rows(
        cls, rows: Any, n: int, dim: int, model: str | None, usage: Usage | None
    ) -> Embeddings:
        """The Embeddings of rows no one else can write (the Cython twin's read-only rows, or
        `bytes`), wrapped without a copy: the vector twins' way in."""
        self = cls.__new__(cls)
        self._adopt(rows, n, dim, model, usage)
        return self

    def _adopt(self, data: Any, n: int, dim: int, model: str | None, usage: Usage | None) -> None:
        raw = memoryview(data).cast("B")
        if n < 1 or dim < 1:
            raise ValueError(f"Embeddings needs at least one row and one value, not {n}x{dim}")
        if len(raw) != n * dim * 4:
            raise ValueError(
                f"Embeddings of {n}x{dim} float32 needs {n * dim * 4} bytes, not {len(raw)}"
            )
        set_ = object.__setattr__
        flat = raw.cast("f").toreadonly()
        set_(self, "_flat", flat)
        set_(self, "_view", raw.cast("f", (n, dim)).toreadonly())
        if _RowsExport is not object:
            self._hold(raw, n, dim)  # type: ignore[attr-defined]
        set_(self, "n", n)
        set_(self, "dim", dim)
        set_(self, "model", model)
        set_(self, "usage", usage)

    @property
    def view(self) -> memoryview[float]:
        """The read-only 2-D view: shape `(n, dim)`, format `f`."""
        return self._view

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.dim)

    # The rows' view, typed as the buffer protocol declares an export (a memoryview of any item
    # type: typeshed's `Buffer` returns `memoryview`, whose items default to int).
    def __buffer__(self, flags: int) -> memoryview[Any]:
        return self._view

    def __release_buffer__(self, view: memoryview) -> None:
        pass  # the view is the instance's own, shared by every export

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> memoryview[float]:
        """Row `i` (negative counts from the end): a 1-D float32 view, no copy."""
        if not isinstance(i, int):
            raise TypeError(f"Embeddings rows are indexed by int, not {type(i).__name__}")
        if not -self.n <= i < self.n:
            raise IndexError(f"row {i} is outside the {self.n} rows")
        i %= self.n
        return self._flat[i * self.dim : (i + 1) * self.dim]

    def __iter__(self) -> Iterator[memoryview[float]]:
        return (self[i] for i in range(self.n))

    def to_numpy(self) -> Any:
        """A read-only numpy float32 array of shape `(n, dim)` over the same memory (no copy);
        ImportError if numpy is not installed (llamafast never needs it)."""
        # Imported by name: numpy is optional, and the type checkers of a project without it
        # must still read this module.
        numpy = importlib.import_module("numpy")
        return numpy.asarray(self._view)

    def tolist(self) -> list[list[float]]:
        """The values as a list of lists of float (this does make a float per value)."""
        return self._view.tolist()  # type: ignore[return-value]

    def tobytes(self) -> bytes:
        """The rows' float32 bytes, row after row, in native byte order."""
        return self._view.tobytes()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Embeddings):
            return NotImplemented
        return (
            self.n == other.n
            and self.dim == other.dim
            and self.model == other.model
            and self.usage == other.usage
            and self._view.cast("B") == other._view.cast("B")
        )

    def __hash__(self) -> int:
        return hash((self.n, self.dim, self.model, self.usage, self._view.tobytes()))

    def __setattr__(self, name: str, value: object) -> None:
        _refuse_setattr(self, name, value)

    def __delattr__(self, name: str) -> None:
        _refuse_delattr(self, name)

    def __reduce__(self) -> Any:
        return (_embeddings, (self.tobytes(), self.n, self.dim, self.model, self.usage))

    def __repr__(self) -> str:
        return f"Embeddings(n={self.n}, dim={self.dim}, model={self.model!r}, usage={self.usage!r})"


def _embeddings(
    data: bytes, n: int, dim: int, model: str | None, usage: Usage | None
) -> Embeddings:
    return Embeddings(data, n, dim, model=model, usage=usage)
