"""The terminal shows only what the project writes (docs/cli.md, rule TERMINAL).

Every string a server provides reaches stdout and stderr with its control characters escaped:
the model's text, a retry notice quoting a 503's message, a tool call's name, id and arguments,
the model's name and the completion's id in the summary, an error quoting the server. The server
is a hostile loopback server (tests/_hostile.py) or recorded bytes, read by both twins.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

import llamafast
import llamafast.pure
from _hostile import CHAT, HostileServer, answer
from _loopback import raw_response, split
from _server import chunked, dechunk, load
from llamafast import _cli

# An OSC that retitles an xterm (ESC ] ... BEL), a CSI that clears the screen, and the C1 CSI
# (0x9b) that does the same on a terminal that reads C1 controls; as JSON writes them.
OSC = "\\u001b]0;pwned\\u0007"
CSI = "\\u001b[2J"
C1 = "\\u009b2J"
SHOWN_OSC = "\\x1b]0;pwned\\x07"  # what the terminal shows instead
# A raw control character: every C0 but tab and newline, DEL, every C1.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

TOOL_ID = b"kQZhSjiaNeduFt5W3MCodqMC5stt33uL"
CHAT_ID = b"chatcmpl-2sczDIyXoIFpoh6MHPE6KyaCWkir6ay1"


def assert_clean(*texts: str) -> None:
    for text in texts:
        found = RAW.search(text)
        assert found is None, f"a raw {found.group()!r} in {text!r}"


def hostile_tool_call() -> bytes:
    """The recorded tool call, its model, ids, tool name and a piece of its arguments holding
    terminal escapes (JSON-escaped, as a server would send them)."""
    head, body = split(load("tool_call"))
    swaps = [
        (b'"tiny.gguf"', f'"tiny{OSC}"'.encode()),
        (CHAT_ID, f"chatcmpl-{C1}".encode()),
        (TOOL_ID, f"id{CSI}{C1}".encode()),
        (b'"read_file"', f'"read{OSC}file"'.encode()),
        (b'"arguments":"p"', f'"arguments":"p{CSI}"'.encode()),
    ]
    payloads = []
    for payload in dechunk(body):
        for old, new in swaps:
            payload = payload.replace(old, new)
        payloads.append(payload)
    return head + chunked(payloads)


def error_answer(status: int, reason: str) -> bytes:
    message = f'{{"error":{{"code":{status},"message":"no slot {OSC}{C1} available"}}}}'
    return raw_response(status, reason, message.encode())


@pytest.fixture
def twin_client(impl: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    """`chat`'s client and `replay`'s ChatStream run on `impl`'s twin."""
    client = llamafast.pure.Client if impl.IMPLEMENTATION == "python" else llamafast.Client
    monkeypatch.setitem(sys.modules, "llamafast._client", types.SimpleNamespace(Client=client))
    monkeypatch.setattr(llamafast, "ChatStream", impl.ChatStream)
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)


@pytest.fixture
def one_quick_retry(tmp_path: Path) -> list[str]:
    path = tmp_path / "retry.toml"
    path.write_text("[limits]\nretries = 1\nretry_base_ms = 1\nretry_max_ms = 1\n")
    return ["--config", str(path)]


def chat(server: HostileServer, options: list[str], capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    status = _cli.main(["chat", "--url", server.url, *options, "hi"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_retry_notice_and_a_tool_call_show_the_servers_strings_escaped(
    twin_client: None, one_quick_retry: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    scripts = {
        CHAT: [answer(error_answer(503, "Service Unavailable")), answer(hostile_tool_call())]
    }
    with HostileServer(scripts) as server:
        status, out, err = chat(server, one_quick_retry, capsys)
    assert status == 0, err
    assert_clean(out, err)
    notice = next(line for line in err.splitlines() if line.startswith("retry 1 in 1 ms: "))
    assert f"503 to POST /v1/chat/completions: no slot {SHOWN_OSC}\\x9b2J available" in notice
    assert f"--- tool call 0: read{SHOWN_OSC}file (id id\\x1b[2J\\x9b2J) ---" in err
    assert "p\\x1b[2J" in out  # the arguments
    assert f"model          tiny{SHOWN_OSC}\n" in err  # the summary
    assert "id             chatcmpl-\\x9b2J\n" in err
    assert f"tool calls     read{SHOWN_OSC}file\n" in err


@pytest.mark.parametrize("json_mode", [[], ["--json"]])
def test_an_error_quoting_the_server_is_shown_escaped(
    json_mode: list[str],
    twin_client: None,
    one_quick_retry: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    with HostileServer({CHAT: answer(error_answer(500, "Internal Server Error"))}) as server:
        status, out, err = chat(server, [*one_quick_retry, *json_mode], capsys)
    assert status == 1
    assert_clean(out, err)
    assert err.count("\n") == 1 and f"no slot {SHOWN_OSC}\\x9b2J available" in err


def test_a_replayed_tool_call_shows_its_strings_escaped(
    twin_client: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "hostile.http").write_bytes(hostile_tool_call())
    status = _cli.main(["replay", str(tmp_path / "hostile.http")])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert_clean(out, err)
    assert f"--- tool call 0: read{SHOWN_OSC}file (id id\\x1b[2J\\x9b2J) ---" in out + err


def test_a_raw_escape_in_a_replayed_payload_is_shown_escaped(
    twin_client: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A payload that is not JSON, quoted by the error: its raw ESC and C1 bytes escaped."""
    head, _ = split(load("tool_call"))
    body = chunked([b'data: {"id": "\x1b]0;pwned\x07 \xc2\x9b2J"\n\n'])
    (tmp_path / "raw.http").write_bytes(head + body)
    status = _cli.main(["replay", str(tmp_path / "raw.http")])
    out, err = capsys.readouterr()
    assert status == 1
    assert_clean(out, err)
    assert err.count("\n") == 1


def test_a_usage_error_quoting_the_command_line_is_shown_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = _cli.main(
        ["chat", "--url", "http://h\x1b]0;x\x07:1/", "--any-slot", "--slot", "1", "hi"]
    )
    _, err = capsys.readouterr()
    assert status == 2
    assert_clean(err)
