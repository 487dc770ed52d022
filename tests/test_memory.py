"""Memory: what ChatStream holds does not grow with the stream, and max_line bounds
what one line can make it buffer.

Each measurement runs in a fresh interpreter (the process's peak RSS is its own, and it counts
the C buffers of the Cython twin, which tracemalloc cannot see): a reader generates a
llama-server-shaped body lazily (a 64 KiB block of whole chunks served again and again, never the
whole body), the stream is iterated to its end, and the child reports its RSS before streaming
and its peak RSS after. The Cython twin streams 256 MiB; the pure twin, about 15 times slower,
streams 32 MiB (its memory behaviour does not depend on the length either, as the short/long
comparison shows).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types

import pytest

MiB = 1 << 20

CHILD = textwrap.dedent(
    r"""
    import gc, json, resource, sys, time

    impl, mode, size, max_line = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    from llamafast._engine import _twins

    twin = _twins.CYTHON if impl == "cython" else _twins.PURE
    ChatStream, Events = twin.ChatStream, twin.Events
    from llamafast import LineTooLongError, Progress

    def chunk(i):
        # a progress chunk as the server sends it, with every timing field and an unknown one:
        # one Progress event, nothing that the completion keeps
        return (
            '{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant",'
            '"content":null}}],"created":1,"id":"chatcmpl-mem","model":"tiny.gguf",'
            '"object":"chat.completion.chunk","timings":{"cache_n":0,"prompt_n":%d,'
            '"prompt_ms":1006.57,"prompt_per_token_ms":0.079,"prompt_per_second":12652.8,'
            '"predicted_n":0,"predicted_ms":0.0,"predicted_per_token_ms":0.0,'
            '"predicted_per_second":0.0},"prompt_progress":{"total":1000000,"cache":0,'
            '"processed":%d,"time_ms":370},"padding":"%s"}' % (i, i, "x" * 64)
        )

    lines, n = [], 0
    while n < 60000:
        line = ("data: " + chunk(len(lines)) + "\n\n").encode()
        lines.append(line)
        n += len(line)
    block = b"".join(lines)
    tail = (
        b'data: {"choices":[{"delta":{"content":"done"},"finish_reason":"stop"}],'
        b'"id":"chatcmpl-mem"}\n\ndata: [DONE]\n\n'
    )
    x = b"x" * 65536

    def blocks(nbytes):
        # whole blocks (whole chunks), at least nbytes
        return -(-nbytes // len(block)) * len(block)

    if mode == "chunks":
        segments = [(block, blocks(size)), (tail, len(tail))]
    elif mode == "line":  # one line that never ends
        segments = [(b"data: ", 6), (b"a" * 65536, size)]
    else:  # "afterline"/"afterchunk": one long line (a chunk the assembler ignores), then 16 MiB
        # of chunks; read by Events alone, or by ChatStream (the reader and the assembler)
        head = b'data: {"choices":[{"delta":{}}],"id":"chatcmpl-mem","padding":"'
        end = b'"}\n\n'
        segments = [(head, len(head)), (x, size), (end, len(end)), (block, blocks(16 << 20))]
        segments.append((tail, len(tail)))

    class Lazy:
        # serves each segment's block again and again until its byte count has gone out:
        # never the whole body
        def __init__(self):
            self.sent = 0
            self.segments = [(memoryview(b), n) for b, n in segments]
            self.at = 0  # in the current block
            self.left = self.segments[0][1]  # bytes of the current segment still to send

        def readinto1(self, buf):
            while self.segments and self.left == 0:
                self.segments.pop(0)
                self.at = 0
                self.left = self.segments[0][1] if self.segments else 0
            if not self.segments:
                return 0
            view = self.segments[0][0]
            if self.at == len(view):
                self.at = 0
            n = min(len(buf), len(view) - self.at, self.left)
            buf[:n] = view[self.at : self.at + n]
            self.at += n
            self.left -= n
            self.sent += n
            return n

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    before = rss()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    reader = Lazy()
    # afterline measures the SSE reader alone (the assembler's parser has buffers of its own)
    stream = (Events if mode == "afterline" else ChatStream)(reader, max_line)
    t = time.perf_counter()
    events = 0
    error = None
    last = None
    try:
        for ev in stream:
            events += 1
            last = ev
    except LineTooLongError as err:
        error = type(err).__name__
    elapsed = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if error:
        content = None
    elif mode == "afterline":
        content = type(last).__name__  # the stream's last item: DONE
    else:
        content = stream.completion.content
    last = ev = None
    gc.collect()
    print(json.dumps({
        "before": before, "peak_before": peak_before, "peak": peak, "sent": reader.sent,
        "events": events, "error": error, "content": content, "elapsed": elapsed,
        "after": rss(),
    }))
    """
)


def measure(impl: str, mode: str, size: int, max_line: int = 1 << 20) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, impl, mode, str(size), str(max_line)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def growth(result: dict[str, object]) -> int:
    """How far the peak RSS rose above the RSS before streaming (0 if it stayed under)."""
    return max(0, int(result["peak"]) - max(int(result["before"]), int(result["peak_before"])))


def long_size(impl: types.SimpleNamespace) -> int:
    return 256 * MiB if impl.IMPLEMENTATION == "cython" else 32 * MiB


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_memory_does_not_grow_with_the_stream(impl: types.SimpleNamespace) -> None:
    size = long_size(impl)
    short = measure(impl.IMPLEMENTATION, "chunks", size // 16)
    long = measure(impl.IMPLEMENTATION, "chunks", size)
    for r, n in ((short, size // 16), (long, size)):
        assert r["content"] == "done" and r["error"] is None
        assert int(r["sent"]) >= n
        assert int(r["events"]) > n // 1000  # one Progress per ~650-byte chunk, and the text
    # bounded: a few MiB over the interpreter (the 64 KiB reads, one parser, the events in
    # flight), and the same for a stream 16 times longer
    assert growth(long) < 8 * MiB, long
    assert growth(long) < growth(short) + 2 * MiB, (short, long)
    if impl.IMPLEMENTATION == "cython":
        assert float(long["elapsed"]) < 120, long  # 256 MiB: a few seconds; a hang guard only


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("max_line", [1 << 20, 8 << 20])
def test_max_line_bounds_what_one_line_buffers(impl: types.SimpleNamespace, max_line: int) -> None:
    """One line that never ends: LineTooLongError once max_line is passed, having read (and
    buffered) about max_line bytes, not the 256 MiB on offer."""
    r = measure(impl.IMPLEMENTATION, "line", long_size(impl), max_line)
    assert r["error"] == "LineTooLongError"
    assert int(r["sent"]) <= max_line + 2 * 65536  # it stopped reading right after the limit
    assert growth(r) < 3 * max_line + 4 * MiB, r


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_a_long_line_is_not_kept(impl: types.SimpleNamespace) -> None:
    """After one very long line the reader's buffer goes back to its normal size: what the
    process holds once the stream has gone on past it is a few MiB over what it held before,
    not the line (the Cython twin used to keep its largest buffer for as long as the stream
    lived)."""
    line = 128 * MiB if impl.IMPLEMENTATION == "cython" else 32 * MiB
    r = measure(impl.IMPLEMENTATION, "afterline", line, max_line=line + MiB)
    assert r["content"] == "Done" and r["error"] is None
    assert int(r["peak"]) - int(r["before"]) > line  # the line was held, while it was read
    assert int(r["after"]) - int(r["before"]) < 8 * MiB, r


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_a_long_chunk_is_not_kept(impl: types.SimpleNamespace) -> None:
    """After one very long chunk the assembler's parser goes back to its normal size too: the
    fused stream holds a few MiB more than before once it has gone on past the chunk, not the
    parser's buffers for it (simdjson's parser keeps the capacity of its largest document)."""
    line = 128 * MiB if impl.IMPLEMENTATION == "cython" else 32 * MiB
    r = measure(impl.IMPLEMENTATION, "afterchunk", line, max_line=line + MiB)
    assert r["content"] == "done" and r["error"] is None
    assert int(r["peak"]) - int(r["before"]) > line  # the chunk was held, while it was parsed
    assert int(r["after"]) - int(r["before"]) < 8 * MiB, r


MANY = textwrap.dedent(
    r"""
    import json, sys
    from llamafast._engine import _twins

    Assembler = (_twins.CYTHON if sys.argv[1] == "cython" else _twins.PURE).Assembler

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    chunk = json.dumps(
        {"id": "x", "choices": [{"delta": {"content": "hello " * 60}}], "timings": {"cache_n": 1}}
    )
    Assembler().push(chunk)  # what the first one sets up once per process is not counted
    before = rss()
    streams = []
    for _ in range(2000):
        asm = Assembler()
        asm.push(chunk)
        streams.append(asm)
    print((rss() - before) / len(streams))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_many_streams_at_once_cost_a_few_kib_each(impl: types.SimpleNamespace) -> None:
    """An agent runs dozens to thousands of streams: an Assembler that has parsed a chunk holds
    its text and state, not a JSON parser of its own (the Cython twin's streams share one
    simdjson parser; each used to keep about 16 KiB of parser buffers)."""
    out = subprocess.run(
        [sys.executable, "-c", MANY, impl.IMPLEMENTATION],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert float(out.stdout) < 8 * 1024, out.stdout
