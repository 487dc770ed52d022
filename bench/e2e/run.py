"""The end-to-end client benchmark: every client against one fake llama-server, side by side.

Run:
    python bench/e2e/run.py --rounds 5              # the full table (about 20 minutes)
    python bench/e2e/run.py --quick                 # a smoke run, well under a minute
    python bench/e2e/run.py --only paced100,seq128 --clients llamafast-async,openai-async
    python bench/e2e/run.py --rounds 5 --json /tmp/e2e.json     # the raw numbers too
    python bench/e2e/run.py --from-json /tmp/e2e.json           # its report again, no run
    python bench/e2e/run.py --baseline-python /path/to/old-venv/bin/python
        # the llamafast rows once more on another install, beside the current ones, every round

The fake server (server.py) runs in its own process on 127.0.0.1. Each measurement is a fresh
worker process (worker.py) running one client for one scenario; rounds are interleaved (every
cell of round 1, then of round 2, ...) so a noisy neighbour slows all cells alike, and the table
gives each cell's median over the rounds with its spread ((max - min) / median). CPU is the
worker's own (getrusage user + system, around the work only), per data chunk and per request.
Ratios compare a row with the floor of its kind on the same loop (async rows: the
BufferedProtocol that only counts bytes; sync rows: the blocking recv_into loop) and with the
openai SDK of its kind (AsyncOpenAI / OpenAI): "openai ÷ row" is how many times less CPU the
row needs. Async clients run again under uvloop when it is installed (their own column; nothing
installs a loop policy). The server's own CPU per chunk is shown under each table.

Bounded: --rounds at most 50, each worker killed after its timeout, new runs stop after
--max-minutes, and the server process is killed at the end whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib.metadata
import json
import os
import platform
import select
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e import wire
from e2e.worker import ASYNC, SYNC

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"
ASYNC_FLOOR, SYNC_FLOOR = "floor-buffered-protocol", "floor-recv_into"
ASYNC_OPENAI, SYNC_OPENAI = "openai-async", "openai-sync"
ASYNC_ROWS = [
    "llamafast-async",
    "llamafast-async-complete",
    "llamafast-async-otel",
    "aiohttp-aiter_chat",
    "aiohttp-json",
    "httpx-sse-async",
    ASYNC_OPENAI,
    ASYNC_FLOOR,
    "floor-protocol",
    "floor-wake",
    "floor-wake-engine",
]
SYNC_ROWS = ["llamafast-sync", "httpx-sse-sync", SYNC_OPENAI, SYNC_FLOOR, "floor-recv_into-engine"]
LABELS = {
    "llamafast-async": "llamafast `AsyncClient`",
    "llamafast-async-complete": "llamafast `AsyncClient.complete(req, on_event)`",
    "llamafast-async-otel": "llamafast `AsyncClient`, llamafast.otel on (SDK spans and metrics)",
    "llamafast-sync": "llamafast `Client`",
    "aiohttp-aiter_chat": "aiohttp + `aiter_chat` (no client)",
    "aiohttp-json": "hand-written aiohttp + split + `json.loads`",
    "httpx-sse-async": "httpx `AsyncClient` + httpx-sse + `json.loads`",
    "httpx-sse-sync": "httpx `Client` + httpx-sse + `json.loads`",
    ASYNC_OPENAI: "openai `AsyncOpenAI`",
    SYNC_OPENAI: "openai `OpenAI`",
    ASYNC_FLOOR: "floor: `asyncio.BufferedProtocol`, counts bytes",
    "floor-protocol": "floor: plain `asyncio.Protocol`, counts bytes",
    SYNC_FLOOR: "floor: blocking `recv_into` loop",
    "floor-wake": "floor + one task wake-up per arrival (a future)",
    "floor-wake-engine": "floor + wake-up + llamafast's engine, no client",
    "floor-recv_into-engine": "floor `recv_into` + llamafast's engine, no client",
}
LLAMAFAST = ("llamafast-async", "llamafast-async-complete", "llamafast-sync", "aiohttp-aiter_chat")
PEERS = ("openai", "httpx", "httpx-sse", "aiohttp", "uvloop", "pydantic")


@dataclass
class Scenario:
    key: str
    title: str
    mode: wire.Mode
    streams: int
    chunks: int
    requests: int = 1
    rows: list[str] = field(default_factory=lambda: list(ASYNC_ROWS))
    per_request: bool = False  # the table's unit: CPU per request, not per chunk

    @property
    def warm(self) -> wire.Mode:
        return wire.Mode("bulk", 0, self.mode.slots, self.mode.shape)

    def expected_wall(self) -> float:
        if self.mode.mode == "paced":
            return self.requests * self.chunks / self.mode.rate
        return self.streams * self.requests * self.chunks * 2e-4  # openai's pace, about


def scenarios(quick: bool) -> list[Scenario]:
    q = quick
    return [
        Scenario(
            "paced100",
            f"{50 if q else 100} streams at {100 if q else 50} chunks/s",
            wire.Mode("paced", 100 if q else 50, 100, "short"),
            streams=50 if q else 100,
            chunks=100 if q else 150,
        ),
        Scenario(
            "bulk20",
            f"{5 if q else 20} streams, bulk",
            wire.Mode("bulk", 0, 20, "full"),
            streams=5 if q else 20,
            chunks=500 if q else 2000,
        ),
        Scenario(
            "bulk1",
            "1 stream, bulk",
            wire.Mode("bulk", 0, 1, "full"),
            streams=1,
            chunks=1000 if q else 20_000,  # enough bytes (10 MB) for the floors to register
            rows=ASYNC_ROWS + SYNC_ROWS,
        ),
        Scenario(
            "sync-paced",
            f"sync, 1 stream at {200 if q else 100} chunks/s",
            wire.Mode("paced", 200 if q else 100, 1, "full"),
            streams=1,
            chunks=100 if q else 500,
            rows=list(SYNC_ROWS),
        ),
        *(
            Scenario(
                f"seq{slots}",
                f"sequential 100-chunk requests, {slots}-slot server",
                wire.Mode("bulk", 0, slots, "full"),
                streams=1,
                chunks=100,
                requests=10 if q else 100,
                rows=ASYNC_ROWS + SYNC_ROWS,
                per_request=True,
            )
            # 32 slots: the current clients' 64 KiB cap on /slots still holds their answer.
            for slots in (128, 32)
        ),
    ]


# --- the server --------------------------------------------------------------------------------


@contextlib.contextmanager
def fake_server(
    loop: str, keep_alive: bool, max_seconds: float, extra: Sequence[str] = ()
) -> Iterator[int]:
    """Start server.py (with `extra` options), yield its port; kill it at the end, however the
    block ends."""
    cmd = [
        sys.executable,
        str(HERE / "server.py"),
        f"--loop={loop}",
        f"--max-seconds={max_seconds}",
        *extra,
    ]
    if keep_alive:
        cmd.append("--keep-alive")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline().decode() if ready else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"the fake server did not start (said {line!r})")
        yield int(line.split()[1])
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the server's signal to stop
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def server_stats(port: int) -> dict[str, float]:
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request("GET", "/_stats")
        stats: dict[str, float] = json.loads(conn.getresponse().read())
        return stats
    finally:
        conn.close()


# --- running the cells -------------------------------------------------------------------------


@dataclass
class Cell:
    scenario: Scenario
    client: str
    loop: str  # "asyncio", "uvloop", or "sync"
    runs: list[dict[str, Any]] = field(default_factory=list)
    python: str = sys.executable  # the interpreter (and so the llamafast) the worker runs on
    baseline: bool = False  # a llamafast row run again on --baseline-python

    @property
    def ok(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if "error" not in r]

    def value(self) -> float | None:
        """Median µs per chunk (or per request) over the rounds that worked."""
        ok = self.ok
        if not ok:
            return None
        unit = "requests" if self.scenario.per_request else "chunks"
        return statistics.median(r["cpu"] / r[unit] * 1e6 for r in ok)

    def spread(self) -> float | None:
        ok = self.ok
        if len(ok) < 2:
            return None
        unit = "requests" if self.scenario.per_request else "chunks"
        values = [r["cpu"] / r[unit] for r in ok]
        return (max(values) - min(values)) / statistics.median(values)

    def error(self) -> str | None:
        errors = [r["error"] for r in self.runs if "error" in r]
        return errors[0] if errors else None


def run_cell(cell: Cell, port: int, timeout: float) -> dict[str, Any]:
    s = cell.scenario
    cmd = [
        cell.python,
        str(HERE / "worker.py"),
        f"--client={cell.client}",
        f"--loop={'asyncio' if cell.loop == 'sync' else cell.loop}",
        f"--port={port}",
        f"--prefix={s.mode.prefix}",
        f"--warm-prefix={s.warm.prefix}",
        f"--streams={s.streams}",
        f"--requests={s.requests}",
        f"--chunks={s.chunks}",
    ]
    before = server_stats(port)
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
        lines = done.stdout.decode().strip().splitlines()
        if lines:
            result: dict[str, Any] = json.loads(lines[-1])
        else:
            tail = done.stderr.decode().strip().splitlines()[-1:] or ["no output"]
            result = {"error": f"worker exited {done.returncode}: {tail[0][:200]}"}
    except subprocess.TimeoutExpired:
        result = {"error": f"timed out after {timeout:g} s"}
    after = server_stats(port)
    result["server_cpu"] = after["cpu"] - before["cpu"]
    result["server_chunks"] = after["chunks"] - before["chunks"]
    return result


def cells(
    chosen: list[Scenario], clients: set[str] | None, uvloop: bool, baseline: str | None = None
) -> list[Cell]:
    """Every cell to run, in the order of a round; with `baseline` (another interpreter), each
    llamafast row again on it, right after its own, so before and after run side by side."""
    out = []
    for s in chosen:
        for name in s.rows:
            if clients is not None and name not in clients:
                continue
            if name in SYNC:
                loops = ["sync"]
            elif s.key == "sync-paced":
                continue
            else:
                loops = ["asyncio", "uvloop"] if uvloop else ["asyncio"]
            for loop in loops:
                out.append(Cell(s, name, loop))
                if baseline and name in LLAMAFAST:
                    out.append(Cell(s, name, loop, python=baseline, baseline=True))
    return out


# --- the report --------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def find(
    table: list[Cell], scenario: str, client: str, loop: str, baseline: bool = False
) -> Cell | None:
    for c in table:
        if (c.scenario.key, c.client, c.loop, c.baseline) == (scenario, client, loop, baseline):
            return c
    return None


def value_or_error(cell: Cell | None) -> str:
    if cell is None:
        return "-"
    v = cell.value()
    err = cell.error()
    if v is None:
        return f"fails: {err.split(':')[0]}" if err else "-"
    failed = len(cell.runs) - len(cell.ok)
    return fmt(v) + (f" ({failed}/{len(cell.runs)} failed)" if failed else "")


def spread(cell: Cell | None) -> str:
    value = cell.spread() if cell is not None else None
    return "-" if value is None else f"{value:.0%}"


def scenario_table(s: Scenario, table: list[Cell], uvloop: bool) -> list[str]:
    unit = "request" if s.per_request else "chunk"
    shown = [c for c in table if c.scenario is s]
    if not shown:
        return []
    loops = ["asyncio", "uvloop"] if uvloop else ["asyncio"]
    has_async = any(c.loop != "sync" for c in shown)
    what = (
        f"{s.streams} stream{'s' if s.streams > 1 else ''} x {s.requests} request"
        f"{'s' if s.requests > 1 else ''} x {s.chunks} chunks, {s.mode.mode}"
        + (f" at {s.mode.rate:g} chunks/s" if s.mode.mode == "paced" else "")
        + f", /slots: {s.mode.slots} slots ({s.mode.shape} shape)"
    )
    out = [f"### {s.title}", "", what, ""]
    head = f"| client | CPU µs per {unit} | spread | x floor | openai ÷ this |"
    rule = "|---|---:|---:|---:|---:|"
    if has_async and uvloop:
        head += f" uvloop: µs per {unit} | spread | x floor |"
        rule += "---:|---:|---:|"
    out += [head, rule]
    rows = [(name, base) for name in s.rows for base in (False, True)]
    for name, base in rows:
        if not any(c.client == name and c.baseline == base for c in shown):
            continue
        sync = name in SYNC
        line = f"| {LABELS[name]}{' (baseline)' if base else ''} |"
        for loop in ["sync"] if sync else loops:
            c = find(shown, s.key, name, loop, base)
            floor = find(shown, s.key, SYNC_FLOOR if sync else ASYNC_FLOOR, loop)
            peer = find(shown, s.key, SYNC_OPENAI if sync else ASYNC_OPENAI, loop)
            v = c.value() if c else None
            line += f" {value_or_error(c)} | {spread(c)} |"
            line += f" {fmt(ratio(v, floor.value() if floor else None), 2)} |"
            if loop != "uvloop":
                line += f" {fmt(ratio(peer.value() if peer else None, v), 1)} |"
        if sync and has_async and uvloop:
            line += " | | |"
        out.append(line)
    out += [
        "",
        "x floor: this row ÷ the floor of its kind on the same loop (async rows: the "
        "BufferedProtocol floor; sync rows: the recv_into floor). openai ÷ this: the openai SDK "
        "of the same kind ÷ this row.",
    ]
    runs = [r for c in shown for r in c.ok if r.get("server_chunks")]
    if runs:
        server_us = statistics.median(r["server_cpu"] / r["server_chunks"] * 1e6 for r in runs)
        busy = statistics.median(r["server_cpu"] / r["wall"] for r in runs if r["wall"] > 0)
        note = f"The fake server: {server_us:.1f} µs CPU per chunk, busy {busy:.0%} of wall time"
        if s.mode.mode == "paced":
            lags = [r["wall"] / s.expected_wall() for r in runs]
            note += f"; paced streams took {statistics.median(lags):.3f}x their schedule"
        out += ["", note + " (medians over every run of this scenario)."]
    return [*out, ""]


def paired(table: list[Cell], scenario: str, a: tuple[str, str], b: tuple[str, str]) -> list[float]:
    """a ÷ b round by round: the two cells ran minutes apart at most, so a slow spell of the
    machine hits both; the median of these is steadier than the ratio of two medians."""
    ca, cb = find(table, scenario, *a), find(table, scenario, *b)
    if ca is None or cb is None:
        return []
    unit = "requests" if ca.scenario.per_request else "chunks"
    return [
        ra["cpu"] / rb["cpu"] * rb[unit] / ra[unit]
        for ra, rb in zip(ca.runs, cb.runs, strict=False)
        if "error" not in ra and "error" not in rb and rb["cpu"] > 0
    ]


TARGETS = [
    # (label, scenario, numerator (client, loop), denominator, goal, the test)
    *(
        (
            f"100 streams paced: `AsyncClient` ÷ BufferedProtocol floor ({loop})",
            "paced100",
            ("llamafast-async", loop),
            (ASYNC_FLOOR, loop),
            "≤ 1.5",
            lambda x: x <= 1.5,
        )
        for loop in ("asyncio", "uvloop")
    ),
    (
        "100 streams paced: `AsyncOpenAI` ÷ `AsyncClient`",
        "paced100",
        (ASYNC_OPENAI, "asyncio"),
        ("llamafast-async", "asyncio"),
        "≥ 15",
        lambda x: x >= 15,
    ),
    (
        "100 streams paced: `AsyncClient` ÷ hand-written aiohttp + `json.loads`",
        "paced100",
        ("llamafast-async", "asyncio"),
        ("aiohttp-json", "asyncio"),
        "≤ 0.5",
        lambda x: x <= 0.5,
    ),
    (
        "20 streams bulk: `AsyncOpenAI` ÷ `AsyncClient`",
        "bulk20",
        (ASYNC_OPENAI, "asyncio"),
        ("llamafast-async", "asyncio"),
        "≥ 40",
        lambda x: x >= 40,
    ),
    (
        "sync, 1 stream paced: `Client` ÷ `recv_into` floor",
        "sync-paced",
        ("llamafast-sync", "sync"),
        (SYNC_FLOOR, "sync"),
        "≤ 1.3",
        lambda x: x <= 1.3,
    ),
    (
        "sequential, 128 slots: `Client` per request ÷ bare POST (`recv_into`)",
        "seq128",
        ("llamafast-sync", "sync"),
        (SYNC_FLOOR, "sync"),
        "≤ 1.1",
        lambda x: x <= 1.1,
    ),
    (
        "sequential, 128 slots: `AsyncClient` per request ÷ bare POST (BufferedProtocol)",
        "seq128",
        ("llamafast-async", "asyncio"),
        (ASYNC_FLOOR, "asyncio"),
        "≤ 1.1",
        lambda x: x <= 1.1,
    ),
    # What no client can beat, for reading the targets above: an `async for` wakes its task
    # once per arrival, and every client must turn the bytes into events.
    (
        "(reference) 100 streams paced: floor + wake-up + engine ÷ BufferedProtocol floor",
        "paced100",
        ("floor-wake-engine", "asyncio"),
        (ASYNC_FLOOR, "asyncio"),
        "-",
        None,
    ),
    (
        "(reference) 100 streams paced: `AsyncClient.complete` ÷ BufferedProtocol floor",
        "paced100",
        ("llamafast-async-complete", "asyncio"),
        (ASYNC_FLOOR, "asyncio"),
        "-",
        None,
    ),
    (
        "(reference) 100 streams paced: `AsyncOpenAI` ÷ `AsyncClient.complete`",
        "paced100",
        (ASYNC_OPENAI, "asyncio"),
        ("llamafast-async-complete", "asyncio"),
        "-",
        None,
    ),
    (
        "(reference) 100 streams paced: `AsyncClient` ÷ floor + wake-up + engine",
        "paced100",
        ("llamafast-async", "asyncio"),
        ("floor-wake-engine", "asyncio"),
        "-",
        None,
    ),
    (
        "(reference) sequential, 128 slots: `Client` ÷ `recv_into` + engine",
        "seq128",
        ("llamafast-sync", "sync"),
        ("floor-recv_into-engine", "sync"),
        "-",
        None,
    ),
    (
        "(reference) sequential, 128 slots: `AsyncClient` ÷ floor + wake-up + engine",
        "seq128",
        ("llamafast-async", "asyncio"),
        ("floor-wake-engine", "asyncio"),
        "-",
        None,
    ),
]


def targets(table: list[Cell], uvloop: bool) -> list[str]:
    out = [
        "### The issue's targets",
        "",
        "| target | median of per-round ratios | range over rounds | goal | |",
        "|---|---:|---:|---:|---|",
    ]
    for label, scenario, a, b, goal, met in TARGETS:
        if a[1] == "uvloop" and not uvloop:
            continue
        ratios = paired(table, scenario, a, b)
        if not ratios:
            out.append(f"| {label} | - | - | {goal} | - |")
            continue
        m = statistics.median(ratios)
        span = f"{min(ratios):.2f} to {max(ratios):.2f}"
        verdict = "" if met is None else ("met" if met(m) else "missed")
        out.append(f"| {label} | {m:.2f} | {span} | {goal} | {verdict} |")
    return [
        *out,
        "",
        "- means a cell failed or was not run (see its table).",
        "",
    ]


def llamafast_of(python: str) -> str:
    """Which llamafast `python` imports: its implementation, directory and git commit."""
    code = (
        "import llamafast, pathlib; "
        "print(llamafast.IMPLEMENTATION, pathlib.Path(llamafast.__file__).parent)"
    )
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, check=True, timeout=60)
        impl, where = done.stdout.decode().split(maxsplit=1)
        where = where.strip()
        commit = (
            subprocess.run(
                ["git", "-C", where, "rev-parse", "--short", "HEAD"],
                capture_output=True,
                check=False,
            )
            .stdout.decode()
            .strip()
        )
    except (OSError, ValueError, subprocess.SubprocessError) as err:
        return f"? ({python}: {err!r:.100})"
    return f"{impl} from {where} (commit {commit or '?'})"


def environment(uvloop: bool, server_loop: str, baseline: str | None = None) -> list[str]:
    versions = []
    for name in PEERS:
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name} (not installed)")
    lines = [
        f"- {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, Python "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, load "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        f"- llamafast {llamafast_of(sys.executable)}; " + ", ".join(versions),
    ]
    if baseline:
        lines.append(f"- the (baseline) rows: {baseline}, llamafast {llamafast_of(baseline)}")
    lines.append(
        f"- the fake server on {server_loop}; async clients on asyncio"
        + (" and uvloop" if uvloop else "")
    )
    return lines


# --- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--quick", action="store_true", help="one short round, no uvloop column")
    ap.add_argument("--only", help="scenarios, comma-separated (paced100,bulk20,bulk1,...)")
    ap.add_argument("--clients", help="clients, comma-separated (default: all)")
    ap.add_argument("--no-uvloop", action="store_true", help="skip the uvloop column")
    ap.add_argument("--keep-alive", action="store_true", help="the server keeps connections")
    ap.add_argument("--max-minutes", type=float, default=40.0, help="start no run after this")
    ap.add_argument(
        "--baseline-python",
        help="another interpreter whose llamafast runs the llamafast rows again, side by side "
        "(e.g. a venv with the previous version installed)",
    )
    ap.add_argument("--json", help="also write every run's numbers to this file")
    ap.add_argument("--from-json", help="print the report of a saved --json file; run nothing")
    args = ap.parse_args(argv)
    if args.from_json:
        print(rerender(args.from_json))
        return 0
    if not 1 <= args.rounds <= 50:
        ap.error(f"--rounds must be from 1 to 50, not {args.rounds}")
    rounds = 1 if args.quick else args.rounds
    chosen = scenarios(args.quick)
    if args.only:
        keys = args.only.split(",")
        unknown = set(keys) - {s.key for s in chosen}
        if unknown:
            ap.error(f"unknown scenario {sorted(unknown)[0]!r}")
        chosen = [s for s in chosen if s.key in keys]
    elif args.quick:
        chosen = [s for s in chosen if s.key != "seq32"]
    clients = set(args.clients.split(",")) if args.clients else None
    if clients is not None and (unknown := clients - set(ASYNC) - set(SYNC)):
        ap.error(f"unknown client {sorted(unknown)[0]!r}")
    has_uvloop = importlib.util.find_spec("uvloop") is not None
    uvloop = has_uvloop and not args.quick and not args.no_uvloop
    server_loop = "uvloop" if has_uvloop else "asyncio"
    table = cells(chosen, clients, uvloop, args.baseline_python)
    deadline = time.monotonic() + args.max_minutes * 60
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the server is killed too
    started = time.monotonic()
    with fake_server(server_loop, args.keep_alive, args.max_minutes * 60 + 600) as port:
        for r in range(rounds):
            for cell in table:
                if time.monotonic() > deadline:
                    break
                timeout = 60 + 5 * cell.scenario.expected_wall()
                cell.runs.append(run_cell(cell, port, timeout))
            print(
                f"round {r + 1}/{rounds} done after {time.monotonic() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    env = environment(uvloop, server_loop, args.baseline_python)
    print(report(chosen, table, rounds, uvloop, env))
    if args.json:
        raw = {
            "quick": args.quick,
            "rounds": rounds,
            "uvloop": uvloop,
            "environment": env,
            "cells": [
                {
                    "scenario": c.scenario.key,
                    "client": c.client,
                    "loop": c.loop,
                    "baseline": c.baseline,
                    "runs": c.runs,
                }
                for c in table
            ],
        }
        Path(args.json).write_text(json.dumps(raw, indent=1))
    return 0


def report(
    chosen: list[Scenario], table: list[Cell], rounds: int, uvloop: bool, env: list[str]
) -> str:
    plural = "s" if rounds > 1 else ""
    title = f"## End-to-end client CPU ({rounds} interleaved round{plural}, medians)"
    lines = [title, "", *env, ""]
    for s in chosen:
        lines += scenario_table(s, table, uvloop)
    spreads = [x for c in table if (x := c.spread()) is not None]
    if spreads:
        lines += [
            f"Noise: the median cell's spread over the rounds is {statistics.median(spreads):.0%} "
            f"(the widest {max(spreads):.0%}); quote ratios, not single cells.",
            "",
        ]
    lines += targets(table, uvloop)
    return "\n".join(lines)


def rerender(path: str) -> str:
    """The report of a saved --json file (a plain list: a full run saved before this option)."""
    raw = json.loads(Path(path).read_text())
    if isinstance(raw, list):
        raw = {"quick": False, "rounds": 5, "uvloop": True, "environment": [], "cells": raw}
    by_key = {s.key: s for s in scenarios(raw["quick"])}
    table = [
        Cell(by_key[c["scenario"]], c["client"], c["loop"], c["runs"], "", c.get("baseline", False))
        for c in raw["cells"]
    ]
    chosen = [s for s in by_key.values() if any(c.scenario is s for c in table)]
    rounds = max(len(c.runs) for c in table)
    env = [*raw["environment"], f"- re-rendered from {path}"]
    return report(chosen, table, rounds, raw["uvloop"], env)


if __name__ == "__main__":
    sys.exit(main())
