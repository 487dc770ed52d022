"""The per-request benchmark: short streamed chats in turn, each client's CPU per request and
the connections it opened, over http:// and https://, side by side in one run.

Run:
    python bench/request/run.py                                  # 300 requests, 3 rounds
    python bench/request/run.py --requests 300 --schemes http,https --json /tmp/req.json
    python bench/request/run.py --clients llamafast-sync,floor --servers keep-alive
    python bench/request/run.py --baseline-python /path/to/old-venv/bin/python
        # the llamafast rows once more on another install, beside the current ones, every round

The fake llama-server (bench/e2e/server.py) runs in its own processes on 127.0.0.1, one per
scheme and server kind: `keep-alive` keeps every connection (a TLS proxy in front of
llama-server does), `close-streams` closes it after each streamed answer (llama-server itself).
The https ones use a certificate of a private CA made here by the `openssl` command, in a
temporary directory removed at the end. Each cell is a fresh worker process (worker.py) making
--requests sequential chats of --chunks chunks after a warm-up; its CPU (user + system, its own
process only: the server's is not in it) and the connections the server accepted meanwhile are
recorded. Rounds are interleaved (every cell of round 1, then of round 2, ...); the tables give
medians over the rounds, and each ratio is the median of the per-round ratios of two cells.

Bounded: --rounds at most 20, --requests at most 100,000, each worker killed after its timeout,
and every server process killed at the end whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e import wire
from e2e.run import environment, fake_server

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"
MODE = wire.Mode("bulk", 0, 4, "short")  # every answer at once; /slots: 4 slots, short entries
SCHEMES = ("http", "https")
SERVERS = {"keep-alive": "--keep-alive", "close-streams": "--close-streams"}
FLOOR = "floor"
ROWS = {
    "llamafast-sync": "llamafast `Client`, `for event in stream`",
    "llamafast-sync-complete": "llamafast `Client.complete(req)`",
    "llamafast-async": "llamafast `AsyncClient`, `async for event in stream`",
    "llamafast-async-complete": "llamafast `AsyncClient.complete(req)`",
    "openai-sync": "openai `OpenAI`, `stream=True`",
    "openai-async": "openai `AsyncOpenAI`, `stream=True`",
    FLOOR: "floor: one keep-alive socket, same bytes, body read to its end",
}
LLAMAFAST = [name for name in ROWS if name.startswith("llamafast")]


# --- the private CA ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """A private CA (`ca`) and the server certificate it signed for 127.0.0.1 (`cert`, `key`),
    all P-256, as llama-server behind a TLS proxy would have."""

    ca: str
    cert: str
    key: str


def openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def make_pki(where: Path) -> Pki:
    """The CA and the server's certificate, made by the `openssl` command in `where`."""
    pki = Pki(str(where / "ca.pem"), str(where / "server.pem"), str(where / "server.key"))
    ca_key, csr, ext = where / "ca.key", where / "server.csr", where / "server.ext"
    p256 = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *p256, "-days", "2", "-keyout", ca_key, "-out", pki.ca,
            "-subj", "/CN=llamafast bench CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    openssl("req", *p256, "-keyout", pki.key, "-out", csr, "-subj", "/CN=127.0.0.1")
    ext.write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    openssl("x509", "-req", "-in", csr, "-CA", pki.ca, "-CAkey", ca_key, "-CAcreateserial",
            "-days", "1", "-out", pki.cert, "-extfile", ext)  # fmt: skip
    return pki


# --- the cells ---------------------------------------------------------------------------------


@dataclass
class Cell:
    client: str
    scheme: str
    server: str
    python: str = sys.executable  # the interpreter (and so the llamafast) the worker runs on
    baseline: bool = False  # a llamafast row run again on --baseline-python
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str, bool]:
        return self.client, self.scheme, self.server, self.baseline

    @property
    def ok(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if "error" not in r]

    def us(self) -> float | None:
        """Median µs of CPU per request over the rounds that worked."""
        ok = self.ok
        return statistics.median(r["cpu"] / r["requests"] * 1e6 for r in ok) if ok else None

    def connections(self) -> str:
        """The connections the server accepted for the measured requests (their range over the
        rounds when it varies), or why there is no number."""
        counts = sorted({int(r["connections"]) for r in self.ok})
        if not counts:
            errors = [r["error"] for r in self.runs if "error" in r]
            return f"fails: {errors[0][:60]}" if errors else "-"
        shown = str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
        retried = statistics.median(r.get("retried", 0) for r in self.ok)
        return shown + (f" ({retried:g} retried)" if retried else "")


def cells(args: argparse.Namespace) -> list[Cell]:
    """Every cell in the order of a round; with a baseline, each llamafast row again on it,
    right after its own."""
    out = []
    for server in args.servers:
        for scheme in args.schemes:
            for name in args.clients:
                out.append(Cell(name, scheme, server))
                if args.baseline_python and name in LLAMAFAST:
                    out.append(Cell(name, scheme, server, args.baseline_python, baseline=True))
    return out


def run_cell(cell: Cell, url: str, ca: str | None, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        cell.python,
        str(HERE / "worker.py"),
        f"--client={cell.client}",
        f"--url={url}",
        f"--requests={args.requests}",
        f"--chunks={args.chunks}",
        f"--warm-up={args.warm_up}",
    ]
    if ca:
        cmd.append(f"--ca={ca}")
    if cell.server == "close-streams":
        cmd.append("--fresh")
    timeout = 60 + args.requests * 0.05
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    lines = done.stdout.decode().strip().splitlines()
    if lines:
        result: dict[str, Any] = json.loads(lines[-1])
        return result
    tail = done.stderr.decode().strip().splitlines()[-1:] or ["no output"]
    return {"error": f"worker exited {done.returncode}: {tail[0][:200]}"}


@contextlib.contextmanager
def servers(args: argparse.Namespace, pki: Pki | None) -> Iterator[dict[tuple[str, str], str]]:
    """One fake server per (scheme, server kind); yields each one's base URL."""
    loop = server_loop()
    with contextlib.ExitStack() as stack:
        urls = {}
        for server in args.servers:
            for scheme in args.schemes:
                extra = [SERVERS[server]]
                if scheme == "https":
                    assert pki is not None
                    extra += [f"--tls-cert={pki.cert}", f"--tls-key={pki.key}"]
                port = stack.enter_context(fake_server(loop, False, args.max_seconds, extra))
                urls[scheme, server] = f"{scheme}://{HOST}:{port}{MODE.prefix}"
        yield urls


def server_loop() -> str:
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


# --- the report --------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.{digits}f}"


def paired(a: Cell | None, b: Cell | None) -> float | None:
    """The median over the rounds of a ÷ b (CPU per request): the two cells ran seconds apart in
    each round, so a slow spell of the machine hits both."""
    if a is None or b is None:
        return None
    ratios = [
        (ra["cpu"] / ra["requests"]) / (rb["cpu"] / rb["requests"])
        for ra, rb in zip(a.runs, b.runs, strict=False)
        if "error" not in ra and "error" not in rb and rb["cpu"] > 0
    ]
    return statistics.median(ratios) if ratios else None


Table = dict[tuple[str, str, str, bool], Cell]  # the cells by (client, scheme, server, baseline)


def client_table(table: Table, server: str, args: Any) -> list[str]:
    """One server kind: a row per client, CPU per request, connections, ratios to the floor
    and of https to http."""
    schemes = args.schemes
    head = "| client |" + "".join(f" {s} µs/req | {s} x floor | {s} conns |" for s in schemes)
    rule = "|---|" + "---:|---:|---:|" * len(schemes)
    if len(schemes) == 2:
        head, rule = head + " https ÷ http |", rule + "---:|"
    out = [head, rule]
    for name in args.clients:
        for base in (False, True):
            cell = {s: table.get((name, s, server, base)) for s in schemes}
            if not any(cell.values()):
                continue
            line = f"| {ROWS[name]}{' (baseline)' if base else ''} |"
            for s in schemes:
                c = cell[s]
                floor = table.get((FLOOR, s, server, False))
                line += f" {fmt(c.us() if c else None, 1)} | {fmt(paired(c, floor))} |"
                line += f" {c.connections() if c else '-'} |"
            if len(schemes) == 2:
                line += f" {fmt(paired(cell['https'], cell['http']))} |"
            out.append(line)
    return out


# (label, numerator client, denominator client, scheme ("https/http": the same client over
# both), the goal as a bound or None); each is shown for every server kind.
TARGETS: list[tuple[str, str, str, str, float | None]] = [
    ("`Client` https ÷ http", "llamafast-sync", "llamafast-sync", "https/http", 1.15),
    ("`AsyncClient` https ÷ http", "llamafast-async", "llamafast-async", "https/http", 1.15),
    ("`Client` ÷ floor, http", "llamafast-sync", FLOOR, "http", 5.0),
    ("`Client` ÷ floor, https", "llamafast-sync", FLOOR, "https", None),
    ("`AsyncClient` ÷ `Client`, http", "llamafast-async", "llamafast-sync", "http", 1.3),
    ("`AsyncClient` ÷ `Client`, https", "llamafast-async", "llamafast-sync", "https", 1.3),
    (
        "`AsyncClient.complete` ÷ `Client.complete`, http",
        "llamafast-async-complete",
        "llamafast-sync-complete",
        "http",
        None,
    ),
    ("`Client` ÷ `OpenAI`, https", "llamafast-sync", "openai-sync", "https", 0.5),
    ("`AsyncClient` ÷ `AsyncOpenAI`, https", "llamafast-async", "openai-async", "https", 0.5),
]


def ratio_table(table: Table, args: Any) -> list[str]:
    """The issue's ratios, per server kind (and for the baseline's llamafast too)."""
    bases = (False, True) if args.baseline_python else (False,)
    out = [
        "| ratio (CPU per request) |" + "".join(f" {s} |" for s in args.servers) + " goal |",
        "|---|" + "---:|" * len(args.servers) + "---:|",
    ]
    for label, a, b, scheme, goal in TARGETS:
        for base in bases:
            line = f"| {label}{' (baseline)' if base else ''} |"
            for server in args.servers:
                if scheme == "https/http":
                    num = table.get((a, "https", server, base))
                    den = table.get((b, "http", server, base))
                else:
                    num = table.get((a, scheme, server, base))
                    den = table.get((b, scheme, server, base and b in LLAMAFAST))
                line += f" {fmt(paired(num, den))} |"
            out.append(line + (f" ≤ {goal:g} |" if goal else " |"))
    return out


def report(table: Table, args: Any, env: list[str]) -> str:
    plural = "s" if args.rounds > 1 else ""
    lines = [
        f"## Per-request client CPU: {args.requests} sequential streamed chats of "
        f"{args.chunks} chunks ({args.rounds} interleaved round{plural}, medians)",
        "",
        *env,
        "",
    ]
    what = {
        "keep-alive": "a server that keeps connections (as a TLS proxy in front of llama-server)",
        "close-streams": "a server that closes after each streamed answer (llama-server itself)",
    }
    for server in args.servers:
        lines += [f"### {what[server]}", "", *client_table(table, server, args), ""]
    lines += [
        "µs/req: the client process's CPU (user + system) per request. x floor: ÷ the floor of "
        "the same scheme and server (median of per-round ratios). conns: the TCP connections the "
        f"server accepted for the {args.requests} measured requests (after the warm-up).",
        "",
        "### Ratios",
        "",
        *ratio_table(table, args),
        "",
    ]
    return "\n".join(lines)


# --- main --------------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=300, help="measured requests per cell")
    ap.add_argument("--warm-up", type=int, default=5, help="untimed requests first (5)")
    ap.add_argument("--chunks", type=int, default=20, help="data chunks per answer (20)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--schemes", default="http,https", help="http, https or both")
    ap.add_argument("--servers", default=",".join(SERVERS), help=", ".join(SERVERS))
    ap.add_argument(
        "--clients",
        help="comma-separated (default: every row whose package is installed): " + ", ".join(ROWS),
    )
    ap.add_argument("--baseline-python", help="another interpreter whose llamafast runs again")
    ap.add_argument("--json", help="also write every run's numbers to this file")
    ap.add_argument("--max-seconds", type=float, default=3600, help="the servers stop after this")
    args = ap.parse_args(argv)
    if args.clients is None:
        has_openai = importlib.util.find_spec("openai") is not None
        args.clients = ",".join(r for r in ROWS if has_openai or not r.startswith("openai"))
    for name, known in (("schemes", SCHEMES), ("servers", SERVERS), ("clients", ROWS)):
        chosen = getattr(args, name).split(",")
        if unknown := [x for x in chosen if x not in known]:
            ap.error(f"unknown {name[:-1]} {unknown[0]!r} (known: {', '.join(known)})")
        setattr(args, name, [x for x in known if x in chosen])  # in the table's order
    if not 1 <= args.rounds <= 20:
        ap.error(f"--rounds must be from 1 to 20, not {args.rounds}")
    if not 1 <= args.warm_up <= 100:
        ap.error(f"--warm-up must be from 1 to 100, not {args.warm_up}")
    if not 1 <= args.requests <= 100_000:
        ap.error(f"--requests must be from 1 to 100,000, not {args.requests}")
    if not wire.MIN_CHUNKS <= args.chunks <= 100_000:
        ap.error(f"--chunks must be from {wire.MIN_CHUNKS} to 100,000, not {args.chunks}")
    if "https" in args.schemes and shutil.which("openssl") is None:
        ap.error("https needs the openssl command (to make the private CA); or --schemes http")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    table = cells(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the servers are killed too
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llamafast-bench-pki-") as where:
        pki = make_pki(Path(where)) if "https" in args.schemes else None
        with servers(args, pki) as urls:
            for r in range(args.rounds):
                for cell in table:
                    url = urls[cell.scheme, cell.server]
                    ca = pki.ca if pki and cell.scheme == "https" else None
                    cell.runs.append(run_cell(cell, url, ca, args))
                took = time.monotonic() - started
                print(f"round {r + 1}/{args.rounds} done after {took:.0f} s", file=sys.stderr)
    env = environment(False, server_loop(), args.baseline_python)[:-1]
    env.append(f"- the fake servers on {server_loop()}, each its own process; clients on asyncio")
    print(report({c.key: c for c in table}, args, env))
    if args.json:
        raw = {"args": vars(args), "environment": env, "cells": [vars(c) for c in table]}
        Path(args.json).write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
