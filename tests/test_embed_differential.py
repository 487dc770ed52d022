"""Differential: the two decoder twins give the same Embeddings, or the same ProtocolError, for
embeddings answers drawn at random (valid ones, and ones with a fault anywhere), split anywhere;
numbers within 64-bit integers and doubles."""

from __future__ import annotations

import base64
import inspect
import json
import struct
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamafast import ProtocolError, Usage
from llamafast._limits import MAX_DEPTH

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
def answer_docs(draw: Any) -> tuple[dict[str, Any], int, int]:
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
    return doc, first, count


@st.composite
def answers(draw: Any) -> tuple[bytes, int, int]:
    doc, first, count = draw(answer_docs())
    text = json.dumps(doc, allow_nan=False, ensure_ascii=draw(st.booleans()))
    return text.encode(), first, count


def outcome(impl: Any, body: bytes, first: int, count: int, cut: int) -> Any:
    v = impl.Vectors(first + count)
    try:
        v.add([body[:cut], body[cut:]], first, count)
    except Exception as err:  # the class is part of the outcome: only ProtocolError may come
        return (type(err), str(err))
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


# --- whole answers, mutated where the twins once read apart (docs/client.md, EMBEDDINGS) ------
# A valid answer with one JSON token put somewhere in it (a member of its own, the model, the
# usage, the data, an item's index or vector, a value of a vector, a key), the token drawn from
# where the twins' readers differ: integers at the 64-bit edges, floats out of range, surrogate
# escapes, nesting about MAX_DEPTH deep, wrong types. Then, sometimes, the whole text changed: a
# byte order mark before it, cut short, one byte replaced. Both twins give the same Embeddings,
# or the same ProtocolError with the same message.

EDGE_INTS = [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30, 0, -1]
RAW_FLOATS = ["1e400", "-1e400", "1E400", "1e+309", "1e39", "3.4e38", "1e-400", "4.9e-324", "-0.0"]
RAW_STRINGS = [
    r'"\ud800"',
    r'"\uDFFF"',
    r'"a\udc00"',
    r'"\ud83d\ude00"',
    r'"\ude00\ud83d"',
    '"AAAAAA=="',
]
RAW_OTHER = ["true", "null", "{}", "[]", '{"a":[1]}', "[1,[2]]", "NaN", "-Infinity"]
SENTINEL = "\x00raw"


def nested(depth: int, inner: str = "") -> str:
    return "[" * depth + inner + "]" * depth


raw_tokens = st.one_of(
    st.sampled_from(EDGE_INTS).map(str),
    st.sampled_from(RAW_FLOATS),
    st.sampled_from(RAW_STRINGS),
    st.sampled_from(RAW_OTHER),
    st.builds(
        nested,
        st.one_of(st.integers(MAX_DEPTH - 6, MAX_DEPTH + 1), st.just(1000)),
        st.sampled_from(["", "1", "{}", '{"a":[]}']),
    ),
)


def place(draw: Any, doc: dict[str, Any]) -> None:
    """Put SENTINEL at one place of `doc` (the raw token replaces it once dumped)."""
    items = [x for x in doc["data"] if isinstance(x, dict)]
    where = draw(st.sampled_from(["member", "model", "tokens", "usage", "data", "item", "key"]))
    if where == "item" and items:
        item = draw(st.sampled_from(items))
        vec = item.get("embedding")
        spot = draw(st.sampled_from(["index", "embedding", "value"]))
        if spot == "value" and isinstance(vec, list) and vec:
            vec[draw(st.integers(0, len(vec) - 1))] = SENTINEL
        else:
            item["index" if spot == "index" else "embedding"] = SENTINEL
    elif where == "tokens":
        doc["usage"] = {"prompt_tokens": SENTINEL, "total_tokens": 1}
    elif where == "key":
        doc[SENTINEL] = 1  # a key: a raw token that is no string makes the answer not JSON
    else:
        doc[where if where in ("model", "usage", "data") else "x"] = SENTINEL


@st.composite
def mutated_answers(draw: Any) -> tuple[bytes, int, int]:
    doc, first, count = draw(answer_docs())
    place(draw, doc)
    text = json.dumps(doc, allow_nan=False, ensure_ascii=draw(st.booleans()))
    body = text.replace(json.dumps(SENTINEL), draw(raw_tokens), 1).encode()
    change = draw(st.sampled_from(["none", "none", "bom", "cut", "byte"]))
    if change == "bom":
        body = b"\xef\xbb\xbf" + body
    elif change == "cut":
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif change == "byte":
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([draw(st.integers(0, 255))]) + body[at + 1 :]
    return body, first, count


@settings(max_examples=400)
@given(mutated_answers(), st.data())
def test_twins_agree_on_mutated_answers(
    c_impl: Any, py_impl: Any, case: tuple[bytes, int, int], data: Any
) -> None:
    body, first, count = case
    cut = data.draw(st.integers(0, len(body)))
    pure = outcome(py_impl, body, first, count, cut)
    assert outcome(c_impl, body, first, count, cut) == pure
    assert not isinstance(pure[0], type) or pure[0] is ProtocolError


# --- the cases the twins once read apart, each by its rule (docs/client.md, EMBEDDINGS) -------

ONE_ROW = b'"data":[{"embedding":[1.0,2.0],"index":0}]'


def verdict(impl: Any, body: bytes) -> Any:
    """What a twin makes of a one-text answer: its value, or its error's class and message."""
    v = impl.Vectors(1)
    try:
        v.add([body], 0, 1)
    except Exception as err:  # the class is part of the verdict: any builtin one fails below
        return (type(err), str(err))
    e = v.finish()
    return (e.shape, e.tobytes(), e.model, e.usage)


def agreed(c_impl: Any, py_impl: Any, body: bytes) -> Any:
    pure = verdict(py_impl, body)
    assert verdict(c_impl, body) == pure
    return pure


def refused(outcome: Any) -> bool:
    return outcome[0] is ProtocolError and "is not valid JSON" in outcome[1]


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"\\ud800",' + ONE_ROW + b"}",
        b'{"model":"a\\udfffb",' + ONE_ROW + b"}",
        b'{"\\ud800":1,' + ONE_ROW + b"}",
        b'{"x":["\\ude00\\ud83d"],' + ONE_ROW + b"}",
    ],
    ids=["model", "low", "key", "pair reversed"],
)
def test_a_lone_surrogate_is_refused_by_both(c_impl: Any, py_impl: Any, body: bytes) -> None:
    # STRICT-JSON: simdjson refuses an escaped lone surrogate (UTF-8 cannot carry one)
    assert refused(agreed(c_impl, py_impl, body))


def test_a_surrogate_pair_is_one_character_in_both(c_impl: Any, py_impl: Any) -> None:
    outcome = agreed(c_impl, py_impl, b'{"model":"\\ud83d\\ude00",' + ONE_ROW + b"}")
    assert outcome[2] == "\U0001f600"


@pytest.mark.parametrize("where", [b"\xef\xbb\xbf", b" \xef\xbb\xbf"], ids=["first", "after space"])
def test_a_byte_order_mark_is_refused_by_both(c_impl: Any, py_impl: Any, where: bytes) -> None:
    # RFC 8259, section 8.1: a JSON text has no byte order mark (simdjson would skip one)
    assert refused(agreed(c_impl, py_impl, where + b"{" + ONE_ROW + b"}"))


@pytest.mark.parametrize(
    ("tokens", "usage"),
    [
        (2**63 - 1, Usage(2**63 - 1, 0)),
        (2**63, None),
        (2**64 - 1, None),
        (-1, None),
        (-(2**63), None),
    ],
)
def test_prompt_tokens_beyond_a_count_are_left_out_by_both(
    c_impl: Any, py_impl: Any, tokens: int, usage: Usage | None
) -> None:
    # docs/client.md, rule EMBEDDINGS: a count is 0 to 2**63 - 1 (as COUNTS in docs/assembler.md);
    # an integer JSON holds (int64 or uint64) outside that is no count: usage as if not sent
    body = b'{"usage":{"prompt_tokens":%d},%s}' % (tokens, ONE_ROW)
    assert agreed(c_impl, py_impl, body)[3] == usage


def test_prompt_tokens_add_up_to_at_most_a_count(impl: Any) -> None:
    v = impl.Vectors(2)
    for first in (0, 1):
        body = b'{"usage":{"prompt_tokens":%d},%s}' % (2**63 - 2, ONE_ROW)
        v.add([body], first, 1)
    assert v.finish().usage == Usage(2**63 - 1, 0)


def nested_answer(depth: int, inner: bytes = b"") -> bytes:
    """An answer whose member `x` nests `depth` levels in all (its own object is level 1)."""
    return b'{"x":' + b"[" * (depth - 1) + inner + b"]" * (depth - 1) + b"," + ONE_ROW + b"}"


@pytest.mark.parametrize("inner", [b"", b"1", b"{}", b'{"a":1}'], ids=repr)
def test_nesting_up_to_max_depth_is_read_deeper_refused(
    c_impl: Any, py_impl: Any, inner: bytes
) -> None:
    # STRICT-JSON: nesting deeper than MAX_DEPTH (the answer's own object is depth 1, an empty
    # [] or {} a level) is refused by both twins
    depth = MAX_DEPTH - (1 if inner.startswith(b"{") else 0)
    assert agreed(c_impl, py_impl, nested_answer(depth, inner))[0] == (1, 2)
    assert refused(agreed(c_impl, py_impl, nested_answer(depth + 1, inner)))
    assert refused(agreed(c_impl, py_impl, nested_answer(1000, inner)))


def test_deep_nesting_refused_whatever_the_callers_stack(c_impl: Any, py_impl: Any) -> None:
    # the verdict of a 1,000 deep answer does not hang on how deep the caller already is
    def at_depth(frames: int, impl: Any) -> Any:
        if frames:
            return at_depth(frames - 1, impl)
        return verdict(impl, nested_answer(1000))

    room = sys.getrecursionlimit() - len(inspect.stack()) - 40
    for impl in (py_impl, c_impl):
        assert refused(at_depth(room, impl))
        assert refused(at_depth(0, impl))


# --- long base64 vectors: the Cython twin decodes 32 characters at a time where the CPU can ------
# (_vectors_parse.hpp, lf_b64_avx2); a character outside the alphabet anywhere in a long vector
# is the same ProtocolError in both twins, and a valid one the same floats.

LONG = base64.b64encode(struct.pack("<512f", *(i / 7 for i in range(512)))).decode()
NOT_BASE64 = ["=", "-", "_", " ", "\x7f", "\u00e9", ":", "@", "[", "`", "{", "\\n", "*", ","]


@settings(max_examples=150)
@given(st.integers(0, len(LONG) - 3), st.sampled_from(NOT_BASE64), st.booleans())
def test_a_long_vector_with_one_character_not_base64_reads_alike(
    c_impl: Any, py_impl: Any, at: int, bad: str, whole: bool
) -> None:
    vec = LONG[:at] + bad + LONG[at + 1 :] if whole else LONG
    body = json.dumps({"data": [{"embedding": vec, "index": 0}]}).encode()
    cut = len(body) // 2
    assert outcome(c_impl, body, 0, 1, cut) == outcome(py_impl, body, 0, 1, cut)
