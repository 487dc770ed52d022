"""Timings: the server's times beside its counts, and the two rates derived from them.

Both twins read `prompt_ms` and `predicted_ms` from the latest chunk with timings (a missing one
is 0.0, an integer is taken as a float), and refuse a time that is not a non-negative number
with the same ProtocolError.
"""

from __future__ import annotations

import json
import types
from typing import Any

import pytest

from _recordings import load_expected, open_recording, recorded_times, stream_recordings
from llamafast import ProtocolError, Timings

ID = '"id":"c-1"'


def payload(timings: Any, finish: str | None = None) -> str:
    reason = "null" if finish is None else json.dumps(finish)
    return (
        "{" + ID + ',"choices":[{"index":0,"finish_reason":' + reason + ',"delta":{}}],'
        '"timings":' + json.dumps(timings) + "}"
    )


def finished(impl: types.SimpleNamespace, *timings: Any) -> Timings:
    asm = impl.Assembler()
    for t in timings:
        asm.push(payload(t))
    asm.push('{"choices":[{"finish_reason":"stop"}]}')
    return asm.finish().timings


def test_the_rates_are_tokens_per_second() -> None:
    t = Timings(cache_n=0, prompt_n=32, predicted_n=10, prompt_ms=2.3, predicted_ms=3.081)
    assert t.prompt_per_second == 32 / 2.3 * 1000
    assert t.predicted_per_second == 10 / 3.081 * 1000


def test_the_rates_are_zero_when_no_time_was_measured() -> None:
    assert Timings(prompt_n=5, predicted_n=7).prompt_per_second == 0.0
    assert Timings(prompt_n=5, predicted_n=7).predicted_per_second == 0.0
    assert Timings().prompt_per_second == 0.0


def test_both_times_are_read_from_the_latest_timings(impl: types.SimpleNamespace) -> None:
    got = finished(
        impl,
        {"prompt_n": 1, "prompt_ms": 1.5, "predicted_n": 1, "predicted_ms": 0.5},
        {"prompt_n": 2, "prompt_ms": 4.25, "predicted_n": 3, "predicted_ms": 9.0},
    )
    assert got == Timings(0, 2, 3, 4.25, 9.0)


def test_a_missing_time_is_zero_and_an_integer_is_a_float(impl: types.SimpleNamespace) -> None:
    got = finished(impl, {"prompt_ms": 5.0, "predicted_ms": 2.0}, {"prompt_ms": 7})
    assert got == Timings(0, 0, 0, 7.0, 0.0)
    assert type(got.prompt_ms) is float and type(got.predicted_ms) is float


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('"1.5"', "is a string, not a number"),
        ("true", "is a boolean, not a number"),
        ("null", "is null, not a number"),
        ("[]", "is an array, not a number"),
        ("-0.5", "is negative: -0.5"),
        ("-3", "is negative: -3.0"),
    ],
)
@pytest.mark.parametrize("field", ["prompt_ms", "predicted_ms"])
def test_a_time_that_is_not_a_non_negative_number_is_a_protocol_error(
    impl: types.SimpleNamespace, field: str, value: str, says: str
) -> None:
    bad = "{" + ID + ',"choices":[],"timings":{"' + field + '":' + value + "}}"
    asm = impl.Assembler()
    with pytest.raises(ProtocolError) as err:
        asm.push(bad)
    assert str(err.value).startswith(f'"timings.{field}" {says}: '), str(err.value)


def test_a_bad_time_changes_nothing(impl: types.SimpleNamespace) -> None:
    asm = impl.Assembler()
    asm.push(payload({"prompt_n": 4, "prompt_ms": 2.0, "predicted_ms": 1.0}))
    with pytest.raises(ProtocolError):
        asm.push(payload({"prompt_n": 9, "prompt_ms": 3.0, "predicted_ms": -1.0}))
    asm.push('{"choices":[{"finish_reason":"stop"}]}')
    assert asm.finish().timings == Timings(0, 4, 0, 2.0, 1.0)


STREAMS = stream_recordings()


@pytest.mark.parametrize("name", STREAMS)
def test_the_recorded_times_and_rates(impl: types.SimpleNamespace, name: str) -> None:
    """The expected files give only the counts: the times come from the raw recording's last
    chunk with timings, and the rates agree with the ones the server computed there."""
    expected = load_expected(name)
    if "server_error" in expected:
        pytest.skip("a stream that fails has no Completion")
    last: dict[str, Any] = {}
    for item in expected["items"]:
        if '"timings"' in item.get("data", ""):
            last = json.loads(item["data"])["timings"]
    assert last, name
    with impl.ChatStream(open_recording(name)) as stream:
        for _ in stream:
            pass
        t = stream.completion.timings
    assert (t.prompt_ms, t.predicted_ms) == (last["prompt_ms"], last["predicted_ms"])
    assert {"prompt_ms": t.prompt_ms, "predicted_ms": t.predicted_ms} == recorded_times(expected)
    assert t.prompt_per_second == pytest.approx(last["prompt_per_second"], rel=1e-9, abs=1e-9)
    # The server's own predicted rate leaves out the first token (timed with the prompt):
    # ours is the contract's, predicted_n / predicted_ms.
    assert t.predicted_per_second == (
        t.predicted_n / t.predicted_ms * 1000 if t.predicted_ms else 0.0
    )
    if last["predicted_n"] > 1:
        n, ms = last["predicted_n"], last["predicted_ms"]
        assert last["predicted_per_second"] == pytest.approx((n - 1) / ms * 1000, rel=1e-9)
