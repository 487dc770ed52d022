"""Payloads parsed as strictly as simdjson parses them (docs/assembler.md, rule STRICT-JSON),
with the standard library's json: the pure assembler parses each chunk with `parse`, the Cython
one asks it about the payloads its parser rejects for their depth, and `ToolCall.parse_arguments`
parses arguments with it. It imports no other module of the package but `_limits`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, Final

from ._limits import JSON_INT_MAX, JSON_INT_MIN, MAX_DEPTH

__all__ = ["parse", "reject_constant"]

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
# Only a payload that shows one of them pays for the exact check (integer and float hooks, or a
# walk of the parsed value); strings that merely look like that pass the exact check.

_MARKS: Final = bytes.maketrans(b"0123456789ED[", b"0000000000ed{")
_DIGIT_RUN: Final = b"0" * 19
_LONG_EXPONENT: Final = b"e000"
_SURROGATE_ESCAPE: Final = b"\\ud"
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


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


def parse(text: str, raw: bytes) -> Any:
    """`text` (whose UTF-8 is `raw`) parsed as strictly as simdjson would; ValueError if not."""
    marks = raw.translate(_MARKS, b"+-")
    if _DIGIT_RUN in marks or _LONG_EXPONENT in marks:
        value = _CHECKED.decode(text)
    else:
        try:
            value, end = _SCAN(text, 0)  # the C scanner alone: no Python frame on the way
        except StopIteration:
            end = -1
        if end != len(text):  # white space around it, or not JSON: the full, reporting path
            value = _DECODER.decode(text)
    if len(marks) > 2 * MAX_DEPTH and marks.count(b"{") > MAX_DEPTH:
        if _depth(value) > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH}")
    if _SURROGATE_ESCAPE in marks and _has_lone_surrogate(value):
        raise ValueError("a lone surrogate escape")
    return value


def _depth(value: Any) -> int:
    """How deep objects and arrays nest in `value` (a scalar is 0); iterative, any depth."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, level)
        # only the containers go on the stack: a tuple per number of a long list of them would
        # cost time and leave the allocator's heap fragmented (an embeddings answer of numbers)
        stack.extend((child, level + 1) for child in node if isinstance(child, (dict, list)))
    return deepest


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
        elif isinstance(node, list):
            stack.extend(node)
    return False
