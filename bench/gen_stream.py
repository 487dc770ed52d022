"""A seeded generator of a large llama-server-shaped chat-completion event stream.

Run:
    python bench/gen_stream.py -o /tmp/stream.sse                 # the SSE body, 20,000 chunks
    python bench/gen_stream.py --http -o /tmp/stream.http         # as a recorded HTTP response
    python -m llamafast replay /tmp/stream.http                   # ... which replay can show

Every chunk is shaped like those in fixtures/http (same field order, the full nine-field
`timings` object that `timings_per_token` adds, `prompt_progress` on progress chunks, non-ASCII
text as raw UTF-8 and control characters as `\\u00XX` like the server's JSON writer), in the
order a reasoning model with a tool produces them: prompt progress, one role-only chunk,
reasoning deltas, answer deltas with multi-byte text, one tool call in many pieces, the finish
chunk, `data: [DONE]`. The same seed gives the same bytes.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
from collections.abc import Iterator

CHUNKS = 20_000
MIN_CHUNKS = 20
SEED = 20_250_101
PROGRESS_STEP = 64  # tokens per prompt-processing batch, as `-b 64 -ub 64` in the recordings

# Answer tokens: ASCII words mixed with accented letters, Greek, Cyrillic, CJK and emoji, and
# the characters JSON must escape (quote, backslash, newline, tab, a control character).
WORDS = (
    "the",
    " model",
    " answer",
    " is",
    ",",
    ".",
    " café",
    " naïve",
    " über",
    " señor",
    " Ελληνικά",
    " привет",
    " 日本語",
    "の",
    " 中文",
    "字",
    " 한국어",
    " 😀",
    " 🚀",
    "🧪",
    ' "quoted"',
    " back\\slash",
    "\n",
    "\t",
    "\x0f",
    "\ufffd",
)
REASONING_WORDS = ("Let", " me", " think", " about", " the", " file", " path", ".", "\n", " é")
ARGUMENT_PIECES = ('"', "path", '"', ":", " ", '"', "src/", "données", "/", "文件", ".txt", ",")


def _json(value: str) -> str:
    """A JSON string as llama-server writes it: raw UTF-8, `\\u00XX` for control characters."""
    return json.dumps(value, ensure_ascii=False)


class _Clock:
    """The `timings` object of `timings_per_token`: nine fields, in the server's order."""

    def __init__(self, rng: random.Random, cache_n: int) -> None:
        self.rng = rng
        self.cache_n = cache_n
        self.prompt_n = 0
        self.prompt_ms = 0.0
        self.predicted_n = 0
        self.predicted_ms = 0.0

    def prompt(self, tokens: int) -> None:
        self.prompt_n += tokens
        self.prompt_ms += tokens * self.rng.uniform(0.06, 0.1)

    def token(self) -> None:
        self.predicted_n += 1
        self.predicted_ms += self.rng.uniform(0.3, 0.8)

    def json(self) -> str:
        pn, pms, dn, dms = self.prompt_n, self.prompt_ms, self.predicted_n, self.predicted_ms
        return (
            f'{{"cache_n":{self.cache_n},"prompt_n":{pn},"prompt_ms":{pms!r},'
            f'"prompt_per_token_ms":{pms / pn if pn else 0.0!r},'
            f'"prompt_per_second":{1e3 * pn / pms if pms else 0.0!r},'
            f'"predicted_n":{dn},"predicted_ms":{dms!r},'
            f'"predicted_per_token_ms":{dms / dn if dn else 0.0!r},'
            f'"predicted_per_second":{1e3 * dn / dms if dms else 0.0!r}}}'
        )


def payloads(chunks: int = CHUNKS, seed: int = SEED) -> Iterator[str]:
    """The `chunks` data payloads of one response (without `[DONE]`), as JSON text."""
    # 20 is the shortest stream with a chunk of every kind (bench/request's short turns); from
    # 100 on the tool call's arguments come in pieces too.
    if chunks < MIN_CHUNKS:
        raise ValueError(f"chunks must be at least {MIN_CHUNKS}, not {chunks}")
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    completion_id = "chatcmpl-" + "".join(rng.choices(alphabet, k=32))
    call_id = "".join(rng.choices(alphabet, k=32))
    created = 1_796_213_995
    # The mix: 1% prompt progress, then reasoning 30%, answer 50%, the tool call the rest.
    progress = max(1, chunks // 100)
    reasoning = chunks * 30 // 100
    content = chunks * 50 // 100
    tool = chunks - progress - 2 - reasoning - content
    cache = rng.randrange(0, 512)
    total = cache + (progress - 1) * PROGRESS_STEP
    clock = _Clock(rng, cache)
    tail = (
        f',"created":{created},"id":"{completion_id}","model":"tiny.gguf",'
        '"system_fingerprint":"b0-unknown","object":"chat.completion.chunk","timings":'
    )

    def chunk(delta: str, finish: str = "null", progress_json: str = "") -> str:
        return (
            f'{{"choices":[{{"finish_reason":{finish},"index":0,"delta":{delta}}}]'
            f"{tail}{clock.json()}{progress_json}}}"
        )

    role = '{"role":"assistant","content":null}'
    for step in range(progress):  # the first reports the cached tokens, the last all of them
        processed = cache + step * PROGRESS_STEP
        if step:
            clock.prompt(PROGRESS_STEP)
        yield chunk(
            role,
            progress_json=(
                f',"prompt_progress":{{"total":{total},"cache":{cache},'
                f'"processed":{processed},"time_ms":{int(clock.prompt_ms)}}}'
            ),
        )
    clock.token()
    yield chunk(role)
    for _ in range(reasoning):
        clock.token()
        yield chunk(f'{{"reasoning_content":{_json(rng.choice(REASONING_WORDS))}}}')
    for _ in range(content):
        clock.token()
        yield chunk(f'{{"content":{_json(rng.choice(WORDS))}}}')
    clock.token()
    yield chunk(
        f'{{"tool_calls":[{{"index":0,"id":"{call_id}","type":"function",'
        f'"function":{{"name":"read_file","arguments":"{{"}}}}]}}'
    )
    for _ in range(tool - 1):
        clock.token()
        piece = _json(rng.choice(ARGUMENT_PIECES))
        yield chunk(f'{{"tool_calls":[{{"index":0,"function":{{"arguments":{piece}}}}}]}}')
    clock.token()
    yield chunk("{}", finish='"tool_calls"')


def sse(chunks: int = CHUNKS, seed: int = SEED) -> bytes:
    """The response body: `data: <payload>` lines, each followed by a blank line, then [DONE]."""
    body = "".join(f"data: {p}\n\n" for p in payloads(chunks, seed)) + "data: [DONE]\n\n"
    return body.encode("utf-8")


def http(body: bytes, piece: int = 512) -> bytes:
    """`body` as llama-server's whole HTTP response: head, then chunked transfer encoding."""
    head = (
        b"HTTP/1.1 200 OK\r\nServer: llama.cpp\r\nAccess-Control-Allow-Origin: \r\n"
        b"X-Accel-Buffering: no\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    parts = [head]
    for i in range(0, len(body), piece):
        part = body[i : i + piece]
        parts.append(b"%x\r\n%s\r\n" % (len(part), part))
    parts.append(b"0\r\n\r\n")
    return b"".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=CHUNKS, help=f"data chunks (default {CHUNKS})")
    ap.add_argument("--seed", type=int, default=SEED, help="random seed")
    ap.add_argument("--http", action="store_true", help="wrap as a chunked HTTP/1.1 response")
    ap.add_argument("-o", "--output", help="the file to write (default: stdout)")
    args = ap.parse_args(argv)
    data = sse(args.chunks, args.seed)
    if args.http:
        data = http(data)
    if args.output:
        with open(args.output, "wb") as file:
            file.write(data)
    else:
        sys.stdout.buffer.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
