"""The command line under odd input: replay's pacing bounded whatever the timing file says
(docs/cli.md, rules PACING and TIMING-FILE), deep JSON files ending in the one-line error (rule
JSON-FILES), and one way to end (rules EXITS, ONE-LINE, USAGE, INTERRUPT, STREAMS): usage errors
exit 2 in one style in every command, failures 1, interrupts 130 (`serve` too), diagnostics on
stderr and the answer alone on stdout.

Replay's pauses are summed through a stand-in `_sleep`, never waited for.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from _scripts import interruptible
from llamafast import _cli
from llamafast._cli import _replay
from test_cli import run_process  # the one way the CLI's tests start it as a process

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
DEEP = 100_000  # past any stack: json.loads raises RecursionError at a few thousand


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses replay asks for, summed by the test instead of taken."""
    taken: list[float] = []
    monkeypatch.setattr(_replay, "_sleep", taken.append)
    return taken


def timed(tmp_path: Path, timing: Any) -> str:
    """content_only.http with `timing` (JSON text, or a value to write as JSON) beside it."""
    (tmp_path / "x.http").write_bytes((FIXTURES / "http" / "content_only.http").read_bytes())
    text = timing if isinstance(timing, str) else json.dumps(timing)
    (tmp_path / "x.timing.json").write_text(text, encoding="utf-8")
    return str(tmp_path / "x.http")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = _cli.main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# --- replay's pacing, bounded whatever the timing file says ----------------------------------


@pytest.mark.parametrize(
    "reads",
    [
        [[0 if i % 2 else 100_000, 1] for i in range(600)],  # backwards 300 times
        [[1e300, 1], [0, 1], [1e300, 1], [1, 1]],  # huge, then backwards
        [[i, 0] for i in range(1, 600)] + [[10_000, 1]],  # reads of no bytes
    ],
    ids=["backwards", "huge", "empty reads"],
)
def test_the_pauses_add_up_to_the_limit_at_most(
    reads: list[list[float]],
    slept: list[float],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    status, out, err = run(["replay", "--json", timed(tmp_path, {"reads_ms_bytes": reads})], capsys)
    assert status == 0, err
    assert json.loads(out.splitlines()[-1])["type"] == "completion"
    assert 0 < sum(slept) <= _replay.PACE_LIMIT_S * (1 + 1e-9)


@pytest.mark.parametrize(
    ("timing", "says"),
    [
        ('{"reads_ms_bytes": [[NaN, 10]]}', "NaN is not JSON"),
        ('{"reads_ms_bytes": [[Infinity, 10]]}', "Infinity is not JSON"),
        ({"reads_ms_bytes": [[-5, 10]]}, "a read at a bad time"),
        ({"reads_ms_bytes": [[5, -10]]}, "of a bad size"),
        ({"reads_ms_bytes": [["12", 10]]}, 'not ["12", 10]'),
        ({"reads_ms_bytes": [[true, 10] for true in [True]]}, "not [true, 10]"),
        ({"reads_ms_bytes": [[5, 1.5]]}, "not [5, 1.5]"),
        ({"reads_ms_bytes": [[5]]}, "not [5]"),
        ({"reads_ms_bytes": 5}, "reads_ms_bytes is a list, not int"),
        ([], "a JSON object holds the reads, not list"),
        ("[" * DEEP + "]" * DEEP, "nested"),
        ('{"reads_ms_bytes": [' + "[" * DEEP + "]" * DEEP + "]}", "nested"),
        ('{"reads_ms_bytes": [[1e999, 10]]}', "out of range"),
    ],
)
def test_a_timing_file_that_cannot_be_paced_is_one_line(
    timing: Any, says: str, slept: list[float], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = run(["replay", timed(tmp_path, timing)], capsys)
    assert status == 1
    assert err.startswith("llamafast replay: error: ValueError: ") and err.count("\n") == 1, err
    assert "x.timing.json" in err and says in err, err
    assert out == "" and slept == []


@pytest.mark.parametrize("value", ["61", "1e300"])
def test_a_delay_past_a_minute_is_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str], slept: list[float]
) -> None:
    status, out, err = run(["replay", "--delay", value], capsys)
    assert (status, out) == (2, "")
    assert err.startswith("llamafast replay: error: --delay must be from 0 to 60 seconds, not ")


@pytest.mark.parametrize("deep", ["[" * DEEP + "]" * DEEP, '{"a":' * 300 + "1" + "}" * 300])
def test_a_deep_json_schema_is_one_line(deep: str, tmp_path: Path) -> None:
    (tmp_path / "deep.json").write_text(deep, encoding="utf-8")
    done = run_process("chat", "--json-schema", str(tmp_path / "deep.json"), "hi")
    assert done.returncode == 1
    assert done.stderr.startswith("llamafast chat: error: ValueError: ")
    assert "is not a JSON file: nested" in done.stderr and done.stderr.count("\n") == 1


# --- one way to end: usage 2 in one style, failures 1, interrupts 130 --------------------------

# `llamafast CMD: error: message (see 'llamafast CMD --help')`, one line.
USAGE = re.compile(r"(?P<prog>llamafast(?: \w+)?): error: [^\n]+ \(see '(?P=prog) --help'\)\n")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["serve", "--port", "99999"], "--port must be from 0 to 65535, not 99999"),
        (["serve", "--port", "-1"], "--port must be from 0 to 65535, not -1"),
        (["serve", "--port", "http"], "argument --port: invalid int value: 'http'"),
        (["serve", "--slots", "0"], "--slots must be at least 1, not 0"),
        (["serve", "--slots", "100000000"], "--slots must be at most 1024, not 100000000"),
        (["serve", "--bogus"], "unrecognized arguments: --bogus"),
        (["chat", "--url", "127.0.0.1:8080", "Hi"], "write http://127.0.0.1:8080"),
        (["chat", "--temperature", "hot", "Hi"], "--temperature must be a number, not 'hot'"),
        (["chat", "--thinking-budget", "-1", "Hi"], "limits.thinking_budget must be at least 0"),
        (["chat", "Hi", "--bogus"], "unrecognized arguments: --bogus"),
        (["replay", "--delay", "-1"], "--delay must be from 0 to 60 seconds, not '-1'"),
        (["replay", "--color", "pink"], "argument --color: invalid choice: 'pink'"),
        (["caht"], "unknown command 'caht'"),
    ],
)
def test_a_usage_error_exits_2_in_one_style_in_every_command(argv: list[str], says: str) -> None:
    done = run_process(*argv)
    assert done.returncode == 2, done.stderr
    assert USAGE.fullmatch(done.stderr), done.stderr
    command = argv[0] if argv[0] in ("serve", "chat", "replay") else None
    assert done.stderr.startswith(f"llamafast {command}: " if command else "llamafast: ")
    assert says in done.stderr and done.stdout == ""


def test_a_failure_exits_1_in_the_same_style(tmp_path: Path) -> None:
    for argv in (["replay", str(tmp_path / "none.http")], ["serve", "--host", "no.such.invalid"]):
        done = run_process(*argv)
        assert done.returncode == 1, done.stderr
        assert re.fullmatch(rf"llamafast {argv[0]}: error: \w+: [^\n]+\n", done.stderr), done.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_ctrl_c_on_serve_exits_130() -> None:
    proc = interruptible(
        "-m", "llamafast", "serve", "--port", "0", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("llamafast serve: http://127.0.0.1:")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, err) == (130, "llamafast: interrupted\n")


def test_replay_writes_the_answer_alone_on_stdout_as_chat_does(
    capsys: pytest.CaptureFixture[str], slept: list[float]
) -> None:
    status, out, err = run(["replay", "tool_call"], capsys)
    assert status == 0
    assert "--- done ---" not in out and "finish reason" not in out and "tool call 0" not in out
    assert "--- tool call 0: read_file" in err and "finish reason  tool_calls" in err
    assert out.endswith('"}\n') or out.endswith("}\n")  # the arguments, the answer's end
    status, out, err = run(["replay", "--json", "tool_call"], capsys)
    assert (status, err) == (0, "")  # --json: every line on stdout, for a script
    assert json.loads(out.splitlines()[-1])["type"] == "completion"
