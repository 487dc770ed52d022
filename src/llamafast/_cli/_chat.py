"""`llamafast chat`: stream one answer from a running llama-server into the display.

The options become a Config (--config FILE, else ./llamafast.toml, else the defaults; then the
options given) and a ChatRequest, both checked by `build_body` before anything is sent, so a bad
value is a usage error. The answer alone goes to stdout, everything else (status, reasoning,
the summary) to stderr. A failed connection says in words what a failed TLS handshake means.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import ssl
import time
from typing import IO, Any

from .._body import build_body
from .._config import Config
from .._errors import ConnectError, InferError, SseError
from .._strict_json import parse
from .._url import redact
from .._values import ChatMessage, ChatRequest, System, User
from ._display import Stats, add_options, make_view
from ._failures import CliError, Failed, UsageError, option

__all__ = ["API_KEY_VARIABLE", "CONFIG_FILE", "CONFIG_HELP", "add_parser", "chat"]

API_KEY_VARIABLE = "LLAMA_API_KEY"
"""Where `chat` finds the API key when --api-key is not given: llama-server's own variable."""
CONFIG_FILE = "llamafast.toml"
"""What `chat` reads from the current directory when no --config is given (the README's file)."""
CONFIG_HELP = f"read [infer] and [limits] from FILE (default: ./{CONFIG_FILE} when present)"
"""--config's help, before the command and after `chat`."""


def _json_schema(path: str) -> dict[str, Any]:
    """`response_format` asking for JSON that follows the JSON Schema in the file `path`."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as err:
        raise CliError(type(err).__name__, f"cannot read {path!r}: {err.strerror}") from None
    try:  # docs/cli.md, rule JSON-FILES: strict, nested past MAX_DEPTH refused
        schema = parse(data.decode("utf-8"), data)
    except ValueError as err:  # not UTF-8, not JSON, nested too deep
        raise CliError("ValueError", f"{path!r} is not a JSON file: {err}") from None
    if not isinstance(schema, dict):
        kind = type(schema).__name__
        raise CliError("ValueError", f"{path!r} must hold a JSON Schema object, not a {kind}")
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}


def _api_key(args: argparse.Namespace, cfg: Config) -> str | None:
    """--api-key, else LLAMA_API_KEY (the variable llama-server itself reads), else the
    config's."""
    if args.api_key is not None:
        return str(args.api_key)
    return os.environ.get(API_KEY_VARIABLE) or cfg.infer.api_key


def _config(args: argparse.Namespace) -> Config:
    """--config FILE, else ./llamafast.toml when there is one, else the defaults; a file that
    cannot be read or holds a bad value is a failure (status 1)."""
    path = args.config
    if path is None and os.path.isfile(CONFIG_FILE):
        path = CONFIG_FILE
    try:
        return Config() if path is None else Config.from_toml(path)
    except (OSError, ValueError) as err:
        raise CliError.of(err, "bad configuration: ") from None


def _with_options(args: argparse.Namespace, cfg: Config, budget: int | None) -> Config:
    """`cfg` with the options given (and $LLAMA_API_KEY); a bad value is a usage error (2)."""
    if args.url is not None and "://" not in args.url:  # docs/cli.md, rule USAGE
        raise UsageError(
            "ValueError",
            f"--url needs its scheme: write http://{redact(args.url)} (or https://)",
        )
    try:
        infer = cfg.infer
        if args.url is not None:  # the one server, in place of the config's url or urls
            infer = dataclasses.replace(infer, url=args.url, urls=())
        infer = dataclasses.replace(infer, api_key=_api_key(args, cfg))
        if args.ca_file is not None:
            infer = dataclasses.replace(infer, ca_file=args.ca_file)
        limits = cfg.limits
        if budget is not None:
            limits = dataclasses.replace(limits, thinking_budget=budget)
        return Config(infer=infer, limits=limits)
    except ValueError as err:
        raise UsageError.of(err, "bad option: ") from None


def chat(args: argparse.Namespace, out: IO[str], side: IO[str]) -> int:
    if args.any_slot and args.slot is not None:
        raise UsageError("ValueError", "--slot and --any-slot cannot both be given")
    slot = None if args.any_slot else option("--slot", args.slot or "0", int)
    max_tokens = option("--max-tokens", args.max_tokens, int)
    temperature = option("--temperature", args.temperature, float)
    seed = option("--seed", args.seed, int)
    budget = option("--thinking-budget", args.thinking_budget, int)
    cfg = _with_options(args, _config(args), budget)
    messages: list[ChatMessage] = [User(args.prompt)]
    if args.system:
        messages.insert(0, System(args.system))
    req = ChatRequest(
        slot,
        messages,
        thinking=args.think,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
        response_format=None if args.json_schema is None else _json_schema(args.json_schema),
    )
    try:  # every bad value is refused here, before anything is sent
        build_body(cfg, req)
    except ValueError as err:  # the request's values are the command line's
        raise UsageError.of(err, "bad request: ") from None
    try:  # looked up at run time so the tests can stand a fake client in
        client_cls = importlib.import_module("llamafast._client").Client
    except (ImportError, AttributeError) as err:
        raise CliError.of(err, "the chat client is not available: ") from None
    # the answer alone on stdout; the status, reasoning and summary on stderr
    view = make_view(args, out, flush=True, side=side)
    start = time.perf_counter()
    try:
        with client_cls(cfg).stream(req) as stream:
            stats = Stats(events=0)
            for ev in stream:
                stats.events += 1
                view.event(ev)
            completion = stream.completion
    except ConnectError as err:
        raise Failed(view, err, _connect_message(err)) from None
    # ValueError: a slot the server does not have, refused before anything is sent.
    except (SseError, InferError, OSError, ValueError, KeyboardInterrupt) as err:
        raise Failed(view, err) from None
    stats.wall_s = time.perf_counter() - start
    view.done(completion, stats)
    return 0


# OpenSSL's reasons for a handshake whose answer is not TLS at all (a plain-HTTP server's
# `HTTP/1.1 400` read as a TLS record).
_NOT_TLS = {
    "WRONG_VERSION_NUMBER",
    "HTTP_REQUEST",
    "PACKET_LENGTH_TOO_LONG",
    "RECORD_LAYER_FAILURE",
}


def _connect_message(err: ConnectError) -> str:
    """ConnectError's message, saying in words what a failed TLS handshake means."""
    tls = err.error
    if not isinstance(tls, ssl.SSLError):
        return str(err)
    if isinstance(tls, ssl.SSLCertVerificationError):
        why = "the server's certificate was not accepted"
    elif tls.reason in _NOT_TLS:
        why = "the server does not speak TLS (try http://)"
    else:
        why = "the TLS handshake failed"
    return f"could not connect to the server {err.url}: {why} ({type(tls).__name__}: {tls})"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`chat` and its options, on the command line's subparsers."""
    cp = sub.add_parser(
        "chat",
        help="stream an answer from a running llama-server",
        description="Stream a chat completion from a running llama-server.",
    )
    cp.add_argument("prompt", help="the user message")
    cp.add_argument("--url", help="the server (default: the config's, http://127.0.0.1:8080)")
    cp.add_argument("--slot", help="the server slot to use (default: 0)")
    cp.add_argument(
        "--any-slot",
        action="store_true",
        help="let the server pick the slot (the one whose cache fits the prompt best)",
    )
    cp.add_argument("--think", action="store_true", help="let the model reason first")
    cp.add_argument("--system", help="a system message")
    cp.add_argument("--max-tokens", metavar="N", help="most tokens to generate for this request")
    cp.add_argument("--temperature", metavar="T", help="sampling temperature for this request")
    cp.add_argument("--seed", metavar="N", help="sampling seed: the same seed, the same answer")
    cp.add_argument(
        "--json-schema",
        metavar="FILE.json",
        help="answer with JSON following the JSON Schema in FILE (response_format json_schema)",
    )
    cp.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"the server's API key (default: ${API_KEY_VARIABLE}, then the config's)",
    )
    cp.add_argument("--thinking-budget", metavar="N", help="reasoning tokens before reasoning_end")
    # given after the command too; SUPPRESS keeps a value given before it
    cp.add_argument("--config", metavar="FILE.toml", default=argparse.SUPPRESS, help=CONFIG_HELP)
    cp.add_argument(
        "--ca-file",
        metavar="FILE.pem",
        help="trust the CA certificates in FILE for an https:// server (default: the config's)",
    )
    add_options(cp)
    cp.set_defaults(run=chat, command_parser=cp)
