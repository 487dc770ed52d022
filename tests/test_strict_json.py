# The strict JSON reader (docs/assembler.md, rule STRICT-JSON) at any depth: the depth is counted
# before json parses, so a payload nested thousands deep is refused for its depth, in the same
# words, whatever the caller's stack; and the whole-answer reader (`parse_answer`) holds a text
# or its bytes to the same rules.
"""_strict_json.parse and parse_answer: the nesting bound without recursion, and their verdicts."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import pytest

from llamafast import ProtocolError, ToolCall
from llamafast._limits import MAX_DEPTH
from llamafast._strict_json import parse, parse_answer, too_deep

DEPTHS = [MAX_DEPTH + 1, 1000, 5000, 100_000]


def arrays(depth: int) -> str:
    return "[" * depth + "]" * depth


def objects(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def mixed(depth: int) -> str:
    half = depth // 2
    return '[{"k":' * half + ("[0]" if depth % 2 else "0") + "}]" * half


SHAPES: dict[str, Callable[[int], str]] = {"arrays": arrays, "objects": objects, "mixed": mixed}


def at_stack_depth(frames: int, do: Callable[[], Any]) -> Any:
    """`do()` called `frames` Python frames down, so a verdict that leans on the stack shows."""
    if frames:
        return at_stack_depth(frames - 1, do)
    return do()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("depth", DEPTHS)
def test_a_payload_nested_past_the_bound_is_value_error_at_any_depth(
    shape: str, depth: int
) -> None:
    text = SHAPES[shape](depth)
    with pytest.raises(ValueError, match=f"^nested deeper than {MAX_DEPTH}$"):
        parse(text, text.encode())


@pytest.mark.parametrize("frames", [0, sys.getrecursionlimit() // 2])
def test_the_depth_verdict_does_not_lean_on_the_caller_s_stack(frames: int) -> None:
    text = arrays(3000)

    def verdict() -> str:
        try:
            parse(text, text.encode())
        except ValueError as err:
            return str(err)
        return "accepted"

    assert at_stack_depth(frames, verdict) == f"nested deeper than {MAX_DEPTH}"


def test_exactly_the_bound_is_accepted_and_brackets_in_strings_do_not_count() -> None:
    text = arrays(MAX_DEPTH)
    assert parse(text, text.encode()) is not None
    inside = '["' + "[" * 5000 + '", "\\"' + "{" * 5000 + '"]'  # text, with an escaped quote
    assert parse(inside, inside.encode()) == ["[" * 5000, '"' + "{" * 5000]


@pytest.mark.parametrize("bound", [1, MAX_DEPTH, 512])
def test_too_deep_counts_the_brackets_outside_strings_against_its_bound(bound: int) -> None:
    # The one depth check (serve's bound too, docs/cli.md): exactly `bound` passes, one more not,
    # arrays or objects, brackets inside strings (an escaped quote too) not counted, any depth.
    assert not too_deep(arrays(bound).encode(), bound)
    assert too_deep(arrays(bound + 1).encode(), bound)
    objects = ('{"a":' * (bound + 1) + "1" + "}" * (bound + 1)).encode()
    assert too_deep(objects, bound) and not too_deep(objects, bound + 1)
    inside = ('["' + "[" * 5000 + '", "\\"' + "{" * 5000 + '"]').encode()
    assert not too_deep(inside, bound)
    assert too_deep(b"[" * 100_000, bound)  # unclosed, and past Python's recursion


@pytest.mark.parametrize(
    "data, reason",
    [
        (arrays(4000), "nested deeper than 256"),
        (arrays(4000).encode(), "nested deeper than 256"),
        ("1" * 400, "out of range"),
        (b'{"a": 1e400}', "out of range"),
        ('{"a": NaN}', "NaN is not JSON"),
        ("[-Infinity]", "-Infinity is not JSON"),
        ('["\\ud800"]', "a lone surrogate escape"),
        ('{"a": "\\ud800", "a": 1}', "a lone surrogate escape"),  # hidden by the last "a"
        ('{"\\udc00": 1, "\\udc00": 2}', "a lone surrogate escape"),
        ('["\ud800"]', "a lone surrogate"),
        (b'["\xed\xa0\x80"]', "not UTF-8"),
        (b'["\xff"]', "not UTF-8"),
        (b"\xef\xbb\xbf{}", "Expecting value"),  # a BOM is not JSON
        ("", "Expecting value"),
    ],
)
def test_a_whole_answer_that_is_not_strict_json_is_value_error(data: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_answer(data)


def test_a_whole_answer_may_be_text_or_bytes() -> None:
    text = ' {"a": [1, 2.5, "\\ud83e\\udd14", null], "b": 18446744073709551615} '
    want = {"a": [1, 2.5, "\U0001f914", None], "b": 2**64 - 1}
    assert parse_answer(text) == want
    assert parse_answer(text.encode()) == want


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_a_chunk_nested_thousands_deep_is_refused_alike_by_both_twins(
    impl: types.SimpleNamespace, depth: int
) -> None:
    text = '{"choices":[{"delta":{"content":"x"}}],"deep":' + arrays(depth) + "}"
    with pytest.raises(ProtocolError, match=r"^the chunk is not valid JSON \(nested deeper"):
        impl.Assembler().push(text)


def test_tool_arguments_nested_thousands_deep_are_refused_for_their_depth() -> None:
    with pytest.raises(ProtocolError, match="nested deeper than 256"):
        ToolCall("c1", "f", arrays(20_000)).parse_arguments()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("checked", [False, True], ids=["plain", "checked"])
def test_a_payload_within_the_bound_is_read_on_a_deep_stack(shape: str, checked: bool) -> None:
    # within MAX_DEPTH the value is read however deep the caller's stack already is (on 3.11
    # json counts the caller's frames: 800 of them and 256 levels were a RecursionError)
    text = SHAPES[shape](MAX_DEPTH)
    if checked:  # a 19-digit run sends the payload through the range-checking decoder
        text = SHAPES[shape](MAX_DEPTH - 1)
        text = f"[{text},1234567890123456789]"
    expected = parse(text, text.encode())
    assert at_stack_depth(sys.getrecursionlimit() - 200, lambda: parse(text, text.encode())) == (
        expected
    )
