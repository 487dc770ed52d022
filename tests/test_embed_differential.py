"""Differential: the two decoder twins give the same Embeddings, or the same ProtocolError, for
embeddings answers drawn at random (valid ones, and ones with a fault anywhere), split anywhere;
numbers within 64-bit integers and doubles."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from llamafast import ProtocolError

B64_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="

floats32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
# simdjson holds integers of 64 bits and numbers of double range; beyond that an answer is not
# JSON to the Cython twin while json reads it (the one difference, said in _vectors_c.pyx)
INT64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def vectors(draw: Any, dim: int) -> Any:
    kind = draw(st.sampled_from(["b64", "b64", "list", "raw", "other"]))
    length = dim if draw(st.integers(0, 5)) else draw(st.integers(0, dim + 2))
    if kind == "b64":
        raw = b"".join(struct.pack("<f", draw(floats32)) for _ in range(length))
        if not draw(st.integers(0, 6)):
            raw = raw[: draw(st.integers(0, len(raw)))]
        return base64.b64encode(raw).decode()
    if kind == "list":
        finite = st.floats(allow_nan=False, allow_infinity=False)
        element = st.one_of(
            finite, finite, st.integers(-(10**6), 10**6), st.booleans(), st.text(max_size=2)
        )
        values = draw(
            st.lists(finite if draw(st.booleans()) else element, min_size=length, max_size=length)
        )
        return values
    if kind == "raw":
        return draw(st.text(alphabet=B64_CHARS, max_size=16))
    return draw(
        st.one_of(st.none(), INT64, st.dictionaries(st.text(max_size=2), st.none(), max_size=1))
    )


@st.composite
def answers(draw: Any) -> tuple[bytes, int, int]:
    dim = draw(st.integers(1, 6))
    count = draw(st.integers(1, 4))
    first = draw(st.integers(0, 3))
    n_items = count if draw(st.integers(0, 4)) else draw(st.integers(0, count + 1))
    order = draw(st.permutations(range(count)))
    items = []
    for pos in range(n_items):
        vec = draw(vectors(dim)) if draw(st.integers(0, 3)) else [0.5] * dim
        index: Any = order[pos] if pos < count else pos
        if not draw(st.integers(0, 8)):
            index = draw(st.one_of(st.integers(-2, count + 2), st.floats(0, 3), st.none()))
        item = {"embedding": vec, "index": index, "object": "embedding"}
        keys = draw(st.permutations(list(item)))
        items.append({k: item[k] for k in keys})
    doc: dict[str, Any] = {
        "model": draw(st.one_of(st.text(max_size=4), st.none())),
        "object": "list",
    }
    if draw(st.booleans()):
        doc["usage"] = {
            "prompt_tokens": draw(st.one_of(st.integers(-1, 50), st.floats(0, 2))),
            "total_tokens": 1,
        }
    doc["data"] = items
    text = json.dumps(doc, allow_nan=False, ensure_ascii=draw(st.booleans()))
    return text.encode(), first, count


def outcome(impl: Any, body: bytes, first: int, count: int, cut: int) -> Any:
    v = impl.Vectors(first + count)
    try:
        v.add([body[:cut], body[cut:]], first, count)
    except ProtocolError as err:
        return ("error", str(err))
    if first:
        fill = json.dumps(
            {"data": [{"embedding": [0.0] * v.dim, "index": i} for i in range(first)]}
        )
        v.add([fill.encode()], 0, first)
    e = v.finish()
    return (e.shape, e.tobytes(), e.model, e.usage)


@given(answers(), st.data())
def test_twins_agree(c_impl: Any, py_impl: Any, case: tuple[bytes, int, int], data: Any) -> None:
    body, first, count = case
    cut = data.draw(st.integers(0, len(body)))
    assert outcome(c_impl, body, first, count, cut) == outcome(py_impl, body, first, count, cut)
