"""`python -m llamafast replay|chat`: the display, --json, and one line + exit 1 for each failure.

Run: python -m pytest -q tests/test_cli.py

In-process runs call `llamafast.__main__.main(argv, out)` with the twin of the `impl` fixture
patched in; subprocess runs (`sys.executable -m llamafast`) prove the installed entry point and
that no failure ends in a traceback.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import os
import socket
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import llamafast
from _recordings import recorded_reports
from _scripts import interruptible
from llamafast import (
    Completion,
    ConnectError,
    Content,
    FinishReason,
    Progress,
    Queued,
    Reasoning,
    Retrying,
    ThinkingCapped,
    Timings,
    TokenLogprob,
    ToolCallDelta,
    Usage,
    Waiting,
    _cli,
)
from llamafast.__main__ import main
from llamafast._cli import _chat, _display, _main, _replay

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
STREAMS = [
    "content_only",
    "reasoning_then_content",
    "tool_call",
    "length",
    "long_prompt_progress",
    "usage_chunk",
    "thinking_capped",
]


def expected(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / "expected" / f"{name}.json").read_text("utf-8"))


def http_response(
    body: bytes, status: str = "200 OK", content_type: str = "text/event-stream"
) -> bytes:
    """A raw HTTP/1.1 response carrying `body` in chunked encoding, as llama-server sends it."""
    head = (
        f"HTTP/1.1 {status}\r\nServer: llama.cpp\r\nContent-Type: {content_type}\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 300]), body[i : i + 300])
        for i in range(0, len(body), 300)
    )
    return head + chunks + b"0\r\n\r\n"


CHUNK = (
    '{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"hi"}}],'
    '"created":1,"id":"chatcmpl-x","model":"m","object":"chat.completion.chunk"}'
)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process, replay's pauses are not taken (the `sleeps` fixture records them)."""
    monkeypatch.setattr(_replay, "_sleep", lambda seconds: None)


@pytest.fixture
def twin(impl: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """The CLI with `impl`'s ChatStream in place of the default one."""
    monkeypatch.setattr(llamafast, "ChatStream", impl.ChatStream)
    monkeypatch.setattr(llamafast, "IMPLEMENTATION", impl.IMPLEMENTATION)
    return impl


def run(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    out: io.StringIO | None = None,
    err: io.StringIO | None = None,
) -> tuple[int, str, str]:
    status = main(argv) if out is None and err is None else _cli.main(argv, out, err)
    captured = capsys.readouterr()
    return (
        status,
        captured.out if out is None else out.getvalue(),
        captured.err if err is None else err.getvalue(),
    )


def run_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llamafast", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        env={**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})},
        check=False,
    )


# --- replay: what a person sees -------------------------------------------------------------


def test_default_replay_as_a_process_shows_reasoning_then_the_answer(
    impl: types.SimpleNamespace,
) -> None:
    env = {"LLAMAFAST_NO_EXTENSIONS": "1" if impl.IMPLEMENTATION == "python" else "0"}
    done = run_process(env=env)
    assert done.returncode == 0, done.stderr
    want = expected("reasoning_then_content")["completion"]
    assert done.stdout == want["content"] + "\n"  # the answer alone; the rest on stderr
    out = done.stderr
    thinking, answer, summary = (
        out.index("--- thinking ---"),
        out.index("--- answer ---"),
        out.index("--- done ---"),
    )
    assert thinking < answer < summary
    assert want["reasoning_content"].strip() in out[thinking:answer]
    assert "finish reason  stop" in out
    assert f"{impl.IMPLEMENTATION} implementation" in out


def test_replay_subcommand_named_explicitly_is_the_same(
    twin: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    def untimed(argv: list[str]) -> tuple[int, str, list[str]]:
        status, out, err = run(argv, capsys)
        return status, out, [line for line in err.splitlines() if not line.startswith("time ")]

    assert untimed(["replay"]) == untimed([]) == untimed(["reasoning_then_content"])


def test_summary_gives_the_counts_from_the_timings(
    twin: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, out = run(["replay", "reasoning_then_content"], capsys)
    assert status == 0
    # completion: timings cache_n 39, prompt_n 24, predicted_n 73; reasoning_tokens 41
    assert "24 tokens processed, 39 from the cache" in out
    assert "73 tokens (41 reasoning)" in out
    assert "chatcmpl-NA0TUPGZKvZTMBHfNFEUaxrot4ae7FZy" in out
    assert "parsed 69 events in" in out


def test_tool_call_shows_name_then_arguments(
    twin: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(["replay", "tool_call"], capsys)
    assert status == 0
    call = expected("tool_call")["completion"]["tool_calls"][0]
    marker = f"--- tool call 0: read_file (id {call['id']}) ---\n"
    assert err.count(marker) == 1  # one header, however many pieces the call came in
    assert out.endswith("\n" + call["arguments"] + "\n")  # the pieces joined, tab and newline kept
    assert "tool calls     read_file" in err
    assert "finish reason  tool_calls" in err


def test_progress_is_one_final_line_when_not_a_terminal(
    twin: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, out = run(["replay", str(FIXTURES / "http" / "long_prompt_progress.http")], capsys)
    assert status == 0
    assert [line for line in out.splitlines() if line.startswith("prompt:")] == [
        "prompt: 2116/2116 tokens (0 from the cache)"
    ]
    assert "\r" not in out and "\x1b" not in out


def test_terminal_rewrites_progress_in_place_and_styles_reasoning(
    twin: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, out = run(["replay"], capsys, out=Tty(), err=Tty())
    assert status == 0
    assert out.startswith("\r\x1b[2Kprompt [")
    assert out.count("\r\x1b[2Kprompt [") == 2  # two Progress events, one line
    assert out.count("\n", 0, out.index("thinking")) == 1
    want = expected("reasoning_then_content")["completion"]["reasoning_content"]
    assert f"{_display._DIM_ITALIC}{want}" in out  # dim and italic, set apart from the answer


def test_control_characters_in_model_text_are_shown_escaped() -> None:
    out = Tty()
    view = _display.LiveView(out, live=True, color=True, flush=False)
    view.event(Content("a\x1b[2Jb\x07\tc\nd\x9b"))
    text = out.getvalue()
    assert "\\x1b[2Jb\\x07\tc\nd\\x9b" in text
    assert "\x1b[2J" not in text and "\x07" not in text


# --- replay --json -----------------------------------------------------------------------


@pytest.mark.parametrize("name", STREAMS)
def test_json_lines_are_the_expected_events_and_completion(
    twin: types.SimpleNamespace, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    status, out, err = run(["replay", "--json", str(FIXTURES / "http" / f"{name}.http")], capsys)
    assert (status, err) == (0, "")
    lines = [json.loads(line) for line in out.splitlines()]
    want = expected(name)
    assert lines[:-1] == want["events"]
    last = lines[-1]
    assert last.pop("type") == "completion"
    assert last.pop("implementation") == twin.IMPLEMENTATION
    assert isinstance(last.pop("parse_ms"), float)
    reports = recorded_reports(want)  # what the server reported beside the expected fields
    assert last.pop("model") == reports.get("model")
    usage = reports.get("usage")
    assert last.pop("usage") == (None if usage is None else dataclasses.asdict(usage))
    assert last == want["completion"]


def test_json_of_the_default_as_a_process(impl: types.SimpleNamespace) -> None:
    env = {"LLAMAFAST_NO_EXTENSIONS": "1" if impl.IMPLEMENTATION == "python" else "0"}
    done = run_process("replay", "--json", env=env)
    assert (done.returncode, done.stderr) == (0, "")
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[:-1] == expected("reasoning_then_content")["events"]
    assert lines[-1]["type"] == "completion"
    assert lines[-1]["implementation"] == impl.IMPLEMENTATION


def test_logprobs_and_usage_in_the_json_lines_and_the_summary(
    twin: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    # A Content's logprobs only when it has some; the completion line's model, usage, logprobs.
    lp = TokenLogprob("Hi", -0.5, (("Hi", -0.5), ("Yo", -1.5)))
    assert _display.event_json(Content("Hi")) == {"type": "content", "text": "Hi"}
    assert _display.event_json(Content("Hi", (lp,))) == {
        "type": "content",
        "text": "Hi",
        "logprobs": [{"token": "Hi", "logprob": -0.5, "top": [["Hi", -0.5], ["Yo", -1.5]]}],
    }
    done = dataclasses.replace(COMPLETION, model="m", usage=Usage(9, 3, 4), logprobs=(lp,))
    got = _display.completion_json(done)
    assert (got["model"], got["usage"], got["logprobs"]) == (
        "m",
        {"prompt_tokens": 9, "completion_tokens": 3, "cached_tokens": 4},
        [{"token": "Hi", "logprob": -0.5, "top": [["Hi", -0.5], ["Yo", -1.5]]}],
    )
    assert "logprobs" not in _display.completion_json(COMPLETION)
    status, _, out = run(["replay", str(FIXTURES / "http" / "usage_chunk.http")], capsys)
    assert status == 0
    assert "usage          59 tokens prompt (39 cached), 5 tokens completion" in out
    assert "model          tiny.gguf" in out


def test_event_json_names_every_event_kind() -> None:
    assert [
        _display.event_json(ev)
        for ev in (Queued(2), Waiting(True), Retrying(1, 200, "e"), ThinkingCapped(5))
    ] == [
        {"type": "queued", "ahead": 2},
        {"type": "waiting", "slot_busy": True},
        {"type": "retrying", "attempt": 1, "after_ms": 200, "error": "e"},
        {"type": "thinking_capped", "tokens": 5},
    ]
    assert _display.event_json(ToolCallDelta(0, None, None, "x")) == {
        "type": "tool_call_delta",
        "index": 0,
        "id": None,
        "name": None,
        "arguments": "x",
    }


# --- the bundled recordings ------------------------------------------------------------------


def test_list_as_json_is_one_object_per_recording(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(["replay", "--list", "--json"], capsys)
    assert (status, err) == (0, "")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["name"] for r in rows] == _replay.bundled()
    assert [r["name"] for r in rows if r["default"]] == [_replay.DEFAULT_RECORDING]
    assert [r["name"] for r in rows if r["timing"]] == ["slow_prompt_progress"]


def test_list_names_the_bundled_recordings(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["replay", "--list"], capsys)
    assert status == 0
    assert out.splitlines() == [
        "reasoning_then_content  (default)",
        "slow_prompt_progress",
        "tool_call",
    ]


@pytest.mark.parametrize("name", ["reasoning_then_content", "slow_prompt_progress", "tool_call"])
def test_bundled_recordings_are_the_real_ones(name: str) -> None:
    label, file = _replay.open_recording(name)
    with file:
        assert file.read() == (FIXTURES / "http" / f"{name}.http").read_bytes()
    assert label == f"{name} (bundled)"
    timing = FIXTURES / "http" / f"{name}.timing.json"
    want = json.loads(timing.read_text("utf-8"))["reads_ms_bytes"] if timing.exists() else []
    assert _replay.recorded_reads(name) == [(at, size) for at, size in want]


# --- failures: one line, exit 1, never a traceback -------------------------------------------


def failures(tmp: Path) -> list[tuple[str, str, str]]:
    """(argument, error class in the line, a part of the message) for each way replay fails."""
    whole = (FIXTURES / "http" / "content_only.http").read_bytes()
    files = {
        "not_http.http": b"[build-system]\nrequires = []\n",
        "empty.http": b"",
        "cut.http": whole[: len(whole) // 2],
        "no_finish.http": http_response(f"data: {CHUNK}\n\n".encode()),
        "bad_json.http": http_response(b'data: {"choices":[\n\n'),
        "not_utf8.http": http_response(b"data: \xff\xfe\n\n"),
        "html.http": http_response(b"<html></html>", content_type="text/html"),
    }
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    http = FIXTURES / "http"
    return [
        (str(tmp / "missing.http"), "FileNotFoundError", "missing.http"),
        (
            "no_such_recording",
            "FileNotFoundError",
            "bundled: reasoning_then_content, slow_prompt_progress, tool_call",
        ),
        (str(tmp / "not_http.http"), "BadStatusLine", "not a recorded HTTP response"),
        (str(tmp / "empty.http"), "BadStatusLine", "empty"),
        (str(tmp / "html.http"), "ProtocolError", "not an event stream (Content-Type: text/html)"),
        (str(http / "get_health.http"), "ProtocolError", "not an event stream"),
        (
            str(http / "error_context_exceeded.http"),
            "HttpError",
            "answered 400: request (24765 tokens) exceeds",
        ),
        (str(http / "get_unknown_path.http"), "HttpError", "answered 404"),
        (
            str(http / "midstream_error.http"),
            "HttpError",
            "answered 500: The model produced output that does not match the expected",
        ),
        (str(tmp / "cut.http"), "TruncatedError", "ended inside a line"),
        (str(tmp / "no_finish.http"), "StreamClosedEarlyError", "finish reason"),
        (str(tmp / "bad_json.http"), "ProtocolError", ""),
        (str(tmp / "not_utf8.http"), "NotUtf8Error", "UTF-8"),
    ]


def test_every_failure_is_one_line_and_status_1_in_process(
    twin: types.SimpleNamespace, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for arg, kind, part in failures(tmp_path):
        status, out, err = run(["replay", arg], capsys)
        assert status == 1, arg
        # the display (on stderr) closed first, then the one line
        *display, last = err.splitlines(keepends=True)
        assert last.startswith(f"llamafast replay: error: {kind}: "), (arg, err)
        assert part in last and "llamafast" not in "".join(display), (arg, err)
        assert out == "" or out.endswith("\n"), (arg, out)


def test_every_failure_is_one_line_and_status_1_as_a_process(
    impl: types.SimpleNamespace, tmp_path: Path
) -> None:
    env = {"LLAMAFAST_NO_EXTENSIONS": "1" if impl.IMPLEMENTATION == "python" else "0"}
    kinds = {kind: (arg, part) for arg, kind, part in reversed(failures(tmp_path))}
    for kind, (arg, part) in kinds.items():  # the first case of each kind (a process is slow)
        done = run_process("replay", arg, env=env)
        assert done.returncode == 1, (arg, done.stderr)
        assert "Traceback" not in done.stderr + done.stdout
        *display, last = done.stderr.splitlines(keepends=True)
        assert last.startswith(f"llamafast replay: error: {kind}: "), (arg, done.stderr)
        assert part in last and "llamafast" not in "".join(display)


def test_midstream_error_shows_what_arrived_then_the_servers_message(
    twin: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(["replay", str(FIXTURES / "http" / "midstream_error.http")], capsys)
    assert status == 1
    assert out == ""
    assert err == "prompt: 1008/1008 tokens (1007 from the cache)\n" + (
        "llamafast replay: error: HttpError: the server answered 500: "
        "The model produced output that does not match the expected peg-native format\n"
    )


def test_json_failure_ends_with_an_error_object(
    twin: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(
        ["replay", "--json", str(FIXTURES / "http" / "midstream_error.http")], capsys
    )
    assert status == 1
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[:-1] == expected("midstream_error")["events"]
    assert lines[-1] == {
        "type": "error",
        "error": "HttpError",
        "message": "the server answered 500: "
        "The model produced output that does not match the expected peg-native format",
    }
    assert err.count("\n") == 1


def test_unreadable_message_is_cut_and_escaped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    garbage = tmp_path / "garbage.http"
    garbage.write_bytes(b"\x1b[2J" + b"x" * 5000 + b"\n")
    status, _, err = run(["replay", str(garbage)], capsys)
    assert status == 1
    assert "\x1b" not in err and len(err) < 400 and err.count("\n") == 1


# --- chat: the same display over a Client ----------------------------------------------------

COMPLETION = Completion(
    id="chatcmpl-1",
    content="Hi.",
    reasoning_content="think",
    tool_calls=(),
    finish_reason=FinishReason.STOP,
    timings=Timings(cache_n=1, prompt_n=2, predicted_n=3),
    reasoning_tokens=1,
    thinking_capped=True,
)


class FakeStream:
    def __init__(self, events: list[Any], error: Exception | None) -> None:
        self.events = events
        self.error = error

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def __iter__(self) -> Iterator[Any]:
        yield from self.events
        if self.error is not None:
            raise self.error

    @property
    def completion(self) -> Completion:
        return COMPLETION


@pytest.fixture
def fake_client(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """A stand-in `llamafast._client` whose Client records its request and replays `events`."""
    seen = types.SimpleNamespace(events=[], error=None, cfg=None, req=None)

    class Client:
        def __init__(self, cfg: Any) -> None:
            seen.cfg = cfg

        def stream(self, req: Any) -> FakeStream:
            seen.req = req
            return FakeStream(seen.events, seen.error)

    monkeypatch.setitem(sys.modules, "llamafast._client", types.SimpleNamespace(Client=Client))
    return seen


def test_chat_shows_waiting_retries_and_the_thinking_cap(
    fake_client: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_client.events = [
        Queued(1),
        Retrying(1, 200, "connection refused"),
        Waiting(False),
        Waiting(True),
        Progress(10, 0, 10),
        Reasoning("think"),
        ThinkingCapped(1),
        Content("Hi."),
    ]
    argv = ["chat", "--url", "http://127.0.0.1:9", "--slot", "1", "--think", "hello"]
    status, out, err = run(argv, capsys)
    assert status == 0
    assert out == "Hi.\n"  # the answer alone on stdout: everything else on stderr
    assert err.splitlines()[:9] == [
        "queued: 1 earlier request for this slot",
        "retry 1 in 200 ms: connection refused",
        "waiting: the model is loading",
        "waiting: the slot is busy on the server",
        "prompt: 10/10 tokens (0 from the cache)",
        "--- thinking ---",
        "think",
        "thinking capped after 1 reasoning tokens",
        "--- answer ---",
    ]
    assert "capped by the client" in err and "llamafast:" not in err
    assert fake_client.cfg.infer.url == "http://127.0.0.1:9"
    assert (fake_client.req.slot, fake_client.req.thinking) == (1, True)
    assert fake_client.req.messages[-1].content == "hello"


def test_chat_json(fake_client: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    fake_client.events = [Waiting(True), Content("Hi.")]
    status, out, _ = run(["chat", "--json", "hello"], capsys)
    lines = [json.loads(line) for line in out.splitlines()]
    assert status == 0
    assert lines[:2] == [{"type": "waiting", "slot_busy": True}, {"type": "content", "text": "Hi."}]
    assert lines[2]["type"] == "completion" and lines[2]["thinking_capped"] is True


def test_chat_failure_is_one_line(
    fake_client: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_client.events = [Content("par")]
    fake_client.error = ConnectError(ConnectionRefusedError(111, "Connection refused"), "http://x")
    status, out, err = run(["chat", "hello"], capsys)
    assert status == 1
    assert out == "par\n"
    assert err.startswith("--- answer ---\n")  # the display's markers go to stderr
    last = err.splitlines()[-1]
    assert last.startswith(
        "llamafast chat: error: ConnectError: could not connect to the server http://x"
    )
    assert err.count("llamafast chat:") == 1


def test_chat_slot_the_server_does_not_have_is_one_line(
    fake_client: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_client.error = ValueError("slot 5 does not exist: the server has 2 slots (0 to 1)")
    status, _, err = run(["chat", "--slot", "5", "hello"], capsys)
    assert status == 1
    assert err == (
        "llamafast chat: error: ValueError: "
        "slot 5 does not exist: the server has 2 slots (0 to 1)\n"
    )


def test_chat_bad_url_is_one_line_and_a_usage_error(
    fake_client: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(["chat", "--url", "ftp://x", "hello"], capsys)
    assert status == 2
    assert err.startswith("llamafast chat: error: bad option: infer.url must start with")


# --- chat: the configuration -----------------------------------------------------------------


def test_chat_reads_llamafast_toml_in_the_current_directory(
    fake_client: types.SimpleNamespace,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(["chat", "hi"], capsys)[0] == 0
    assert fake_client.cfg.infer.url == "http://127.0.0.1:8080"  # no file: the defaults
    (tmp_path / "llamafast.toml").write_text('[infer]\nurl = "http://127.0.0.1:7"\n')
    assert run(["chat", "hi"], capsys)[0] == 0
    assert fake_client.cfg.infer.url == "http://127.0.0.1:7"
    (tmp_path / "other.toml").write_text('[infer]\nurl = "http://127.0.0.1:8"\n')
    assert run(["chat", "--config", "other.toml", "hi"], capsys)[0] == 0
    assert fake_client.cfg.infer.url == "http://127.0.0.1:8"  # --config wins over the file


@pytest.mark.parametrize(
    "argv",
    [
        ["--config", "{f}", "chat", "hi"],
        ["--config={f}", "chat", "hi"],
        ["chat", "--config", "{f}", "hi"],
        ["chat", "hi", "--config", "{f}"],
    ],
)
def test_config_before_or_after_the_command(
    argv: list[str],
    fake_client: types.SimpleNamespace,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[infer]\nurl = "http://127.0.0.1:9"\n')
    status, _, err = run([word.format(f=path) for word in argv], capsys)
    assert status == 0, err
    assert fake_client.cfg.infer.url == "http://127.0.0.1:9"


def test_config_before_replay_is_accepted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = str(tmp_path / "c.toml")
    (tmp_path / "c.toml").write_text("")
    for argv in (["--config", path, "--no-pace"], ["--config", path, "replay", "--no-pace"]):
        status, _, err = run(argv, capsys)
        assert status == 0 and "--- answer ---" in err, argv


def test_a_bad_config_file_is_a_failure_not_a_usage_error(
    fake_client: types.SimpleNamespace, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "c.toml").write_text("[infer]\nurl = 3\n")
    status, _, err = run(["chat", "--config", str(tmp_path / "c.toml"), "hi"], capsys)
    assert status == 1
    assert err.startswith("llamafast chat: error: ValueError: bad configuration: ")
    assert err.count("\n") == 1


def test_ca_file_option_goes_into_the_config(
    fake_client: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["chat", "--ca-file", "/x/ca.pem", "hi"], capsys)[0] == 0
    assert fake_client.cfg.infer.ca_file == "/x/ca.pem"


# --- chat: the per-request options ----------------------------------------------------------

SECRET = "sk-cli-s3cr3t-Do-Not-Print"


@pytest.fixture
def no_key_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_chat.API_KEY_VARIABLE, raising=False)


def test_chat_options_become_the_requests_fields(
    fake_client: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["chat", "--max-tokens", "12", "--temperature", "0.25", "--seed", "7", "hi"]
    status, _, err = run(argv, capsys)
    assert status == 0 and "llamafast chat:" not in err
    req = fake_client.req
    assert (req.max_tokens, req.temperature, req.seed, req.slot) == (12, 0.25, 7, 0)
    assert fake_client.cfg.limits.max_tokens == 4096  # the config is left as it was


def test_chat_without_the_options_leaves_the_fields_to_the_config(
    fake_client: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["chat", "hi"], capsys)[0] == 0
    req = fake_client.req
    assert (req.max_tokens, req.temperature, req.seed, req.response_format) == (None,) * 4


def test_any_slot_lets_the_server_pick(
    fake_client: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["chat", "--any-slot", "hi"], capsys)[0] == 0
    assert fake_client.req.slot is None
    status, _, err = run(["chat", "--any-slot", "--slot", "1", "hi"], capsys)
    assert status == 2
    assert err == (
        "llamafast chat: error: --slot and --any-slot cannot both be given "
        "(see 'llamafast chat --help')\n"
    )


def test_json_schema_asks_for_json_following_the_file(
    fake_client: types.SimpleNamespace, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(schema), encoding="utf-8")
    assert run(["chat", "--json-schema", str(path), "hi"], capsys)[0] == 0
    assert fake_client.req.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema},
    }


def bad_chat_values(tmp_path: Path) -> list[tuple[list[str], str]]:
    (tmp_path / "list.json").write_text("[1]", encoding="utf-8")
    (tmp_path / "bad.json").write_text("{nope", encoding="utf-8")
    return [
        (["--max-tokens", "many"], "--max-tokens must be an integer, not 'many'"),
        (["--max-tokens", "0"], "bad request: max_tokens must be at least 1, not 0"),
        (["--temperature", "hot"], "--temperature must be a number, not 'hot'"),
        (["--temperature", "nan"], "--temperature must be a finite number, not 'nan'"),
        (["--temperature", "-1"], "bad request: temperature must be at least 0"),
        (["--seed", "1.5"], "--seed must be an integer, not '1.5'"),
        (["--slot", "one"], "--slot must be an integer, not 'one'"),
        (["--slot", "-1"], "bad request: slot must be a non-negative integer"),
        (["--thinking-budget", "x"], "--thinking-budget must be an integer"),
        (["--json-schema", str(tmp_path / "none.json")], "FileNotFoundError: cannot read"),
        (["--json-schema", str(tmp_path / "bad.json")], "ValueError: '"),
        (["--thinking-budget", "-1"], "bad option: limits.thinking_budget must be at least 0"),
        (["--api-key", "k\x01"], "bad option: infer.api_key is not printable ASCII"),
        (["--ca-file", ""], "bad option: infer.ca_file is empty"),
        (["--url", "127.0.0.1:8080"], "--url needs its scheme: write http://127.0.0.1:8080"),
        (["--url", "u:pw@h:1"], "--url needs its scheme: write http://u:***@h:1"),
        (["--json-schema", str(tmp_path / "list.json")], "must hold a JSON Schema object, not"),
    ]


def test_each_bad_chat_value_is_one_line_before_anything_is_sent(
    fake_client: types.SimpleNamespace, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A bad value on the command line is a usage error (2); a file that fails is 1."""
    for options, says in bad_chat_values(tmp_path):
        fake_client.cfg = None
        status, _, err = run(["chat", *options, "hi"], capsys)
        assert status == (1 if options[0] == "--json-schema" else 2), options
        assert err.startswith("llamafast chat: error: ") and err.count("\n") == 1, (options, err)
        assert (status == 2) == err.endswith(" (see 'llamafast chat --help')\n"), err
        assert says in err, (options, err)
        assert fake_client.cfg is None, options  # no client was made


def test_a_bad_chat_value_as_a_process_is_one_line_without_a_traceback() -> None:
    done = run_process("chat", "--temperature", "hot", "hi")
    assert done.returncode == 2
    assert done.stderr == (
        "llamafast chat: error: --temperature must be a number, not 'hot' "
        "(see 'llamafast chat --help')\n"
    )


def test_api_key_from_the_option_the_environment_or_the_config(
    fake_client: types.SimpleNamespace,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    no_key_in_env: None,
) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('[infer]\napi_key = "from-config"\n', encoding="utf-8")
    assert run(["chat", "hi"], capsys)[0] == 0
    assert fake_client.cfg.infer.api_key is None
    assert run(["chat", "--config", str(toml), "hi"], capsys)[0] == 0
    assert fake_client.cfg.infer.api_key == "from-config"
    monkeypatch.setenv("LLAMA_API_KEY", "from-env")
    assert run(["chat", "--config", str(toml), "hi"], capsys)[0] == 0
    assert fake_client.cfg.infer.api_key == "from-env"
    assert run(["chat", "--config", str(toml), "--api-key", SECRET, "hi"], capsys)[0] == 0
    assert fake_client.cfg.infer.api_key == SECRET


@pytest.mark.parametrize("json_mode", [False, True])
def test_the_api_key_is_never_printed(
    fake_client: types.SimpleNamespace,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    json_mode: bool,
) -> None:
    display = ["--json"] if json_mode else []
    fake_client.events = [Content("Hi.")]
    outputs = [run(["chat", *display, "--api-key", SECRET, "hi"], capsys)]
    fake_client.error = ConnectError(ConnectionRefusedError(111, "refused"), "http://x")
    outputs.append(run(["chat", *display, "--api-key", SECRET, "hi"], capsys))
    monkeypatch.setenv("LLAMA_API_KEY", SECRET)
    outputs.append(run(["chat", *display, "hi"], capsys))
    # a key that cannot be sent is refused without being shown
    outputs.append(run(["chat", *display, "--api-key", SECRET + "\u00e9", "hi"], capsys))
    assert [status for status, _, _ in outputs] == [0, 1, 1, 2]  # a bad option's value: 2
    assert "infer.api_key is not printable ASCII" in outputs[-1][2]
    for _, out, err in outputs:
        assert SECRET not in out and SECRET not in err


@pytest.mark.parametrize("json_mode", [False, True])
def test_a_password_in_the_url_is_never_printed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, no_key_in_env: None, json_mode: bool
) -> None:
    """docs/client.md, rule URL: through the real client, a refused connection, a refused URL
    and a URL with both a password and a key name the URL with *** for the password."""
    display = ["--json"] if json_mode else []
    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "c.toml").write_text("[limits]\nretries = 0\n", encoding="utf-8")
    url = f"http://user:{SECRET}@127.0.0.1:{port}/v1"
    config = ["--config", str(tmp_path / "c.toml")]
    outputs = [run(["chat", "--url", url, *config, *display, "hi"], capsys)]
    outputs.append(run(["chat", "--url", url + "#x", *display, "hi"], capsys))
    outputs.append(run(["chat", "--url", url, "--api-key", "k", *display, "hi"], capsys))
    assert [status for status, _, _ in outputs] == [1, 2, 2]  # a bad --url: a usage error
    shown = f"http://user:***@127.0.0.1:{port}"
    assert outputs[0][2].startswith(
        f"llamafast chat: error: ConnectError: could not connect to the server {shown}: "
    )
    assert outputs[1][2].startswith("llamafast chat: error: bad option: infer.url ")
    assert f"{shown}/v1#x" in outputs[1][2]
    assert "infer.api_key" in outputs[2][2]
    for _, out, err in outputs:
        assert SECRET not in out and SECRET not in err
        if json_mode:
            assert json.loads(out)["type"] == "error"
    if json_mode:
        assert f"{shown}:" in outputs[0][1] and f"{shown}/v1#x" in outputs[1][1]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == (
        f"llamafast {llamafast.__version__} ({llamafast.IMPLEMENTATION} implementation)\n"
    )
    done = run_process("--version")
    assert done.returncode == 0 and done.stdout.startswith(f"llamafast {llamafast.__version__} (")


def test_summary_gives_the_speed_from_the_recorded_times(
    twin: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, out = run(["replay", "tool_call"], capsys)
    # the last timings: prompt_n 510 in 38.081 ms, predicted_n 117 in 87.987 ms
    assert status == 0
    assert f"speed          {510 / 38.081 * 1000:.1f} prompt tokens/s, " in out
    assert f"{117 / 87.987 * 1000:.1f} generated tokens/s" in out


def test_chat_against_the_loopback_server_sends_the_options(
    capsys: pytest.CaptureFixture[str], no_key_in_env: None
) -> None:
    """The whole way through the real client: the body the server saw, and the Authorization
    header when the server records headers."""
    from _server import ReplayServer

    with ReplayServer() as srv:
        argv = ["chat", "--url", srv.url, "--slot", "1", "--max-tokens", "9"]
        argv += ["--temperature", "0.5", "--seed", "3", "--api-key", SECRET, "--json", "hi"]
        status, out, err = run(argv, capsys)
        assert (status, err) == (0, "")
        assert SECRET not in out
        (log,) = srv.chat_logs()
        assert log.body["id_slot"] == 1
        assert (log.body["max_tokens"], log.body["temperature"], log.body["seed"]) == (9, 0.5, 3)
        requests = [r for r in srv.requests if r.path.startswith("/v1/chat/completions")]
    headers = getattr(requests[0], "headers", None)
    if headers is None:
        pytest.skip("the loopback server does not record request headers in this tree")
    assert dict(headers).get("authorization", dict(headers).get("Authorization")) == (
        f"Bearer {SECRET}"
    )


# --- every failure one line: the values, the output, the interrupt ---------------------------


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "-inf", "soon"])
def test_a_bad_delay_is_one_line_and_status_2(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(["replay", f"--delay={value}"], capsys)
    assert status == 2
    assert out == ""
    assert err.startswith("llamafast replay: error: --delay must be ") and err.count("\n") == 1
    assert repr(value) in err


def test_a_bad_delay_as_a_process_is_one_line_without_a_traceback() -> None:
    done = run_process("replay", "--delay", "-1")
    assert done.returncode == 2
    assert done.stderr == (
        "llamafast replay: error: --delay must be from 0 to 60 seconds, not '-1' "
        "(see 'llamafast replay --help')\n"
    )


def test_a_full_disk_is_one_line_and_status_1() -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "llamafast", "replay"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    # the reasoning went to stderr; then the answer's first write to stdout failed
    last = done.stderr.splitlines()[-1]
    assert last.startswith("llamafast replay: error: OSError: cannot write the output: ")
    assert done.stderr.count("llamafast") == 1, done.stderr


def test_a_closed_pipe_is_a_quiet_exit() -> None:
    """`llamafast replay | head -c1`: the reader left; nothing to say, and no traceback."""
    proc = subprocess.Popen(
        # paced, so the process is still writing when the reader leaves
        [sys.executable, "-m", "llamafast", "replay", "--json", "--delay", "0.02"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(1)
    proc.stdout.close()  # before the whole output was written: a pipe buffer is 64 KiB
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 1
    assert err == b""


class Closed(io.StringIO):
    """An output whose reader has gone after `room` characters."""

    def __init__(self, error: OSError, room: int = 0) -> None:
        super().__init__()
        self.error = error
        self.room = room

    def write(self, text: str) -> int:
        if self.tell() + len(text) > self.room:
            raise self.error
        return super().write(text)


def test_a_closed_pipe_in_process_is_quiet_and_status_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = Closed(BrokenPipeError(32, "Broken pipe"), room=10)
    status, _, err = run(["replay", "--json"], capsys, out)
    assert (status, err) == (1, "")


@pytest.mark.parametrize("json_", [[], ["--json"]])
def test_an_output_that_fails_is_one_line_and_status_1_in_process(
    json_: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = Closed(OSError(28, "No space left on device"), room=10)
    status, _, err = run(["replay", *json_], capsys, out)
    assert status == 1
    assert err.endswith(
        "\nllamafast replay: error: OSError: cannot write the output: No space left on device\n"
        if not json_
        else "llamafast replay: error: OSError: cannot write the output: No space left on device\n"
    )
    assert err.count("llamafast") == 1, err


def test_an_empty_file_leaves_nothing_unclosed(tmp_path: Path) -> None:
    """In development mode Python reports a stream that fails in its finalizer (on 3.13 it
    always does): the response over the file is closed before the file is."""
    (tmp_path / "empty.http").write_bytes(b"")
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-m", "llamafast", "replay", str(tmp_path / "empty.http")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("llamafast replay: error: BadStatusLine: ")


def test_a_file_that_cannot_be_read_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, _, err = run(["replay", str(tmp_path)], capsys)  # a directory
    assert status == 1
    assert err.startswith("llamafast replay: error: IsADirectoryError: cannot read ")
    assert err.count("\n") == 1


@pytest.mark.parametrize("json_", [[], ["--json"]])
def test_ctrl_c_closes_the_display_then_one_line_and_status_130(
    json_: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_replay, "_sleep", interrupt)
    status, out, err = run(["replay", "--delay", "0.5", *json_], capsys)
    assert status == 130
    # the display closed (its open line ended), then the one line
    assert (
        err == "llamafast: interrupted\n" if json_ else err.endswith("\nllamafast: interrupted\n")
    )
    assert out == "" or out.endswith("\n")
    if json_:
        last = json.loads(out.splitlines()[-1])
        assert last["type"] == "error" and last["error"] == "KeyboardInterrupt"


def test_ctrl_c_while_parsing_is_one_line_and_status_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_main, "parser", interrupt)
    status, out, err = run(["replay"], capsys)
    assert (status, out, err) == (130, "", "llamafast: interrupted\n")


def test_ctrl_c_while_the_cli_imports_is_one_line_and_status_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Interrupting:
        @staticmethod
        def find_spec(name: str, *args: object) -> None:
            if name == "llamafast._cli":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "llamafast._cli")
    monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
    status = main(["replay"])
    assert (status, capsys.readouterr().err) == (130, "llamafast: interrupted\n")


# A process that gets Ctrl-C while the package itself imports (`import llamafast` runs before the
# CLI's own code can catch anything): the interrupt is raised when the first of the package's
# modules is looked for, as it would be by a real signal at that moment.
INTERRUPT_ON_IMPORT = """
import sys

class Interrupting:
    @staticmethod
    def find_spec(name, *args):
        if name.startswith("llamafast.") and name != "llamafast.__main__":
            raise KeyboardInterrupt

sys.meta_path.insert(0, Interrupting())
"""


@pytest.mark.parametrize(
    "start",
    [
        # python -m llamafast: the package, then its __main__
        "import runpy; runpy.run_module('llamafast', run_name='__main__', alter_sys=True)",
        # the console script: `from llamafast.__main__ import main; sys.exit(main())`
        "from llamafast.__main__ import main; sys.exit(main())",
    ],
    ids=["python -m llamafast", "llamafast script"],
)
def test_ctrl_c_while_the_package_imports_is_one_line_and_status_130(start: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", INTERRUPT_ON_IMPORT + start, "replay"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "llamafast: interrupted\n")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_ctrl_c_in_a_running_process_is_one_line_and_status_130() -> None:
    """The real signal, once the replay shows its first line (the default recording is paced,
    so it is still running): no traceback, whatever it was doing."""
    import signal

    proc = interruptible(
        "-m",
        "llamafast",
        "replay",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    try:
        assert proc.stderr is not None and proc.stderr.readline()  # the display's first line
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    if proc.returncode == 0:  # pragma: no cover - it finished before the signal came
        pytest.skip("the replay ended before the signal")
    assert proc.returncode == 130
    assert err.endswith("llamafast: interrupted\n") and err.count("llamafast") == 1, err


# --- usage: a mistyped command, an unknown option -------------------------------------------


@pytest.mark.parametrize(
    ("word", "guess"),
    [("replya", "replay"), ("rePlay", "replay"), ("caht", "chat"), ("sevre", "serve")],
)
def test_a_mistyped_command_is_named_with_a_guess(
    word: str, guess: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run([word], capsys)
    assert status == 2
    assert out == ""
    assert err == (
        f"llamafast: error: unknown command {word!r} (choose from replay, chat, serve); "
        f"did you mean {guess!r}? (see 'llamafast --help')\n"
    )


def test_a_file_named_like_a_command_is_still_replayed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "replya").write_bytes((FIXTURES / "http" / "content_only.http").read_bytes())
    monkeypatch.chdir(tmp_path)
    status, _, err = run(["replya"], capsys)
    assert status == 0
    assert "--- answer ---" in err


def test_a_mistyped_command_as_a_process() -> None:
    done = run_process("replya")
    assert done.returncode == 2
    assert done.stderr == (
        "llamafast: error: unknown command 'replya' (choose from replay, chat, serve); "
        "did you mean 'replay'? (see 'llamafast --help')\n"
    )


@pytest.mark.parametrize(
    ("argv", "part"),
    [
        (["--bogus"], "llamafast replay: error: unrecognized arguments: --bogus"),
        (["chat", "hi", "--bogus"], "llamafast chat: error: unrecognized arguments: --bogus"),
        (["chat"], "llamafast chat: error: the following arguments are required: prompt"),
        (["replay", "--color", "pink"], "llamafast replay: error: argument --color: invalid"),
        (["--config"], "llamafast replay: error: argument --config: expected one argument"),
    ],
)
def test_a_usage_error_is_one_line_and_status_2(
    argv: list[str], part: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(part) and err.count("\n") == 1, err
    prog = part.partition(": error")[0]
    assert err.endswith(f" (see '{prog} --help')\n"), err


# --- replay paced as recorded -----------------------------------------------------------------


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses replay asks for, instead of taking them."""
    taken: list[float] = []
    monkeypatch.setattr(_replay, "_sleep", taken.append)
    return taken


def recorded_pauses(name: str) -> list[float]:
    reads = json.loads((FIXTURES / "http" / f"{name}.timing.json").read_text())["reads_ms_bytes"]
    times = [0.0] + [at for at, _ in reads]
    return [(b - a) / 1000 for a, b in itertools.pairwise(times)]


def test_a_recording_with_timing_is_paced_as_recorded(
    twin: types.SimpleNamespace, sleeps: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(FIXTURES / "http" / "busy_slot_second.http")  # 153 ms in all: not sped up
    status, _, err = run(["replay", path], capsys)
    assert status == 0 and "llamafast" not in err
    pauses = recorded_pauses("busy_slot_second")
    # the last two reads bring the chunked body's end (`0\r\n`, `\r\n`), after the last event
    assert len(sleeps) == len(pauses) - 2
    assert sleeps == pytest.approx(pauses[: len(sleeps)])


def test_a_long_recording_is_sped_up_to_the_limit(
    twin: types.SimpleNamespace, sleeps: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, out = run(["replay", "slow_prompt_progress"], capsys)  # 5.4 s as recorded
    assert status == 0 and "finish reason  length" in out
    pauses = recorded_pauses("slow_prompt_progress")
    scale = _replay.PACE_LIMIT_S / sum(pauses)
    assert len(sleeps) == len(pauses) - 2  # as above: the body's end is never waited for
    assert sleeps == pytest.approx([p * scale for p in pauses[: len(sleeps)]])
    assert 0.99 * _replay.PACE_LIMIT_S < sum(sleeps) <= _replay.PACE_LIMIT_S
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    assert f"at most {_replay.PACE_LIMIT_S:g} s" in " ".join(capsys.readouterr().out.split())


def test_the_pauses_are_not_counted_as_parse_time(
    sleeps: list[float], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fake clock that the fake sleep moves on by each pause (seconds in all)."""
    clock = time.perf_counter
    slept = [0.0]

    def sleep(seconds: float) -> None:
        slept[0] += seconds

    monkeypatch.setattr(_replay, "_sleep", sleep)
    monkeypatch.setattr(time, "perf_counter", lambda: clock() + slept[0])
    status, out, _ = run(["replay", "slow_prompt_progress", "--json"], capsys)
    assert status == 0 and slept[0] > 2.9
    assert json.loads(out.splitlines()[-1])["parse_ms"] < 1000


def test_a_recording_without_timing_goes_at_a_steady_modest_pace(
    twin: types.SimpleNamespace, sleeps: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    """The quick start's recording has no timing: a pause after each event, brief in all."""
    assert _replay.recorded_reads(None) == []
    status, out, _ = run(["--json"], capsys)
    events = len(out.splitlines()) - 1
    assert status == 0 and events > 10
    assert sleeps == [_replay.UNTIMED_PACE_S] * events
    assert sum(sleeps) <= _replay.UNTIMED_LIMIT_S


def test_the_steady_pace_stops_at_its_limit(
    twin: types.SimpleNamespace,
    sleeps: list[float],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_replay, "UNTIMED_LIMIT_S", 0.05)  # 2.5 events' pauses: the rest at once
    status, out, _ = run(["--json"], capsys)
    assert status == 0 and len(out.splitlines()) > 10
    assert sleeps == pytest.approx([0.02, 0.02, 0.01])


def test_the_quick_start_as_a_process_stays_quick() -> None:
    """`python -m llamafast replay` as the README's quick start runs it: paced, yet brief. The
    pauses it asks for are bounded by the test above; this checks only that it ends well."""
    done = run_process("replay")
    assert done.returncode == 0 and "--- answer ---" in done.stderr and done.stdout


@pytest.mark.parametrize("fast", [["--delay", "0"], ["--no-pace"], ["--fast"]])
def test_full_speed_on_request(
    fast: list[str],
    twin: types.SimpleNamespace,
    sleeps: list[float],
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, _, _ = run(["replay", "slow_prompt_progress", *fast], capsys)
    assert status == 0 and sleeps == []


def test_delay_overrides_the_recorded_pacing(
    twin: types.SimpleNamespace, sleeps: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(["replay", "slow_prompt_progress", "--delay", "0.25", "--json"], capsys)
    events = len(out.splitlines()) - 1
    assert status == 0 and sleeps == [0.25] * events


def test_a_malformed_timing_file_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "x.http").write_bytes((FIXTURES / "http" / "content_only.http").read_bytes())
    (tmp_path / "x.timing.json").write_text('{"reads_ms_bytes": [[1, "many"]]}')
    status, _, err = run(["replay", str(tmp_path / "x.http")], capsys)
    assert status == 1
    assert err.startswith("llamafast replay: error: ValueError: ") and "x.timing.json" in err


# --- https to a plain-HTTP port ----------------------------------------------------------------


def test_https_to_a_plain_http_port_fails_at_once_without_retrying(
    capsys: pytest.CaptureFixture[str], no_key_in_env: None, tmp_path: Path
) -> None:
    """Like llama-server's HTTP library, the loopback server answers a first line that is not
    HTTP (here the TLS hello) with 400; the handshake fails the same way every time."""
    from _server import ReplayServer

    class PlainServer(ReplayServer):
        connections = 0

        @staticmethod
        def _read_request(conn: Any) -> Any:
            PlainServer.connections += 1
            data = b""
            while b"\n" not in data:
                part = conn.recv(65536, socket.MSG_PEEK)
                if not part or len(part) == len(data):
                    return None
                data = part
            if b" HTTP/1." not in data.split(b"\n")[0]:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                return None
            return ReplayServer._read_request(conn)

    (tmp_path / "c.toml").write_text("[limits]\nretries = 3\nretry_base_ms = 1\nretry_max_ms = 1\n")
    with PlainServer() as srv:
        url = srv.url.replace("http://", "https://")
        argv = ["chat", "--url", url, "--config", str(tmp_path / "c.toml"), "--json", "hi"]
        status, out, err = run(argv, capsys)
    assert status == 1
    assert PlainServer.connections == 1
    assert [json.loads(line)["type"] for line in out.splitlines()] == ["error"]
    assert err.startswith(
        f"llamafast chat: error: ConnectError: could not connect to the server {url}: "
    )
    assert "the server does not speak TLS (" in err and err.count("\n") == 1


def test_url_replaces_the_urls_of_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --url names the one server, whatever the config's [infer] urls (docs/client.md, rule FLEET).
    from _server import ReplayServer

    config = tmp_path / "c.toml"
    config.write_text('[infer]\nurls = ["http://127.0.0.1:9", "http://127.0.0.1:10"]\n')
    with ReplayServer() as srv:
        status, _, _ = run(["chat", "--url", srv.url, "--config", str(config), "hi"], capsys)
        assert status == 0
        assert len(srv.chat_logs()) == 1
