# The choice of server among several (docs/client.md, rule FLEET), as a pure function: the same
# conversation key picks the same server in every process (no dependence on Python's hash seed),
# keys spread evenly, removing a server moves only its keys, a server without a free slot gives
# way to the least busy other one, numbered slots count across the servers in the order of urls.
"""The rendezvous choice of `_core._fleet`, and `[infer] urls` in the config."""

from __future__ import annotations

import collections
import os
import subprocess
import sys

import pytest

from llamafast import Config, InferConfig, System, User, build_body
from llamafast._core._fleet import choose, conversation_key, locate, normal_url, score
from llamafast._values import ChatRequest

URLS = ("http://gpu0:8080", "http://gpu1:8080", "http://gpu2:8080")
KEYS = [f"conversation {i}" for i in range(3000)]


def _pick(key: str, urls: tuple[str, ...] = URLS, **kw: object) -> int:
    n = len(urls)
    busy = kw.get("busy", [0] * n)
    slots = kw.get("slots", [4] * n)
    up = kw.get("up", [True] * n)
    return choose(key, urls, busy, slots, up)  # type: ignore[arg-type]


def test_the_same_key_picks_the_same_server_whatever_the_hash_seed() -> None:
    mine = [_pick(k) for k in KEYS[:50]]
    code = (
        "from llamafast._core._fleet import choose\n"
        f"urls = {URLS!r}\n"
        f"print([choose(k, urls, [0]*3, [4]*3, [True]*3) for k in {KEYS[:50]!r}])"
    )
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == repr(mine)


def test_keys_spread_evenly_over_three_servers() -> None:
    counts = collections.Counter(_pick(k) for k in KEYS)
    assert sorted(counts) == [0, 1, 2]
    for n in counts.values():
        assert abs(n - 1000) < 120  # about a third each


def test_removing_a_server_moves_only_its_keys() -> None:
    before = {k: URLS[_pick(k)] for k in KEYS}
    two = (URLS[0], URLS[2])
    after = {k: two[_pick(k, two)] for k in KEYS}
    for k in KEYS:
        if before[k] != URLS[1]:
            assert after[k] == before[k]


def test_a_server_that_is_down_is_skipped_for_the_next_in_rank() -> None:
    key = KEYS[0]
    first = _pick(key)
    up = [i != first for i in range(3)]
    second = _pick(key, up=up)
    assert second != first
    ranked = sorted(range(3), key=lambda i: score(key, URLS[i]), reverse=True)
    assert second == ranked[1]
    assert _pick(key, up=[False] * 3) == first  # all down: the preferred one anyway


def test_a_busy_server_gives_way_to_the_least_busy_other() -> None:
    key = KEYS[0]
    first = _pick(key)
    busy = [1, 1, 1]
    busy[first] = 4  # its 4 slots all held by this client
    others = [i for i in range(3) if i != first]
    busy[others[0]] = 3
    assert _pick(key, busy=busy) == others[1]
    busy[others[1]] = 2
    assert _pick(key, busy=busy) == others[1]
    busy[others[0]], busy[others[1]] = 4, 4  # none free: stay where the cache is
    assert _pick(key, busy=busy) == first
    busy[first] = 3  # a free slot again: back home
    assert _pick(key, busy=busy) == first


def test_numbered_slots_count_across_servers_in_the_order_of_urls() -> None:
    counts = [2, 3, 1]
    assert [locate(s, counts) for s in range(6)] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
        (1, 2),
        (2, 0),
    ]
    with pytest.raises(ValueError, match="6 slots"):
        locate(6, counts)
    assert locate(1, [2, None, 1]) == (0, 1)
    assert locate(3, [2, None, 1]) is None  # the second server's count must be learnt first


def test_the_normal_form_of_a_url() -> None:
    assert normal_url("HTTP://GPU0.Example:8080/") == "http://gpu0.example:8080"
    assert normal_url("http://u:secret@gpu0") == "http://gpu0:80"
    assert normal_url("https://gpu0/v1") == "https://gpu0:443"
    assert normal_url("http://[::1]:81/base/") == "http://[::1]:81/base"


def test_the_key_comes_from_the_first_messages_or_the_conversation() -> None:
    turn1 = ChatRequest(None, [System("be brief"), User("hello")])
    turn3 = ChatRequest(None, [*turn1.messages, User("more"), User("again")])
    assert conversation_key(turn1) == conversation_key(turn3)
    other = ChatRequest(None, [System("be brief"), User("bye")])
    assert conversation_key(other) != conversation_key(turn1)
    named = ChatRequest(None, [User("x")], conversation="agent-7")
    assert conversation_key(named) == "agent-7"


def test_the_conversation_is_never_sent_and_must_be_text() -> None:
    plain = build_body(Config(), ChatRequest(None, [User("x")]))
    assert build_body(Config(), ChatRequest(None, [User("x")], conversation="c")) == plain
    with pytest.raises(ValueError, match="conversation must be a string or None, not 7"):
        build_body(Config(), ChatRequest(None, [User("x")], conversation=7))  # type: ignore[arg-type]


# --- the config ---------------------------------------------------------------------------------


def test_urls_from_toml(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "llamafast.toml"  # type: ignore[operator]
    path.write_text('[infer]\nurls = ["http://gpu0:8080", "http://gpu1:8080"]\n')
    cfg = Config.from_toml(path)
    assert cfg.infer.urls == ("http://gpu0:8080", "http://gpu1:8080")


def test_url_and_urls_both_given_is_refused() -> None:
    with pytest.raises(ValueError, match=r"infer\.url.*infer\.urls"):
        InferConfig(url="http://a:1", urls=("http://b:2",))


def test_a_bad_url_in_urls_is_named() -> None:
    with pytest.raises(ValueError, match=r"infer\.urls\[1\].*ftp://b"):
        InferConfig(urls=("http://a:1", "ftp://b"))
    with pytest.raises(ValueError, match=r"infer\.urls"):
        InferConfig(urls="http://a:1")  # type: ignore[arg-type]
