"""Payloads parsed as strictly as simdjson parses them (docs/assembler.md, rule STRICT-JSON),
with the standard library's json: the pure assembler parses each chunk with `parse`, the Cython
one asks it about the payloads its parser rejects for their depth, and `ToolCall.parse_arguments`
parses arguments with it; every whole answer of the server (/slots, /props, /models, counts,
control, rerank) is read by `parse_answer`, which is `parse` for a text or its UTF-8. It imports
no other module of the package but `_limits`.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable
from itertools import accumulate, repeat
from operator import sub
from typing import Any, Final

from ._limits import JSON_INT_MAX, JSON_INT_MIN, MAX_DEPTH

__all__ = ["parse", "parse_answer", "reject_constant", "too_deep"]

# --- strict JSON (docs/assembler.md, rule STRICT-JSON) -----------------------------------------
# json.loads accepts NaN/Infinity, integers of any size, floats that overflow to inf, lone
# surrogate escapes and any nesting Python's stack allows; simdjson rejects all of them.
# NaN/Infinity go through parse_constant, which costs nothing on valid input. For the rest, one
# translate of the payload's bytes marks what could be a problem: digits become "0", "E" "e",
# "D" "d", "[" "{", and signs vanish. Then:
#   "0" * 19     a run of 19 digits: an integer beyond int64/uint64 needs one, and so does a
#                float that overflows without an exponent (309 digits);
#   "e000"       an exponent of 3 or more digits: every other float is below 1e117;
#   "\\ud"       a \uDxxx escape, the only way to write a surrogate in valid UTF-8;
#   "{" * 257    more than MAX_DEPTH opening brackets, needed to nest that deep.
# Only a payload that shows one of them pays for the exact check (integer and float hooks, the
# depth count, a walk of the parsed value); strings that merely look like that pass it.
# The depth is counted BEFORE json parses (json recurses once per level, so a payload some
# thousand deep would be a RecursionError whose depth depends on the caller's stack): the
# strings cut out of the bytes, the brackets left counted as a running sum, no recursion.

_MARKS: Final = bytes.maketrans(b"0123456789ED[", b"0000000000ed{")
_DIGIT_RUN: Final = b"0" * 19
_LONG_EXPONENT: Final = b"e000"
_SURROGATE_ESCAPE: Final = b"\\ud"
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
# A string to its closing quote (or to the end, when it has none: the payload is not JSON then,
# and the brackets after it are not counted); possessive, so one pass whatever the input.
_STRING: Final = re.compile(rb'"(?:[^"\\]|\\.)*+"?', re.DOTALL)
_BRACKET_STEPS: Final = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")  # minus 1: +1 or -1
_NOT_BRACKET: Final = bytes(b for b in range(256) if b not in b"[]{}")


def reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _int_in_range(text: str) -> int:
    value = int(text)
    if not JSON_INT_MIN <= value <= JSON_INT_MAX:
        raise ValueError(f"the integer {text[:40]} is out of range")
    return value


_DECODER: Final = json.JSONDecoder(parse_constant=reject_constant)
# The decoder's C scanner (typeshed does not declare the attribute): (text, index) -> (value, end).
_SCAN: Final[Callable[[str, int], tuple[Any, int]]] = _DECODER.scan_once  # type: ignore[attr-defined]
_CHECKED: Final = json.JSONDecoder(
    parse_constant=reject_constant, parse_float=_finite_float, parse_int=_int_in_range
)
# Every key and value, also those a repeated key hides from the parsed value (each object a
# list of pairs): where a surrogate escape is looked for, as simdjson checks every string.
_PAIRS: Final = json.JSONDecoder(parse_constant=reject_constant, object_pairs_hook=list)


def parse(text: str, raw: bytes) -> Any:
    """`text` (whose UTF-8 is `raw`) parsed as strictly as simdjson would; ValueError if not,
    at any depth (never RecursionError)."""
    marks = raw.translate(_MARKS, b"+-")
    if len(marks) > 2 * MAX_DEPTH and marks.count(b"{") > MAX_DEPTH and too_deep(raw, MAX_DEPTH):
        raise ValueError(f"nested deeper than {MAX_DEPTH}")
    decoder = _CHECKED if _DIGIT_RUN in marks or _LONG_EXPONENT in marks else None
    try:
        if decoder is not None:
            value = decoder.decode(text)
        else:
            try:
                value, end = _SCAN(text, 0)  # the C scanner alone: no Python frame on the way
            except StopIteration:
                end = -1
            if end != len(text):  # white space around it, or not JSON: the full, reporting path
                value = _DECODER.decode(text)
    except RecursionError:  # within MAX_DEPTH, but the caller's stack was already deep
        value = _on_a_fresh_stack(decoder or _DECODER, text)
    if _SURROGATE_ESCAPE in marks and _has_lone_surrogate(_every_string(text)):
        raise ValueError("a lone surrogate escape")
    return value


def _every_string(text: str) -> Any:
    """`text` (valid JSON within MAX_DEPTH) parsed with each object a list of pairs."""
    try:
        return _PAIRS.decode(text)
    except RecursionError:  # the caller's stack was already deep
        return _on_a_fresh_stack(_PAIRS, text)


def _on_a_fresh_stack(decoder: json.JSONDecoder, text: str) -> Any:
    """decoder.decode(text) on a thread of its own: Python counts recursion per thread, so a
    value within MAX_DEPTH is read whatever the depth of the caller's stack (CPython 3.11 counts
    the caller's frames against json's recursion; later versions count C frames alone)."""
    outcome: list[Any] = []

    def decode() -> None:
        try:
            outcome.append((True, decoder.decode(text)))
        except Exception as err:  # handed to the caller as it is
            outcome.append((False, err))

    worker = threading.Thread(target=decode, name="llamafast-json")
    worker.start()
    worker.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def parse_answer(data: str | bytes) -> Any:
    """A whole answer of the server, its text or its bytes (which must be UTF-8), parsed by
    `parse`; ValueError if it is not strict JSON (a lone surrogate, bytes that are not UTF-8)."""
    if isinstance(data, str):
        text = data
        try:
            raw = data.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a lone surrogate") from None
    else:
        raw = data
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"not UTF-8 ({err.reason})") from None
    return parse(text, raw)


def too_deep(raw: bytes, bound: int) -> bool:
    """Whether the brackets of `raw` outside its strings nest deeper than `bound` (for JSON, its
    nesting depth): a running sum of +1 per opening, -1 per closing one, in C loops (no
    recursion, any depth), so a text is refused for its depth before json recurses into it.
    `parse` checks MAX_DEPTH with it, `serve` its own bound (`_cli/_serve.MAX_DEPTH`)."""
    if raw.count(b"[") + raw.count(b"{") <= bound:  # too few brackets to nest that deep
        return False
    steps = _STRING.sub(b"", raw).translate(_BRACKET_STEPS, _NOT_BRACKET)
    if steps.count(2) <= bound:
        return False
    deepest: int = max(accumulate(map(sub, steps, repeat(1))))
    return deepest > bound


def _has_lone_surrogate(value: Any) -> bool:
    """Whether a key or string in `value` holds a surrogate: json leaves an escaped one lone
    (a valid pair becomes one character) and UTF-8 cannot carry one."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if not node.isascii() and _SURROGATE.search(node):
                return True
        elif isinstance(node, dict):
            stack.extend(node)
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return False
