# Client-process CPU and resident memory per 1,000 embedding vectors: a fake llama-server in its
# own process (bench/embed/server.py, bodies in the recorded shape), each client in a fresh
# process of its own, its CPU time (getrusage, user + system) over whole embed calls of 1,024
# texts in batches of 64; rounds interleaved, medians.
"""Embeddings: llamafast against the openai SDK and hand-written httpx clients, side by side.

    python bench/embed/run.py [--rounds 5] [--dims 768,4096] [--cases a,b,...] [--decode-only]
                              [--baseline PYTHON]

Cases: llamafast (base64, the Cython twin), llamafast-async (the same with AsyncClient),
llamafast-200 (Client, calls of 200 texts: the per-text cost of smaller calls),
llamafast-json (the server answers JSON numbers),
llamafast-pure (base64, the pure twin), openai-floats (`embeddings.create`, floats),
openai-base64 (`encoding_format="base64"`, decoded with numpy.frombuffer), httpx-json
(httpx + json.loads of the float answer), httpx-numpy (httpx + base64 + numpy.frombuffer into
one array: the best hand-written client). `--baseline PYTHON` adds, interleaved, each llamafast
case run by that interpreter (another checkout's venv: before and after a change, side by side;
its row is named `case@base`). openai, httpx and numpy are the bench extra's, never
llamafast's. Memory: the growth of the process's resident set while the 1,024 vectors of one
call are held (after gc), per 1,000 vectors. Then, in one process with no I/O, the decoder alone
against json.loads of the same number bodies (and the base64 bodies against base64 + numpy).
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VECTORS = 1024
BATCH = 64
CASES = [
    "llamafast",
    "llamafast-async",
    "llamafast-200",
    "llamafast-json",
    "llamafast-pure",
    "openai-floats",
    "openai-base64",
    "httpx-json",
    "httpx-numpy",
]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def batches(texts: list[str]) -> list[list[str]]:
    return [texts[i : i + BATCH] for i in range(0, len(texts), BATCH)]


def make(case: str, url: str, dim: int) -> Any:
    """A function embedding `texts` the case's way, returning what a caller would keep."""
    if case.startswith("llamafast"):
        if case == "llamafast-pure":
            import llamafast.pure as lf
        else:
            import llamafast as lf
        cfg = lf.Config(lf.InferConfig(url=url), lf.Limits(embed_batch=BATCH))
        model = "numbers" if case == "llamafast-json" else None
        if case == "llamafast-async":
            import asyncio

            loop = asyncio.new_event_loop()
            aclient = lf.AsyncClient(cfg)
            return lambda texts: loop.run_until_complete(aclient.embed(texts, model=model))
        client = lf.Client(cfg)
        if case == "llamafast-200":
            return lambda texts: [
                client.embed(texts[i : i + 200]) for i in range(0, len(texts), 200)
            ]
        return lambda texts: client.embed(texts, model=model)
    if case.startswith("openai"):
        import numpy
        import openai

        oc = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        if case == "openai-floats":
            return lambda texts: [
                oc.embeddings.create(input=b, model="m", encoding_format="float").data
                for b in batches(texts)
            ]

        def openai_b64(texts: list[str]) -> Any:
            out = numpy.empty((len(texts), dim), dtype=numpy.float32)
            for first, b in zip(range(0, len(texts), BATCH), batches(texts), strict=True):
                resp = oc.embeddings.create(input=b, model="m", encoding_format="base64")
                for d in resp.data:
                    raw = base64.b64decode(d.embedding)  # type: ignore[arg-type]
                    out[first + d.index] = numpy.frombuffer(raw, dtype="<f4")
            return out

        return openai_b64
    import httpx

    hc = httpx.Client(timeout=60)
    endpoint = f"{url}/v1/embeddings"
    if case == "httpx-json":
        return lambda texts: [
            json.loads(hc.post(endpoint, json={"input": b, "model": "m"}).content)
            for b in batches(texts)
        ]
    import numpy

    def httpx_numpy(texts: list[str]) -> Any:
        out = numpy.empty((len(texts), dim), dtype=numpy.float32)
        for first, b in zip(range(0, len(texts), BATCH), batches(texts), strict=True):
            body = {"input": b, "model": "m", "encoding_format": "base64"}
            doc = json.loads(hc.post(endpoint, json=body).content)
            for d in doc["data"]:
                raw = base64.b64decode(d["embedding"])
                out[first + d["index"]] = numpy.frombuffer(raw, dtype="<f4")
        return out

    return httpx_numpy


def child(case: str, url: str, dim: int, reps: int) -> None:
    """One case in this process: CPU ms and resident bytes per 1,000 vectors, as JSON."""
    # calls of 200 texts: 1,000 texts (5 calls), so no smaller call skews the per-text cost
    count = 1000 if case == "llamafast-200" else VECTORS
    texts = [f"memory {i}: what the agent saw at step {i}" for i in range(count)]
    embed = make(case, url, dim)
    embed(texts)  # warm: imports, first connections, the parser's buffers
    gc.collect()
    before = rss()
    held = embed(texts)
    gc.collect()
    grown = rss() - before
    del held
    gc.collect()
    start = cpu()
    for _ in range(reps):
        embed(texts)
    spent = cpu() - start
    per = 1000 / count
    print(json.dumps({"cpu_ms": spent / reps * per * 1000, "rss_mb": grown * per / 2**20}))


def decode_only(dims: list[int], rounds: int) -> None:
    """The JSON-number path's decoder against json.loads of the same bodies, in this process
    (no I/O): CPU ms per 1,000 vectors, interleaved rounds, medians."""
    sys.path.insert(0, str(HERE))
    from bodies import body, vectors

    from llamafast._engine import _twins

    print("\nDecoding only (the same 64-vector bodies), CPU ms per 1,000 vectors")
    print("| dims | json.loads | llamafast numbers | ratio | llamafast base64 | base64+numpy |")
    print("|---|---:|---:|---:|---:|---:|")
    twin = _twins.CYTHON or _twins.PURE
    import numpy

    for dim in dims:
        rows = vectors(BATCH, dim)
        numbers, b64 = body(rows, False), body(rows, True)

        def lf(data: bytes) -> None:
            v = twin.Vectors(BATCH)
            v.add([data], 0, BATCH)
            v.finish()

        def np_b64(b64: bytes = b64, dim: int = dim) -> None:
            doc = json.loads(b64)
            out = numpy.empty((BATCH, dim), dtype=numpy.float32)
            for d in doc["data"]:
                out[d["index"]] = numpy.frombuffer(base64.b64decode(d["embedding"]), "<f4")

        cases = {
            "loads": lambda numbers=numbers: json.loads(numbers),
            "numbers": lambda numbers=numbers: lf(numbers),
            "b64": lambda b64=b64: lf(b64),
            "numpy": np_b64,
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(rounds):
            for name, fn in cases.items():
                reps = 3 if name == "loads" else 10
                start = cpu()
                for _ in range(reps):
                    fn()
                times[name].append((cpu() - start) / reps * 1000 * 1000 / BATCH)
        m = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"| {dim} | {m['loads']:.1f} | {m['numbers']:.1f} | {m['loads'] / m['numbers']:.1f}x "
            f"| {m['b64']:.1f} | {m['numpy']:.1f} |"
        )


def serve(dim: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "server.py"), "--dim", str(dim), "--batch", str(BATCH)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="embed calls measured per process")
    ap.add_argument("--dims", default="768,4096")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--decode-only", action="store_true", help="only the in-process decode table")
    ap.add_argument("--baseline", help="another Python whose llamafast cases run beside these")
    ap.add_argument("--child", nargs=3, metavar=("CASE", "URL", "DIM"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        case, url, dim = args.child
        child(case, url, int(dim), args.reps)
        return
    cases = args.cases.split(",")
    if args.baseline:  # each llamafast case by the other interpreter too, as `case@base`
        cases += [f"{c}@base" for c in cases if c.startswith("llamafast")]
    dims = [int(d) for d in args.dims.split(",")]
    if args.decode_only:
        decode_only(dims, args.rounds)
        return
    for dim in dims:
        server, url = serve(dim)
        try:
            results: dict[str, list[dict[str, float]]] = {c: [] for c in cases}
            for _ in range(args.rounds):
                for case in cases:  # interleaved: a busy neighbour slows every case alike
                    name, _, base = case.partition("@")
                    out = subprocess.run(
                        [
                            args.baseline if base else sys.executable,
                            __file__,
                            "--reps",
                            str(args.reps),
                            "--child",
                            name,
                            url,
                            str(dim),
                        ],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    results[case].append(json.loads(out.stdout))
        finally:
            server.terminate()
            server.wait()
        report(dim, results)
    decode_only(dims, args.rounds)


def report(dim: int, results: dict[str, list[dict[str, float]]]) -> None:
    med = {c: statistics.median(r["cpu_ms"] for r in rs) for c, rs in results.items()}
    mem = {c: statistics.median(r["rss_mb"] for r in rs) for c, rs in results.items()}
    base = med.get("llamafast")
    rounds = len(next(iter(results.values())))
    print(f"\n{dim} dimensions, batches of {BATCH}, per 1,000 vectors (median of {rounds} rounds)")
    print("| client | CPU ms | vs llamafast | resident MB |")
    print("|---|---:|---:|---:|")
    for c in results:
        ratio = f"{med[c] / base:.1f}x" if base else "-"
        print(f"| {c} | {med[c]:.1f} | {ratio} | {mem[c]:.1f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
