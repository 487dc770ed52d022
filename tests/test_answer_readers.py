# Strategy: every reader of a whole answer (docs/client.md, rule WHOLE) fed generated answers,
# good ones in the shape it reads and those same answers mutated (a member nested thousands
# deep, an integer of 400 digits, 1e400, NaN, a lone surrogate, bytes cut out, a type swapped):
# each reader gives a value or a ProtocolError, never anything else; and an answer holding
# what STRICT-JSON refuses, wherever it is, is a ProtocolError. The readers are one Python code
# under both twins, so no twin is chosen here; the client path runs both
# (tests/test_whole_answers.py, tests/test_hostile.py).
"""The whole-answer readers under generated and mutated answers: a value or a ProtocolError."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llamafast import ProtocolError
from llamafast._core._answers import (
    control_accepted,
    count_of,
    json_object,
    read_models,
    read_props,
    read_ranked,
    read_slots,
)

DOCS = 3  # the documents of a rerank answer


def rerank(text: str) -> Any:
    return read_ranked(text.encode("utf-8", "surrogatepass"), DOCS, None)


READERS: dict[str, Callable[[str], Any]] = {
    "slots": read_slots,
    "props": read_props,
    "models": read_models,
    "input_tokens": lambda text: count_of(text, "POST /input_tokens", "input_tokens"),
    "tokenize": lambda text: json_object(text, "POST /tokenize"),
    "control": lambda text: control_accepted(200, text),
    "rerank": rerank,
}

# --- answers: good ones in each reader's shape, and what STRICT-JSON refuses ----------------

ints = st.integers(-(2**70), 2**70)
leaves = st.none() | st.booleans() | ints | st.floats() | st.text(max_size=8)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)
slot = st.fixed_dictionaries({"id": st.integers(0, 5), "is_processing": st.booleans()})
SHAPES: dict[str, st.SearchStrategy[Any]] = {
    "slots": st.lists(slot, max_size=6),
    "props": st.fixed_dictionaries(
        {"default_generation_settings": st.fixed_dictionaries({"n_ctx": st.integers(0, 1 << 20)})},
        optional={"total_slots": st.integers(0, 8), "model_alias": st.text(max_size=8)},
    ),
    "models": st.fixed_dictionaries(
        {"data": st.lists(st.fixed_dictionaries({"id": st.text(max_size=8)}), max_size=3)}
    ),
    "input_tokens": st.fixed_dictionaries({"input_tokens": st.integers(0, 1 << 40)}),
    "tokenize": st.fixed_dictionaries({"tokens": st.lists(st.integers(0, 1000), max_size=5)}),
    "control": st.fixed_dictionaries({"success": st.booleans()}),
    "rerank": st.permutations(range(DOCS)).map(
        lambda order: {"results": [{"index": i, "relevance_score": 0.5} for i in order]}
    ),
}

# Text no strict reader accepts, anywhere in an answer.
REFUSED = st.sampled_from(
    [
        "[" * 3000 + "]" * 3000,
        '{"a":' * 2000 + "1" + "}" * 2000,
        "[" * 257 + "]" * 257,
        "9" * 400,
        "-" + "9" * 400,
        str(2**64),
        str(-(2**63) - 1),
        "1e400",
        "-1e400",
        "NaN",
        "Infinity",
        "-Infinity",
        '"\\ud800"',
        '"a\\udfff"',
    ]
)
MARK = '"\\u0000mark"'  # a string no generated answer holds: where REFUSED goes


def marked(doc: Any, draw: st.DrawFn) -> str:
    """`doc` as JSON with one of its values (or a new member, or the whole) written as MARK."""
    spots: list[tuple[Any, Any]] = []
    stack = [doc]
    while stack:
        node = stack.pop()
        keys = node.keys() if isinstance(node, dict) else range(len(node))
        for key in keys:
            spots.append((node, key))
            if isinstance(node[key], (dict, list)):
                stack.append(node[key])
    if isinstance(doc, dict):
        spots.append((doc, "extra"))
    if not spots:
        return MARK
    node, key = draw(st.sampled_from(spots))
    if isinstance(node, dict) or key < len(node):
        node[key] = "\x00mark"
    return json.dumps(doc)


@st.composite
def refused_answers(draw: st.DrawFn, reader: str) -> str:
    text = marked(draw(SHAPES[reader]), draw)
    return text.replace(MARK, draw(REFUSED), 1)


@st.composite
def mutated_answers(draw: st.DrawFn, reader: str) -> str:
    """A good answer or any JSON value, then cut, spliced with refused text, or retyped."""
    doc = draw(SHAPES[reader] | values)
    text = json.dumps(doc, allow_nan=True)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        what = draw(st.sampled_from(["cut", "refused", "value", "char"]))
        if what == "cut":
            text = text[:at] + text[at + draw(st.integers(1, 8)) :]
        elif what == "refused":
            text = text[:at] + draw(REFUSED) + text[at:]
        elif what == "value":
            text = text[:at] + json.dumps(draw(values)) + text[at:]
        else:
            text = text[:at] + draw(st.sampled_from('[]{}",:0-e.\\\ud800\ufeff')) + text[at:]
    return text


def verdict(reader: str, text: str) -> str:
    """What the reader did: "value" or "ProtocolError"; anything else fails the test."""
    try:
        READERS[reader](text)
    except ProtocolError:
        return "ProtocolError"
    return "value"


# --- the rules -------------------------------------------------------------------------------


@pytest.mark.parametrize("reader", READERS)
@given(data=st.data())
def test_a_good_answer_is_read(reader: str, data: st.DataObject) -> None:
    assert verdict(reader, json.dumps(data.draw(SHAPES[reader]))) == "value"


@pytest.mark.parametrize("reader", READERS)
@given(data=st.data())
def test_what_strict_json_refuses_anywhere_in_an_answer_is_protocol_error(
    reader: str, data: st.DataObject
) -> None:
    assert verdict(reader, data.draw(refused_answers(reader))) == "ProtocolError"


@pytest.mark.parametrize("reader", READERS)
@given(data=st.data())
def test_any_answer_is_a_value_or_a_protocol_error(reader: str, data: st.DataObject) -> None:
    verdict(reader, data.draw(mutated_answers(reader)))


@pytest.mark.parametrize("reader", READERS)
def test_an_answer_nested_100_000_deep_is_a_protocol_error_naming_the_answer(reader: str) -> None:
    with pytest.raises(ProtocolError, match="not JSON \\(nested deeper than 256\\)"):
        READERS[reader]("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize(
    "data", [b'{"results":[]}\xff', b'\xef\xbb\xbf{"results":[]}', b'{"results":["\xed\xa0\x80"]}']
)
def test_a_rerank_answer_that_is_not_utf8_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError, match=r"^POST /rerank answered something that is not JSON"):
        read_ranked(data, DOCS, None)
