"""Tool-call arguments parsed while they stream: what asking after every piece costs.

Run:
    python bench/partial_args.py                 # 7 interleaved rounds, medians, one table
    python bench/partial_args.py --rounds 15     # steadier on a noisy machine

The workload: a 100 KB argument (`{"path": ..., "content": <a long string with escapes>}`, as an
agent's write_file call) streamed in 3,000 pieces, its value asked for after every piece. Rows:

- incremental: PartialJson fed each piece, `value()` after each (what `partial_arguments` does),
  and fed only: the parse alone reads each character once; the rest is `value()` handing out
  a fresh str of the string still being read each time (a copy at memory speed, of a string
  that holds an emoji, so four bytes a character: the one part that grows with the length);
- assembler: the same through `Assembler.partial_arguments`, each piece pushed as a chunk
  (both twins; the push is timed too, and "push only" shows what it costs alone);
- one full parse: `json.loads` and `ToolCall.parse_arguments` of the whole text, once;
- re-parse, same parser: a fresh PartialJson over the whole prefix after every piece (the same
  answers, the way peers get them: O(n^2));
- re-parse, json.loads lower bound: after every piece, `json.loads` of the prefix with its
  closers handed over for free (the least any re-parsing peer can pay: C speed, O(n^2)).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import llamafast.pure
from llamafast import ToolCall
from llamafast._partial_json import PartialJson

PIECES = 3_000
SIZE = 100_000


def document(size: int = SIZE) -> str:
    text = 'The quick brown fox says \\"h\\u00e9llo\\" \\ud83e\\udd99 and jumps.\\n' * (
        size // 60 + 1
    )
    head = '{"path": "notes/fox.txt", "content": "'
    return head + text[: size - len(head) - 2].rstrip("\\u0123456789abcdef") + '"}'


def pieces(doc: str, count: int = PIECES) -> list[str]:
    cuts = [len(doc) * i // count for i in range(count + 1)]
    return [doc[a:b] for a, b in itertools.pairwise(cuts)]


def incremental(parts: list[str], ask: bool = True) -> Any:
    parser = PartialJson()
    for part in parts:
        parser.feed(part)
        if ask:
            parser.value()
    return parser.value(final=True)


def chunks(parts: list[str]) -> list[bytes]:
    first = {"index": 0, "id": "call_0", "function": {"name": "write_file", "arguments": ""}}
    out = [json.dumps({"id": "c", "choices": [{"delta": {"tool_calls": [first]}}]}).encode()]
    for part in parts:
        entry = {"index": 0, "function": {"arguments": part}}
        out.append(
            json.dumps({"id": "c", "choices": [{"delta": {"tool_calls": [entry]}}]}).encode()
        )
    out.append(b'{"choices":[{"finish_reason":"tool_calls"}]}')
    return out


def assembler(cls: Any, payloads: list[bytes], ask: bool) -> Any:
    asm = cls()
    value = None
    for payload in payloads:
        asm.push(payload)
        if ask:
            value = asm.partial_arguments(0)
    return value


def reparse_same_parser(parts: list[str]) -> Any:
    text = ""
    value = None
    for part in parts:
        text += part
        parser = PartialJson()
        parser.feed(text)
        value = parser.value()
    return value


_OPEN_ESCAPE = re.compile(
    r"\\(u[0-9a-fA-F]{0,3}|u[dD][89abAB][0-9a-fA-F]{2}(\\u?[0-9a-fA-F]{0,3})?)?$"
)


def reparse_json_lower_bound(parts: list[str]) -> Any:
    """json.loads of every prefix with the closers given for free (only the prefixes inside the
    content string are closed; the few others are skipped): no re-parse can cost less."""
    text = ""
    value = None
    inside = len('{"path": "notes/fox.txt", "content": "')
    for part in parts:
        text += part
        if len(text) <= inside or text.endswith('"}'):
            continue
        cut = len(text) - 13
        body = text[:cut] + _OPEN_ESCAPE.sub("", text[cut:])  # the tail alone is searched
        if (len(body) - len(body.rstrip("\\"))) % 2:
            body = body[:-1]
        value = json.loads(body + '"}')
    return value


def table(rounds: int) -> list[tuple[str, float]]:
    doc = document()
    parts = pieces(doc)
    payloads = chunks(parts)
    call = ToolCall("call_0", "write_file", doc)
    want = json.loads(doc)
    py = llamafast.pure.Assembler
    rows: list[tuple[str, Callable[[], Any]]] = [
        (f"incremental: {len(parts)} pieces, value() after each", lambda: incremental(parts)),
        ("incremental: the same, feed only (the parse alone)", lambda: incremental(parts, False)),
        ("assembler (python): push + partial_arguments", lambda: assembler(py, payloads, True)),
        ("assembler (python): push only", lambda: assembler(py, payloads, False)),
    ]
    try:
        from llamafast._engine._assemble_c import Assembler as Cy

        rows += [
            ("assembler (cython): push + partial_arguments", lambda: assembler(Cy, payloads, True)),
            ("assembler (cython): push only", lambda: assembler(Cy, payloads, False)),
        ]
    except ImportError:
        pass
    rows += [
        ("one full parse: json.loads", lambda: json.loads(doc)),
        ("one full parse: ToolCall.parse_arguments", call.parse_arguments),
        ("one full parse: PartialJson, one piece", lambda: incremental([doc])),
        ("re-parse every prefix, same parser (O(n^2))", lambda: reparse_same_parser(parts)),
        ("re-parse every prefix, json.loads lower bound", lambda: reparse_json_lower_bound(parts)),
    ]
    # every path gives the right answer before anything is timed
    assert incremental(parts) == want == call.parse_arguments()
    assert assembler(llamafast.pure.Assembler, payloads, True) == want
    assert reparse_same_parser(parts) == {"path": "notes/fox.txt", "content": want["content"]}
    times: dict[str, list[float]] = {label: [] for label, _ in rows}
    for _ in range(rounds):
        for label, fn in rows:
            start = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - start)
    return [(label, statistics.median(times[label])) for label, _ in rows]


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--rounds", type=int, default=7)
    opts = args.parse_args(argv)
    doc = document()
    print(f"{len(doc):,} characters in {len(pieces(doc)):,} pieces; medians of {opts.rounds}")
    rows = table(opts.rounds)
    base = dict(rows)["one full parse: json.loads"]
    for label, seconds in rows:
        print(f"{label:<52} {seconds * 1e3:10.2f} ms  {seconds / base:8.1f}x json.loads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
