# Strategy: several llama-servers serving one model (docs/client.md, rule FLEET). The choice of
# server is rendezvous (highest-random-weight) hashing: each server scores a conversation's key
# by a stable hash of the key and the server's URL in its normal form, and the highest score
# wins. Every process with the same urls thus sends every turn of a conversation to the server
# whose prompt cache holds it, without talking to the others; removing a server moves only its
# own keys. Two bounds keep the choice from queueing behind one server: a server without a free
# slot (by this client's own count of its requests against the server's slot count, learnt
# once) gives way to the least busy other one that has one, and a server that refuses
# connections is skipped until its back-off ends. The functions are pure; `Fleet` holds the
# counts and the back-offs of one client, under one lock (the sync client is shared by threads).
"""The choice of server among several: `choose`, `locate`, `conversation_key`, `Fleet`."""

from __future__ import annotations

import errno
import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._config import Config
from .._url import Target
from .._values import ChatRequest, System, User
from ._session import Core

__all__ = [
    "DOWN_MAX_S",
    "DOWN_S",
    "Fleet",
    "ServerState",
    "choose",
    "conversation_key",
    "locate",
    "normal_url",
    "refused",
    "score",
]

DOWN_S = 1.0  # a server that refused is skipped this long, doubled per refusal in a row,
DOWN_MAX_S = 30.0  # at most this long; then it is tried again
_UNREACHABLE = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH}


@dataclass(frozen=True, slots=True)
class ServerState:
    """One of the client's servers (`client.servers()`): `url` in its normal form (no user
    or password), `up` (False while the client skips it after a refused connection), `slots`
    (its slot count, 0 until learnt) and `busy` (this client's requests on it now)."""

    url: str
    up: bool
    slots: int
    busy: int


def normal_url(url: str) -> str:
    """`url` in its normal form: scheme and host lower-cased, the port written out, no
    trailing "/" (nor the final /v1), no user or password. What the hash reads and what
    `ServerState.url` and `stream.server` show."""
    return _normal(Target.parse(url))


def _normal(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    return f"{target.scheme}://{host}:{target.port}{target.prefix}{target.query}"


def score(key: str, url: str) -> int:
    """Server `url`'s weight for `key`: a stable hash (blake2b, never Python's seeded
    `hash()`), so every process ranks the servers alike."""
    digest = hashlib.blake2b(f"{key}\n{url}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def conversation_key(req: ChatRequest) -> str:
    """The key that keeps `req`'s conversation on one server: `req.conversation`, or a hash of
    its first system message and first user message (the same in every turn, which only adds
    messages after them, and in every process)."""
    if req.conversation is not None:
        return req.conversation
    opening: list[object] = []
    for kind in (System, User):
        first = next((m for m in req.messages if isinstance(m, kind)), None)
        if first is not None:
            content = first.content
            opening.append(content if isinstance(content, str) else repr(content))
    text = json.dumps(opening, ensure_ascii=False)
    return "m:" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _free(busy: int, slots: int | None) -> bool:
    """A server has a free slot: its slot count unknown, or more than this client's requests."""
    return not slots or busy < slots


def choose(
    key: str | None,
    urls: Sequence[str],
    busy: Sequence[int],
    slots: Sequence[int | None],
    up: Sequence[bool],
) -> int:
    """The server for `key` (index into `urls`, each in normal form): the highest scoring one
    that is `up` (all down: the highest scoring anyway), unless it has no free slot and
    another up one has, then the least busy of those (ties to the higher score). `key` None
    (a request of no conversation): the least busy up server, the first in urls on a tie."""
    if key is None:
        ranked = list(range(len(urls)))
    else:
        ranked = sorted(range(len(urls)), key=lambda i: score(key, urls[i]), reverse=True)
    live = [i for i in ranked if up[i]] or ranked
    best = live[0]
    if key is not None and _free(busy[best], slots[best]):
        return best
    free = [i for i in live if _free(busy[i], slots[i])]
    if not free:
        return best
    return min(free, key=lambda i: busy[i])  # min keeps the first (the higher ranked) on a tie


def locate(slot: int, counts: Sequence[int | None]) -> tuple[int, int] | None:
    """Numbered `slot` across servers with `counts` slots each, in the order of urls (the
    first server's slots first): (server, its own slot); None when a count it needs is
    unknown (to be learnt); past the total: ValueError naming it."""
    first = 0
    for index, count in enumerate(counts):
        if count is None:
            return None
        if slot < first + count:
            return index, slot - first
        first += count
    raise ValueError(
        f"slot {slot} is past the {first} slots of the {len(counts)} servers in infer.urls "
        f"(numbered slots count across them in order: 0 to {first - 1})"
    )


def refused(err: BaseException) -> bool:
    """A failure that says the server is not there (a refused or unreachable connection),
    so another server may take the request at once."""
    return isinstance(err, OSError) and (
        isinstance(err, ConnectionRefusedError) or err.errno in _UNREACHABLE
    )


class Fleet:
    """One client's servers (their `Core`s, in the order of urls): this client's requests on
    each (`busy`), and the back-off of each that refused. `several`: more than one server (one
    server is never rerouted, only counted)."""

    def __init__(self, cores: Sequence[Core]) -> None:
        self.cores = tuple(cores)
        self.urls = tuple(_normal(core.target) for core in cores)
        self.several = len(cores) > 1
        n = len(cores)
        self.busy = [0] * n
        self._down_until = [0.0] * n
        self._refusals = [0] * n
        self._lock = threading.Lock()
        for index, core in enumerate(cores):
            core.fleet = self
            core.index = index
            core.server = self.urls[index]
            core.lines = cores[0].lines  # numbered slots are the fleet's: one line per slot

    @classmethod
    def of(cls, cfg: Config, sink: Callable[[int], Any] | None = None) -> Fleet:
        """The servers of `cfg`: its `urls`, else its one `url`."""
        urls = cfg.infer.urls or (cfg.infer.url,)
        return cls([Core(cfg, sink=sink, url=url) for url in urls])

    def _up(self, now: float) -> list[bool]:
        return [now >= until for until in self._down_until]

    def pick(self, key: str | None, now: float, leaving: int | None = None) -> int:
        """The server for `key` now (`choose`), its busy count taken; `leaving`: the server
        whose count this request held (given back first)."""
        with self._lock:
            if leaving is not None:
                self.busy[leaving] -= 1
            slots = [core.slot_count for core in self.cores]
            index = choose(key, self.urls, self.busy, slots, self._up(now))
            self.busy[index] += 1
            return index

    def any_up(self, now: float | None = None) -> Core:
        """A server for a request of no conversation (props, models, counts): the least busy
        one that is up (`now`: the clock's, else the servers')."""
        now = self.cores[0].clock() if now is None else now
        with self._lock:
            slots = [core.slot_count for core in self.cores]
            return self.cores[choose(None, self.urls, self.busy, slots, self._up(now))]

    def up_cores(self) -> list[Core]:
        """The servers that are up (all of them when none is)."""
        with self._lock:
            up = self._up(self.cores[0].clock())
        return [c for c, u in zip(self.cores, up, strict=True) if u] or list(self.cores)

    def take(self, index: int) -> None:
        """A request pinned to server `index` (a numbered slot) counts there."""
        with self._lock:
            self.busy[index] += 1

    def done(self, index: int) -> None:
        with self._lock:
            self.busy[index] -= 1

    def refused(self, index: int, now: float) -> None:
        """Server `index` refused a connection: skipped for DOWN_S, doubled per refusal in a
        row, at most DOWN_MAX_S."""
        with self._lock:
            self._refusals[index] += 1
            wait = min(DOWN_MAX_S, DOWN_S * (1 << min(self._refusals[index] - 1, 16)))
            self._down_until[index] = now + wait

    def answered(self, index: int) -> None:
        """Server `index` answered: it is up, its back-off starts over."""
        if self._refusals[index]:
            with self._lock:
                self._refusals[index] = 0
                self._down_until[index] = 0.0

    def states(self) -> tuple[ServerState, ...]:
        """Each server's `ServerState`, in the order of urls."""
        with self._lock:
            up = self._up(self.cores[0].clock())
            return tuple(
                ServerState(url, up[i], self.cores[i].slot_count or 0, self.busy[i])
                for i, url in enumerate(self.urls)
            )
