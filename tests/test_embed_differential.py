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
    agree_when_split(c_impl, py_impl, case, data.draw(st.integers(0, len(case[0]))))


def agree_when_split(c_impl: Any, py_impl: Any, case: tuple[bytes, int, int], cut: int) -> None:
    """Both twins make the same of `case` in two pieces cut at `cut`: only ProtocolError."""
    body, first, count = case
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


@settings(max_examples=100)
@given(st.integers(0, 511), st.sampled_from(["inf", "-inf", "nan"]))
def test_a_long_vector_with_one_value_not_finite_reads_alike(
    c_impl: Any, py_impl: Any, at: int, value: str
) -> None:
    # the AVX2 kernel checks the floats it writes as it writes them (lf_b64_avx2's `special`)
    values = [i / 7 for i in range(512)]
    values[at] = float(value)
    vec = base64.b64encode(struct.pack("<512f", *values)).decode()
    body = json.dumps({"data": [{"embedding": vec, "index": 0}]}).encode()
    assert outcome(c_impl, body, 0, 1, 0) == outcome(py_impl, body, 0, 1, 0)


# --- long vectors read where they lie (_vectors_skeleton.hpp): the Cython twin parses the answer
# with its long base64 vectors cut out, and reads it so only when it can vouch that the whole
# parse would read it alike. Answers of long vectors, each changed where that could go wrong: a
# character that is no base64 in a vector (first or later: found by search or by probe), a long
# `embedding` string in a member nobody reads or repeated in an item (never decoded, so never
# checked by the decoder), an escape in a vector or in the key, `\u0000` (the placeholders'
# mark), one byte anywhere. Both twins give the same Embeddings or the same ProtocolError.

BAD_IN_VECTOR = ["\x01", "\x1f", '"', "\\", "\\/", "\\u0041", "\\u0000", "\u00e9", "\x7f", "=", " "]
BAD_BYTES = [b"\x01", b"\xff", b"\xc3", b'"', b"\\", b"\n", b"{", b"]"]


def spoiled(draw: Any, vec: str) -> str:
    """`vec` with one character put in its place (or the same length, when it is an escape)."""
    bad = draw(st.sampled_from(BAD_IN_VECTOR))
    at = draw(st.integers(0, len(vec) - 1))
    return (
        vec[:at] + bad + vec[at + len(bad) :] if draw(st.booleans()) else vec[:at] + bad + vec[at:]
    )


@st.composite
def long_answers(draw: Any) -> tuple[bytes, int, int]:
    dim = draw(st.integers(8, 24))  # 44 to 128 characters: cut out of the skeleton
    count = draw(st.integers(1, 4))
    order = draw(st.permutations(range(count)))
    vecs = [
        base64.b64encode(struct.pack(f"<{dim}f", *(i * 0.25 + k for i in range(dim)))).decode()
        for k in range(count)
    ]
    items: list[dict[str, Any]] = [
        {"object": "embedding", "index": order[k], "embedding": f"\x00v{k}"} for k in range(count)
    ]
    doc: dict[str, Any] = {"object": "list", "model": "m", "data": items}
    doc["usage"] = {"prompt_tokens": 3, "total_tokens": 3}
    extra = draw(st.sampled_from(["none", "member", "usage", "item", "twice", "escaped key"]))
    stray = draw(st.sampled_from(vecs))
    if draw(st.booleans()):
        stray = spoiled(draw, stray)
    if extra == "member":
        doc["x"] = {"embedding": "\x00stray"}
    elif extra == "usage":
        doc["usage"]["embedding"] = "\x00stray"
    elif extra == "item":
        draw(st.sampled_from(items))["x"] = {"embedding": "\x00stray"}
    text = json.dumps(doc)
    if extra == "twice":  # a repeated key: json keeps the last, never reading the first
        text = text.replace('"embedding": "\\u0000v0"', '"embedding": "\\u0000stray", \\0', 1)
        text = text.replace("\\0", '"embedding": "\\u0000v0"', 1)
    elif extra == "escaped key":
        text = text.replace('"embedding"', '"embeddin\\u0067"', 1)
    spoil = draw(st.integers(-1, count - 1))
    for k, vec in enumerate(vecs):
        text = text.replace(f"\\u0000v{k}", spoiled(draw, vec) if k == spoil else vec, 1)
    text = text.replace("\\u0000stray", stray, 1)
    body = text.encode()
    if not draw(st.integers(0, 3)):
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + draw(st.sampled_from(BAD_BYTES)) + body[at + 1 :]
    return body, draw(st.integers(0, 2)), count


@settings(max_examples=600)
@given(long_answers(), st.data())
def test_twins_agree_on_long_vectors_changed_anywhere(
    c_impl: Any, py_impl: Any, case: tuple[bytes, int, int], data: Any
) -> None:
    size = len(case[0])  # cut at either end, or in the middle
    agree_when_split(c_impl, py_impl, case, data.draw(st.sampled_from([0, size, size // 2])))


LONG_A = base64.b64encode(struct.pack("<16f", *range(16))).decode()


@pytest.mark.parametrize(
    "bad",
    [
        LONG_A[:20] + "\x01" + LONG_A[21:],
        LONG_A[:40] + "\t" + LONG_A[41:],
        LONG_A[:20] + "\xff" + LONG_A[21:],
        LONG_A[:20] + "\\x" + LONG_A[22:],
        LONG_A[:20] + "\\ud800" + LONG_A[26:],
    ],
    ids=["control", "tab", "not utf-8", "bad escape", "lone surrogate"],
)
def test_a_long_string_nobody_reads_is_still_checked(c_impl: Any, py_impl: Any, bad: str) -> None:
    # the skeleton cut it out (those without a backslash), and no item decoded it: the whole
    # parse must judge it
    spoilt, vec = '"' + bad + '"', '"' + LONG_A + '"'
    item = '{"embedding":' + vec + ',"index":0}'
    for body in (
        '{"x":{"embedding":' + spoilt + '},"data":[' + item + "]}",
        '{"data":[' + item + '],"usage":[{"embedding":' + spoilt + "}]}",
        '{"data":[{"embedding":' + spoilt + ',"embedding":' + vec + ',"index":0}]}',
    ):
        raw = body.encode().replace(b"\xc3\xbf", b"\xff")
        assert refused(agreed(c_impl, py_impl, raw))
        fixed = raw.replace(spoilt.encode().replace(b"\xc3\xbf", b"\xff"), vec.encode())
        assert agreed(c_impl, py_impl, fixed)[0] == (1, 16)


def test_a_vector_written_with_escapes_reads_as_the_pure_twin_reads_it(
    c_impl: Any, py_impl: Any
) -> None:
    # `\/` is `/` and `\u0041` is `A`: a vector holding them is still base64, read unescaped
    vec = base64.b64encode(struct.pack("<16f", *(i / 3 for i in range(16)))).decode()
    assert "/" in vec or "A" in vec
    escaped = vec.replace("/", "\\/").replace("A", "\\u0041")
    for second in (escaped, escaped.replace("\\u0041", "\\u0000", 1)):
        items = [{"embedding": "\x00a", "index": 0}, {"embedding": "\x00b", "index": 1}]
        body = json.dumps({"data": items}).replace("\\u0000a", vec).replace("\\u0000b", second)
        v = [impl.Vectors(2) for impl in (py_impl, c_impl)]
        got = []
        for d in v:
            try:
                d.add([body.encode()], 0, 2)
                got.append(d.finish().tobytes())
            except ProtocolError as err:
                got.append(str(err))
        assert got[0] == got[1]


@pytest.mark.parametrize("vec", ["AAAA=", "AAAA==", "AAAA===", "AAAAAAAAAAA=" + "="])
def test_padding_after_whole_quads_is_not_base64_in_both(
    c_impl: Any, py_impl: Any, vec: str
) -> None:
    # binascii before Python 3.13 takes '=' after whole quads; strict base64 does not
    outcome = agreed(c_impl, py_impl, b'{"data":[{"embedding":"%s","index":0}]}' % vec.encode())
    assert outcome[1] == "the vector for text 0 is not valid base64"


def test_an_escaped_nul_never_stands_for_a_vector_cut_out(c_impl: Any, py_impl: Any) -> None:
    # `\u0000` marks the skeleton's placeholders: an answer holding one gets no skeleton, so a
    # vector written "\u00000" is no stand-in for the long string a member nobody reads holds
    body = '{"x":{"embedding":"' + LONG_A + '"},"data":[{"embedding":"\\u00000","index":0}]}'
    assert agreed(c_impl, py_impl, body.encode())[1] == "the vector for text 0 is not valid base64"


def test_a_skeleton_given_up_leaves_no_dimension_behind(c_impl: Any, py_impl: Any) -> None:
    # The vector is probed at the length of an earlier long string (64 characters): its 56
    # characters and '","o":"a' (a whole 12 floats' length, the skeleton still JSON) are taken for
    # it, fix the dimension at 12, and are refused; the whole parse that follows must start as if
    # nothing had been read, and finds 10 floats.
    vec = base64.b64encode(struct.pack("<10f", *range(10))).decode()
    long = base64.b64encode(struct.pack("<12f", *range(12))).decode()
    assert (len(vec), len(long)) == (56, 64)
    item = '{"index":0,"embedding":"' + vec + '","o":"a"}'
    body = '{"x":{"embedding":"' + long + '"},"data":[' + item + "]}"
    assert agreed(c_impl, py_impl, body.encode())[0] == (1, 10)
