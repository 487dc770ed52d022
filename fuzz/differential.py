"""Differential fuzzing: the Cython twin must do exactly what the pure twin does.

Four targets, each case run through both twins and compared:

  sse       byte streams (SSE-shaped, raw, and the recordings' bodies mutated byte by byte), split
            at random points, through every entry point of the reader (SseDecoder, Events over
            each kind of reader, iter_events, aiter_events): the same items, the same error class
            and args, the same latching.
  assemble  sequences of payloads (generated chunks, and the recordings' payloads mutated byte by
            byte and with strict-JSON edge cases spliced in), pushed as str or bytes: the same
            events, state, Completion, error class and message.
  chat      whole bodies (the recordings, mutated by line and by byte) read by both ChatStreams
            and aiter_chat, split at random: the same events, state and Completion or error.
  http      whole responses (generated status lines, fields, Content-Length and
            Transfer-Encoding values, chunked framing and interim heads, and the recordings
            mutated byte by byte) through both ResponseParsers at random splits and buffer sizes,
            the body on to both Sinks: the same head, body, events and error, every error ours,
            and the parser's result the same however the bytes are split.

The generators and the comparisons are those of tests/test_sse_differential.py,
tests/test_assemble_differential.py, tests/test_http_differential.py and tests/_sse_feed.py;
this file adds the byte-level mutations of the recorded fixtures and the two ways to run:

  python fuzz/differential.py --seconds 150
      hypothesis, time-bounded, new random cases every run (.ci/sanitize runs this under
      AddressSanitizer); a failure prints the smallest failing case hypothesis found.
  python fuzz/differential.py --atheris [libFuzzer options, corpus directories]
      coverage-guided by atheris (pip install atheris) over the pure twin's branches, with a seed
      corpus made from fixtures/http; runs until stopped or -max_total_time=SECONDS.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "corpus"
COUNTS: Counter[str] = Counter()

# Bytes that matter to one of the parsers: line ends, the field name, JSON structure, the BOM,
# invalid and multi-byte UTF-8.
INTERESTING = [
    b"\r", b"\n", b"\r\n", b"\n\n", b"data: ", b"data:", b":", b"[DONE]", b'"', b"\\", b"{",
    b"}", b"[", b"]", b",", b"\\u0000", b"\\ud800", b"\xef\xbb\xbf", b"\xff", b"\x80", b"\xc3",
    b"\xe2\x82", b"\xed\xa0\x80", "é€😀".encode(), b"\x00", b"0", b"-", b"1e400", b" ",
]  # fmt: skip


def mutate_bytes(rng: random.Random, data: bytes, edits: int) -> bytes:
    """`data` with `edits` random edits: a byte replaced, bytes inserted, a range deleted or
    repeated, or the end cut off."""
    out = bytearray(data)
    for _ in range(edits):
        at = rng.randrange(len(out) + 1)
        kind = rng.randrange(6)
        if kind == 0 and out and at < len(out):
            out[at] = rng.randrange(256)
        elif kind == 1:
            out[at:at] = rng.choice(INTERESTING)
        elif kind == 2:
            del out[at : at + rng.randrange(1, 16)]
        elif kind == 3:
            out[at:at] = out[at : at + rng.randrange(1, 64)]
        elif kind == 4:
            del out[at:]
        else:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
    return bytes(out)


# Set by setup(): the twins' namespaces (as the tests' `impl` fixture makes them) and the test
# modules whose generators and comparisons the targets reuse.
PY: Any = None
C: Any = None
SSE_FEED: Any = None
ASM_T: Any = None
HTTP_T: Any = None


def setup() -> None:
    global PY, C, SSE_FEED, ASM_T, HTTP_T
    sys.path.insert(0, str(ROOT / "tests"))
    import _sse_feed
    import test_assemble_differential
    import test_http_differential
    from llamafast._engine import _twins

    if _twins.CYTHON is None:
        raise SystemExit(f"fuzz: {_twins.CYTHON_MISSING}: nothing to compare the pure twin with")
    PY, C = _twins.PURE, _twins.CYTHON
    SSE_FEED, ASM_T, HTTP_T = _sse_feed, test_assemble_differential, test_http_differential


def bodies() -> dict[str, bytes]:
    return ASM_T.BODIES


def recorded_payloads() -> dict[str, list[bytes]]:
    """Each recording's data payloads, in order, as the server sent them."""
    out = {}
    for name, body in bodies().items():
        lines = body.replace(b"\r\n", b"\n").split(b"\n")
        out[name] = [ln[6:] for ln in lines if ln.startswith(b"data: ") and ln != b"data: [DONE]"]
    return {name: p for name, p in out.items() if p}


# --- the comparisons (one case, both twins) ----------------------------------------------


def check_sse(chunks: list[bytes], max_line: int) -> None:
    COUNTS["sse"] += 1
    want = SSE_FEED.outcomes(PY, chunks, max_line)
    got = SSE_FEED.outcomes(C, chunks, max_line)
    assert got == want, (chunks, max_line)


def check_assemble(payloads: list[str | bytes]) -> None:
    COUNTS["assemble"] += 1
    ASM_T.assert_same_assembly(PY, C, payloads)


def check_chat(body: bytes, sizes: list[int], max_line: int) -> None:
    COUNTS["chat"] += 1
    want = ASM_T.run_chat(PY, ASM_T.Pieces(body, sizes), max_line)
    assert ASM_T.run_chat(C, ASM_T.Pieces(body, sizes), max_line) == want, (sizes, max_line)
    reader = ASM_T.Pieces(body, sizes)
    pieces = [bytes(p) for p in iter(lambda: reader.read(65536), b"")]
    want = ASM_T.run_async_chat(PY, pieces, max_line)
    assert ASM_T.run_async_chat(C, pieces, max_line) == want, (sizes, max_line)


def check_http(raw: bytes, cuts: list[int], size: int, max_line: int) -> None:
    COUNTS["http"] += 1
    HTTP_T.assert_twins_agree(raw, cuts, size, max_line)


def as_str_or_bytes(payload: bytes, as_str: bool) -> str | bytes:
    # surrogateescape: a payload that is not UTF-8 becomes a str holding lone surrogates,
    # which both twins must refuse alike
    return payload.decode("utf-8", "surrogateescape") if as_str else payload


# --- hypothesis: time-bounded -----------------------------------------------------------


def hypothesis_targets(batch: int, shrink: bool) -> list[tuple[str, Callable[[], None]]]:
    """Each target, as a function that runs `batch` new random cases."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    import test_sse_differential as sse_t

    names = sorted(bodies())
    payloads = recorded_payloads()

    @st.composite
    def mutated_body(draw: st.DrawFn) -> bytes:
        """A window of a recording's body (headers stripped by http.client), mutated."""
        body = bodies()[draw(st.sampled_from(names))]
        if draw(st.integers(0, 4)):
            start = draw(st.integers(0, len(body)))
            body = body[start : start + draw(st.integers(0, 4000))]
        rng = random.Random(draw(st.integers(0, 2**32)))
        return mutate_bytes(rng, body, draw(st.integers(0, 6)))

    @st.composite
    def mutated_payloads(draw: st.DrawFn) -> list[str | bytes]:
        """A run of a recording's payloads, some mutated byte by byte or with a strict-JSON
        edge case spliced in, each pushed as str or bytes."""
        seq = payloads[draw(st.sampled_from(sorted(payloads)))]
        start = draw(st.integers(0, len(seq) - 1))
        window = seq[start : start + draw(st.integers(1, 8))]
        if draw(st.booleans()):  # the stream's last chunk, for a Completion now and then
            window = [*window, seq[-1]]
        rng = random.Random(draw(st.integers(0, 2**32)))
        out: list[str | bytes] = []
        for p in window:
            kind = rng.randrange(4)
            if kind == 1:
                p = mutate_bytes(rng, p, rng.randrange(1, 4))
            elif kind == 2:
                at = rng.randrange(len(p) + 1)
                p = p[:at] + rng.choice(ASM_T.EDGE_VALUES).encode() + p[at:]
            out.append(as_str_or_bytes(p, rng.random() < 0.5))
        return out

    @st.composite
    def chat_case(draw: st.DrawFn) -> tuple[bytes, list[int], int]:
        body, sizes, max_line = draw(ASM_T.chat_inputs())
        if draw(st.integers(0, 2)) == 0:
            body = mutate_bytes(random.Random(draw(st.integers(0, 2**32))), body, 3)
        return body, sizes, max_line

    quiet = settings(
        max_examples=batch,
        # Shrinking a failure can take minutes; a time-bounded run reports the case as found
        # (with the blob that replays it) unless asked to shrink.
        phases=[Phase.explicit, Phase.generate, *([Phase.shrink] if shrink else [])],
        database=None,
        deadline=None,
        derandomize=False,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )

    @quiet
    @given(
        data=st.data(),
        stream=st.one_of(sse_t.STREAM, sse_t.RAW, mutated_body()),
        max_line=sse_t.MAX_LINE,
    )
    def sse(data: st.DataObject, stream: bytes, max_line: int) -> None:
        check_sse(data.draw(sse_t.splits(stream)), max_line)

    @quiet
    @given(
        payloads=st.one_of(
            ASM_T.payload_sequences(), ASM_T.well_formed_streams(), mutated_payloads()
        )
    )
    def assemble(payloads: list[str | bytes]) -> None:
        check_assemble(payloads)

    @quiet
    @given(case=chat_case())
    def chat(case: tuple[bytes, list[int], int]) -> None:
        check_chat(*case)

    @quiet
    @given(
        raw=st.one_of(HTTP_T.response(), HTTP_T.mutated_recording()),
        data=st.data(),
        size=HTTP_T.SIZES,
        max_line=HTTP_T.MAX_LINES,
    )
    def http(raw: bytes, data: st.DataObject, size: int, max_line: int) -> None:
        check_http(raw, data.draw(HTTP_T.cuts_for(raw)), size, max_line)

    return [("sse", sse), ("assemble", assemble), ("chat", chat), ("http", http)]


def run_hypothesis(seconds: float, batch: int, shrink: bool) -> None:
    targets = hypothesis_targets(batch, shrink)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _name, target in targets:
            target()
            if time.monotonic() >= deadline:
                break


# --- atheris: coverage-guided ---------------------------------------------------------------

MAX_LINES = [1 << 20, 600, 64, 7]


def one_input(data: bytes) -> None:
    """One atheris input: byte 0 picks the target, bytes 1-3 seed the split points, the
    max_line, str-or-bytes and the buffer size; the rest is the stream (sse, chat), the
    payloads, one a line (assemble), or the whole response (http)."""
    if len(data) < 4:
        return
    target = data[0] % 4
    rng = random.Random(int.from_bytes(data[1:4], "little"))
    rest = data[4:]
    max_line = MAX_LINES[data[1] % len(MAX_LINES)]
    if target == 0:
        cuts = [rng.randrange(len(rest) + 1) for _ in range(rng.randrange(8))]
        check_sse(SSE_FEED.chunks_of(rest, cuts), max_line)
    elif target == 1:
        check_assemble([as_str_or_bytes(p, rng.random() < 0.5) for p in rest.split(b"\n")])
    elif target == 2:
        check_chat(rest, [rng.randrange(1, 700) for _ in range(rng.randrange(4))], max_line)
    else:
        cuts = [rng.randrange(len(rest) + 1) for _ in range(rng.randrange(8))]
        check_http(rest, cuts, rng.choice([24, 64, 257, 4096, 1 << 16]), max_line)


def seed_corpus() -> None:
    """fuzz/corpus/: each recording as an sse case, a chat case, an http case (the whole
    response) and its payloads as an assemble case (kept between runs: atheris adds what it
    finds)."""
    CORPUS.mkdir(exist_ok=True)
    for name, body in bodies().items():
        (CORPUS / f"sse-{name}").write_bytes(bytes([0, 0, 0, 0]) + body[:20000])
        (CORPUS / f"chat-{name}").write_bytes(bytes([2, 0, 0, 0]) + body[:20000])
    for name, raw in HTTP_T.RECORDINGS.items():
        (CORPUS / f"http-{name}").write_bytes(bytes([3, 0, 0, 0]) + raw[:20000])
    for name, seq in recorded_payloads().items():
        (CORPUS / f"assemble-{name}").write_bytes(bytes([1, 0, 0, 0]) + b"\n".join(seq[:40]))


def run_atheris(argv: list[str]) -> None:
    import atheris

    seed_corpus()
    args = [sys.argv[0], *argv]
    if not any(not a.startswith("-") for a in argv):
        args.append(str(CORPUS))

    def test_one_input(data: bytes) -> None:
        try:
            one_input(data)
        except AssertionError:
            print(f"fuzz: the twins disagree on {data!r}", file=sys.stderr)
            raise

    atheris.Setup(args, test_one_input)
    atheris.Fuzz()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="hypothesis mode: how long")
    parser.add_argument("--batch", type=int, default=100, help="examples per hypothesis run")
    parser.add_argument("--shrink", action="store_true", help="hypothesis mode: shrink failures")
    parser.add_argument("--atheris", action="store_true", help="coverage-guided, by atheris")
    args, rest = parser.parse_known_args()
    if args.atheris:
        import atheris

        with atheris.instrument_imports(include=["llamafast"]):
            import llamafast.pure  # noqa: F401  (its branches guide the fuzzer)
    setup()
    if args.atheris:  # libFuzzer prints its own counts ("Done N runs") and exits the process
        run_atheris(rest)
        return
    if rest:
        parser.error(f"unknown arguments {rest}")
    started = time.monotonic()
    try:
        run_hypothesis(args.seconds, args.batch, args.shrink)
    finally:
        took = time.monotonic() - started
        counts = ", ".join(f"{k} {COUNTS[k]}" for k in ("sse", "assemble", "chat", "http"))
        print(f"fuzz: {counts} cases, each through both twins, in {took:.0f} s")


if __name__ == "__main__":
    main()
