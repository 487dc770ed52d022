#!/usr/bin/env python3
# ruff: noqa: E501
"""Start llama-server with the tiny model, check what the llamafast tests need, stop it.

usage: verify.py BINARY MODEL   (stdlib only; exits non-zero on a failed check)
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import tempfile
import time

BINARY, MODEL = sys.argv[1], sys.argv[2]
FAILS: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, extra: list[str]) -> None:
        self.port = free_port()
        self.cmd = [
            BINARY,
            "-m",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--jinja",
            "--reasoning-format",
            "deepseek",
            "-np",
            "2",
            "-c",
            "4096",
            *extra,
        ]
        self.log = tempfile.TemporaryFile()

    def __enter__(self) -> Server:
        print("$ " + " ".join(self.cmd), flush=True)
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                if self.request("GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                print(self.log.read().decode("utf-8", "replace")[-4000:])
                raise SystemExit("server did not start")
            time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        print(f"server stopped (rc {self.proc.returncode})", flush=True)

    def logtext(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def request(
        self, method: str, path: str, body: object = None, headers: dict[str, str] | None = None
    ) -> tuple[int, object]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            data = None if body is None else json.dumps(body)
            h = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, data, h)
            r = conn.getresponse()
            raw = r.read().decode("utf-8", "replace")
            try:
                return r.status, json.loads(raw)
            except ValueError:
                return r.status, raw
        finally:
            conn.close()

    def stream(self, body: dict, on_chunk=None, headers: dict[str, str] | None = None):
        """Stream a chat; returns (status, reasoning, content, finish_reason, chunks)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request(
            "POST",
            "/v1/chat/completions",
            json.dumps({**body, "stream": True}),
            {"Content-Type": "application/json", **(headers or {})},
        )
        r = conn.getresponse()
        if r.status != 200:
            return r.status, "", "", None, [r.read().decode("utf-8", "replace")]
        reasoning, content, finish, chunks = [], [], None, []
        for line in r:
            line = line.decode("utf-8", "replace").strip()
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            if payload == "[DONE]":
                break
            chunk = json.loads(payload)
            chunks.append(chunk)
            for ch in chunk.get("choices", []):
                d = ch.get("delta", {})
                if d.get("reasoning_content"):
                    reasoning.append(d["reasoning_content"])
                if d.get("content"):
                    content.append(d["content"])
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
            if on_chunk:
                on_chunk(chunk, reasoning, content)
        conn.close()
        return 200, "".join(reasoning), "".join(content), finish, chunks, reasoning


def msg(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def main() -> None:
    with Server([]) as srv:
        st, body = srv.request("GET", "/health")
        check(st == 200, f"GET /health -> {st} {body}")
        st, slots = srv.request("GET", "/slots")
        check(
            st == 200 and isinstance(slots, list) and len(slots) == 2,
            f"GET /slots -> {st}, {len(slots) if isinstance(slots, list) else slots} slots",
        )
        st, props = srv.request("GET", "/props")
        print(
            "props.chat_template_caps:",
            props.get("chat_template_caps") if isinstance(props, dict) else props,
        )

        # plain stream, no chat_template_kwargs (template opens <think> by default)
        r = srv.stream({"messages": msg("Say hello."), "max_tokens": 32})
        print(f"  no kwargs: reasoning={r[1][:80]!r} content={r[2][:80]!r} finish={r[3]}")
        check(r[0] == 200 and (r[1] or r[2]) and r[3] == "length", "stream without kwargs")

        # thinking on
        r = srv.stream(
            {
                "messages": msg("Think step by step: what is 17 * 23?"),
                "max_tokens": 48,
                "chat_template_kwargs": {"enable_thinking": True},
            }
        )
        print(
            f"  thinking: reasoning={r[1][:80]!r} content={r[2][:80]!r} finish={r[3]} "
            f"reasoning deltas={len(r[5])}"
        )
        check(
            r[0] == 200 and len(r[5]) > 10 and not r[2],
            "stream with enable_thinking=true reasons >10 tokens",
        )
        last = r[4][-1]
        print(
            "  last chunk keys:",
            list(last.keys()),
            "timings:",
            last.get("timings"),
            "usage:",
            last.get("usage"),
        )

        # thinking off
        r = srv.stream(
            {
                "messages": msg("Say hello."),
                "max_tokens": 32,
                "chat_template_kwargs": {"enable_thinking": False},
            }
        )
        print(f"  no thinking: reasoning={r[1][:80]!r} content={r[2][:80]!r} finish={r[3]}")
        check(
            r[0] == 200 and not r[1] and r[2] != "",
            "stream with enable_thinking=false: content only",
        )

        # control endpoint: end reasoning after 20 reasoning deltas
        state = {"sent": None, "after_reasoning": 0, "after_content": 0}

        def on_chunk(chunk, reasoning, content):
            if state["sent"] is None and len(reasoning) >= 20:
                st, resp = srv.request(
                    "POST",
                    "/v1/chat/completions/control",
                    {"id": chunk["id"], "action": "reasoning_end"},
                )
                state["sent"] = (st, resp, len(reasoning))
            elif state["sent"] is not None:
                state["after_reasoning"] = len(reasoning) - state["sent"][2]
                state["after_content"] = len(content)

        r = srv.stream(
            {
                "messages": msg("Think step by step: what is 17 * 23?"),
                "max_tokens": 200,
                "reasoning_control": True,
                "chat_template_kwargs": {"enable_thinking": True},
            },
            on_chunk,
        )
        print(
            f"  control: sent={state['sent']} reasoning deltas after={state['after_reasoning']} "
            f"content deltas after={state['after_content']} finish={r[3]}"
        )
        print(f"  control: content={r[2][:80]!r}")
        check(
            state["sent"] is not None
            and state["sent"][0] == 200
            and state["sent"][1].get("success") is True,
            "POST /v1/chat/completions/control reasoning_end -> success",
        )
        check(
            state["after_reasoning"] < 10 and state["after_content"] > 0,
            "after reasoning_end the stream moves to content",
        )

        # control without reasoning_control armed
        def on_chunk2(chunk, reasoning, content):
            if state.get("sent2") is None and len(reasoning) >= 5:
                state["sent2"] = srv.request(
                    "POST",
                    "/v1/chat/completions/control",
                    {"id": chunk["id"], "action": "reasoning_end"},
                )

        srv.stream(
            {
                "messages": msg("Think."),
                "max_tokens": 30,
                "chat_template_kwargs": {"enable_thinking": True},
            },
            on_chunk2,
        )
        print("  control without reasoning_control:", state.get("sent2"))
        st, resp = srv.request(
            "POST",
            "/v1/chat/completions/control",
            {"id": "chatcmpl-nope", "action": "reasoning_end"},
        )
        print("  control on unknown id:", st, resp)

        # server-side per-request budget
        r = srv.stream(
            {
                "messages": msg("Think."),
                "max_tokens": 80,
                "thinking_budget_tokens": 10,
                "chat_template_kwargs": {"enable_thinking": True},
            }
        )
        print(
            f"  thinking_budget_tokens=10: reasoning deltas={len(r[5])} content={r[2][:60]!r} finish={r[3]}"
        )

        # grammar (no thinking)
        r = srv.stream(
            {
                "messages": msg("yes or no?"),
                "max_tokens": 16,
                "grammar": 'root ::= "yes" | "no"',
                "chat_template_kwargs": {"enable_thinking": False},
            }
        )
        print(f"  grammar: content={r[2]!r} finish={r[3]}")
        check(r[2] in ("yes", "no") and r[3] == "stop", "grammar steers the output")

        # grammar with thinking on
        r = srv.stream(
            {
                "messages": msg("yes or no?"),
                "max_tokens": 64,
                "grammar": 'root ::= "yes" | "no"',
                "reasoning_control": True,
                "chat_template_kwargs": {"enable_thinking": True},
            }
        )
        print(f"  grammar+thinking: reasoning deltas={len(r[5])} content={r[2]!r} finish={r[3]}")

        # logit_bias: force <|im_end|> -> immediate stop; force a word
        st, tok = srv.request("POST", "/tokenize", {"content": "<|im_end|>", "parse_special": True})
        print("  /tokenize <|im_end|> (parse_special):", st, tok)
        im_end = tok["tokens"][0]
        r = srv.stream(
            {
                "messages": msg("hi"),
                "max_tokens": 16,
                "logit_bias": [[im_end, 100]],
                "chat_template_kwargs": {"enable_thinking": False},
            }
        )
        print(f"  logit_bias im_end+100: content={r[2]!r} finish={r[3]}")
        check(r[3] == "stop", "logit_bias can make it stop (<|im_end|> +100)")
        st, tok = srv.request("POST", "/tokenize", {"content": " the"})
        the = tok["tokens"]
        print("  /tokenize ' the':", the)
        r = srv.stream(
            {
                "messages": msg("hi"),
                "max_tokens": 8,
                "logit_bias": [[the[0], 100]],
                "chat_template_kwargs": {"enable_thinking": False},
            }
        )
        print(f"  logit_bias {the[0]} (' the') +100: content={r[2]!r} finish={r[3]}")
        check(
            len(the) == 1 and r[2].strip() == " ".join(["the"] * 8),
            "logit_bias by token id steers the output",
        )

        # two slots in parallel + id_slot
        r = srv.stream(
            {
                "messages": msg("hi"),
                "max_tokens": 8,
                "id_slot": 1,
                "chat_template_kwargs": {"enable_thinking": False},
            }
        )
        check(r[0] == 200, "id_slot=1 works")
        r = srv.stream(
            {
                "messages": msg("hi"),
                "max_tokens": 8,
                "id_slot": 2,
                "chat_template_kwargs": {"enable_thinking": False},
            }
        )
        print(
            f"  id_slot=2 (nonexistent): status={r[0]} content={r[2][:40]!r} finish={r[3]} last={str(r[4][-1])[:300]}"
        )

        log = srv.logtext()
        print("--- server log (excerpt) ---")
        for line in log.splitlines():
            if any(
                k in line
                for k in ("chat format", "thinking", "reasoning", "error", "warn", "template")
            ):
                print("  " + line[:200])

    with Server(["--api-key", "k"]) as srv:
        r = srv.stream({"messages": msg("hi"), "max_tokens": 4})
        check(r[0] == 401, f"--api-key k: request without key -> {r[0]}")
        r = srv.stream(
            {"messages": msg("hi"), "max_tokens": 4}, headers={"Authorization": "Bearer k"}
        )
        check(r[0] == 200, f"--api-key k: request with key -> {r[0]}")
        st, _ = srv.request("GET", "/health")
        print(f"  /health without key under --api-key: {st}")

    print("FAILED: " + "; ".join(FAILS) if FAILS else "ALL CHECKS PASSED")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
