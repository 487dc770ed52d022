"""The routing benchmark (docs/client.md, rule FLEET): prompt tokens the servers processed for one
agent workload, routed by the client's rendezvous hashing against round-robin, and the ideal.

Run (a real llama-server and a model: LLAMAFAST_LLAMA_SERVER and LLAMAFAST_TEST_MODEL, as
tools/llama-server/build.sh prints them):
    python bench/fleet.py                       # 3 servers, 24 conversations x 4 turns, 2 processes
    python bench/fleet.py --servers 3 --conversations 24 --turns 4 --processes 2 --json out.json
    python bench/fleet.py --opening 40 --kill 2  # longer system prompts; a server killed

Each mode starts its own fresh servers (tests/_llama.py's `serve_model`: 2 slots, a 4,096-token
context, llama-server's default RAM prompt cache), so no cache carries from one mode to the next.
The conversations (a long system prompt of their own, a task, then one more user message per
turn after the model's answer) are split over --processes worker processes, each with its own
client, turns interleaved across its conversations (turn 1 of each, then turn 2 of each, ...).
`fleet`: one client with `urls` (every turn goes where the conversation's key points).
`round-robin`: the k-th request of the whole run (a counter the processes share, as a balancer
in front of the servers sees them) goes to server k mod n; with turns in lockstep and as many
conversations as a multiple of n it would send each one to the same server every turn, which
real concurrency does not, so `random` (a seeded random server per request, as a balancer sees
requests reordered by concurrency) is measured too. `--kill K` runs `fleet` once more and kills
the first server (SIGKILL) after K turns of every conversation. Every server is behind a relay
that counts the POSTs it took (each turn must be sent once). Processed: the sum of
`timings.prompt_n` over every turn. Ideal: each conversation's tokens computed once, the prompt
of its last turn (`cache_n + prompt_n`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import llamafast  # noqa: E402
from _llama import BINARY, MODEL, kill_server, serve_model  # noqa: E402  (the tests' servers)
from _loopback import RelayProxy  # noqa: E402
from llamafast import Assistant, ChatRequest, Config, InferConfig, Limits, System, User  # noqa: E402
from llamafast._core._fleet import normal_url  # noqa: E402

MODES = ("fleet", "round-robin", "random")
_COUNTER: Any = None  # round-robin's, shared by the worker processes
_BARRIER: Any = None  # --kill: the workers and the main process meet around the kill


def _share(counter: Any, barrier: Any) -> None:
    global _COUNTER, _BARRIER
    _COUNTER, _BARRIER = counter, barrier


def _next_server(mode: str, n: int, rng: random.Random) -> int:
    """The server a balancer in front would send the next request to."""
    if mode == "random":
        return rng.randrange(n)
    if mode == "fleet":
        return 0  # the one client with urls chooses
    with _COUNTER.get_lock():
        k = _COUNTER.value
        _COUNTER.value += 1
    return int(k % n)


def turn(i: int, answers: list[str], repeats: int = 12) -> ChatRequest:
    """The next turn of conversation `i` after its `answers` so far; its opening (the system
    prompt: an agent's instructions and tools) `repeats` sentences of about 14 tokens."""
    opening = f"You are agent {i}, one of many. Follow the plan step by step. " * repeats
    msgs: list[Any] = [System(opening), User(f"Task {i}: list the steps to sort {i} cards.")]
    for t, answer in enumerate(answers):
        msgs += [Assistant(answer), User(f"Step {t + 1} done. What next?")]
    return ChatRequest(None, msgs, temperature=0.0, seed=1, max_tokens=16)


def worker(
    mode: str, urls: list[str], mine: list[int], turns: int, rank: int, repeats: int, kill: int
) -> dict[str, Any]:
    """One process's conversations, turns interleaved: per conversation the server and the
    timings of each turn. With `kill`, after that many turns it waits while a server is
    killed."""
    limits = Limits(retries=0)
    if mode == "fleet":
        clients = [llamafast.Client(Config(InferConfig(urls=tuple(urls)), limits))]
    else:
        clients = [llamafast.Client(Config(InferConfig(url=u), limits)) for u in urls]
    answers: dict[int, list[str]] = {i: [] for i in mine}
    seen: dict[int, list[tuple[str, int, int]]] = {i: [] for i in mine}
    rng = random.Random(rank)
    with contextlib.ExitStack() as stack:
        for client in clients:
            stack.enter_context(client)
        for t in range(turns):
            if kill and t == kill:
                _BARRIER.wait(600)  # the main process kills a server now
                _BARRIER.wait(600)
            for i in mine:
                client = clients[_next_server(mode, len(clients), rng)]
                with client.stream(turn(i, answers[i], repeats)) as stream:
                    for _event in stream:
                        pass
                done = stream.completion
                assert done is not None and done.timings is not None
                answers[i].append(done.content or "")
                seen[i].append((stream.server, done.timings.prompt_n, done.timings.cache_n))
    return {str(i): v for i, v in seen.items()}


def run_mode(mode: str, args: argparse.Namespace, kill: int = 0) -> dict[str, Any]:
    """One mode on fresh servers, each behind a relay that counts the POSTs it took. With
    `kill`, the first server is killed (SIGKILL) after that many turns, its relay refusing
    from then on."""
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(serve_model()) for _ in range(args.servers)]
        relays = [stack.enter_context(RelayProxy(int(u.rsplit(":", 1)[1]))) for u in servers]
        urls = [r.url for r in relays]
        parts = [list(range(p, args.conversations, args.processes)) for p in range(args.processes)]
        ctx = multiprocessing.get_context("spawn")
        counter, barrier = ctx.Value("q", 0), ctx.Barrier(args.processes + 1)
        with ctx.Pool(args.processes, _share, (counter, barrier)) as pool:
            jobs = [
                pool.apply_async(worker, (mode, urls, mine, args.turns, rank, args.opening, kill))
                for rank, mine in enumerate(parts)
            ]
            if kill:
                barrier.wait(1800)
                kill_server(servers[0])
                relays[0].stop()
                barrier.wait(600)
            seen: dict[str, Any] = {}
            for job in jobs:
                seen.update(job.get(timeout=1800))
        posts = sum(r.requests.count("POST /v1/chat/completions") for r in relays)
    processed = sum(p for turns in seen.values() for _, p, _ in turns)
    ideal = sum(turns[-1][1] + turns[-1][2] for turns in seen.values())
    # On one server while it was up: one server before the kill, one after (the same, unless
    # it was the killed one).
    killed = normal_url(urls[0]) if kill else None
    sticky = 0
    for turns in seen.values():
        before = {s for s, _, _ in turns[: kill or None]}
        after = {s for s, _, _ in turns[kill:]} if kill else before
        sticky += len(before) == len(after) == 1 and (before == after or before == {killed})
    return {
        "mode": mode if not kill else f"{mode}, a server killed after turn {kill}",
        "processed": processed,
        "ideal": ideal,
        "sticky": sticky,
        "posts": posts,
        "turns": sum(len(t) for t in seen.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=3, choices=range(2, 9))
    parser.add_argument("--conversations", type=int, default=24, choices=range(1, 1001))
    parser.add_argument("--turns", type=int, default=4, choices=range(2, 51))
    parser.add_argument("--processes", type=int, default=2, choices=range(1, 17))
    parser.add_argument(
        "--opening",
        type=int,
        default=12,
        choices=range(1, 101),
        help="sentences (about 14 tokens each) in each conversation's system prompt",
    )
    parser.add_argument(
        "--kill",
        type=int,
        default=0,
        help="also run the client's routing with the first server killed after this many turns",
    )
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    if not (BINARY and MODEL):
        sys.exit(
            "set LLAMAFAST_LLAMA_SERVER and LLAMAFAST_TEST_MODEL (tools/llama-server/build.sh)"
        )
    rows = [run_mode(mode, args) for mode in MODES]
    if args.kill:
        rows.append(run_mode("fleet", args, args.kill))
    print(
        f"{args.servers} servers, {args.conversations} conversations x {args.turns} turns, "
        f"{args.processes} processes, openings of {args.opening} sentences; prompt tokens "
        "processed (sum of timings.prompt_n)"
    )
    print(f"{'routing':<12} {'processed':>10} {'x ideal':>8} {'one server':>11} {'POSTs':>7}")
    for row in rows:
        ratio = row["processed"] / row["ideal"]
        stuck = f"{row['sticky']}/{args.conversations}"
        posts = f"{row['posts']}/{row['turns']}"
        print(f"{row['mode']:<12} {row['processed']:>10} {ratio:>8.3f} {stuck:>11} {posts:>7}")
    print(f"{'ideal':<12} {rows[0]['ideal']:>10}")
    fleet = rows[0]
    for row in rows[1 : len(MODES)]:
        print(f"{row['mode']} / fleet: {row['processed'] / fleet['processed']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
