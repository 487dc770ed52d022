"""Config: defaults that work, and from_toml rejecting bad files with the key and the file named."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from llamafast import Config, InferConfig, Limits


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llamafast.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_match_api_md() -> None:
    cfg = Config()
    assert cfg.infer == InferConfig("http://127.0.0.1:8080", "default", 0.6, 0.95, 20)
    assert cfg.limits.max_tokens == 4096
    assert cfg.limits.max_line == 1 << 20
    assert cfg.limits.max_connections == 32  # docs/client.md, rule FAN-OUT


def test_config_is_immutable_and_compares_by_value() -> None:
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.infer = InferConfig()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.limits.not_a_key = 1  # type: ignore[attr-defined]
    assert Config() == cfg
    assert hash(Config()) == hash(cfg)


def test_from_toml_reads_both_tables(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[infer]\nurl = "http://10.0.0.2:9000"\nmodel = "qwen"\ntemperature = 1\n'
        "[limits]\nmax_tokens = 100\nwait_for_slot = false\nstall_timeout = 2.5\n",
    )
    cfg = Config.from_toml(path)
    assert cfg.infer.url == "http://10.0.0.2:9000"
    assert cfg.infer.model == "qwen"
    assert cfg.infer.temperature == 1.0 and isinstance(cfg.infer.temperature, float)
    assert cfg.limits.max_tokens == 100
    assert cfg.limits.wait_for_slot is False
    assert cfg.limits.stall_timeout == 2.5
    assert cfg.infer.top_k == 20  # unspecified keys keep their defaults


def test_from_toml_of_an_empty_file_is_the_default(tmp_path: Path) -> None:
    assert Config.from_toml(write(tmp_path, "")) == Config()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[serve]\nport = 1\n", "serve"),
        ("[infer]\nmodle = 'x'\n", "infer.modle"),
        ("[limits]\nmax_tokes = 3\n", "limits.max_tokes"),
        ("top_k = 3\n", "top_k"),
    ],
)
def test_unknown_keys_are_rejected_naming_key_and_file(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match="unknown key") as err:
        Config.from_toml(path)
    assert key in str(err.value)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[infer]\ntop_k = '20'\n", "infer.top_k"),
        ("[infer]\ntop_k = 2.5\n", "infer.top_k"),
        ("[infer]\ntemperature = 'hot'\n", "infer.temperature"),
        ("[infer]\nmodel = 3\n", "infer.model"),
        ("[limits]\nmax_tokens = true\n", "limits.max_tokens"),
        ("[limits]\nwait_for_slot = 1\n", "limits.wait_for_slot"),
        ("[limits]\nstall_timeout = nan\n", "limits.stall_timeout"),
        ("infer = 3\n", "infer"),
    ],
)
def test_wrong_types_are_rejected_naming_key_and_file(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ValueError) as err:
        Config.from_toml(path)
    assert key in str(err.value)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[infer]\ntop_p = 1.5\n", "infer.top_p"),
        ("[infer]\ntemperature = -0.1\n", "infer.temperature"),
        ("[infer]\ntop_k = -1\n", "infer.top_k"),
        ("[infer]\nurl = 'localhost:8080'\n", "infer.url"),
        ("[infer]\nurl = 'http://h:8080/#top'\n", "infer.url"),
        ("[infer]\nurl = 'http://h:0'\n", "infer.url"),
        ('[infer]\nurl = "http://h/a\\tb"\n', "infer.url"),
        ("[limits]\nmax_tokens = 0\n", "limits.max_tokens"),
        ("[limits]\nmax_line = 0\n", "limits.max_line"),
        ("[limits]\nstall_timeout = 0\n", "limits.stall_timeout"),
        ("[limits]\nretries = -1\n", "limits.retries"),
        ("[limits]\nmax_connections = 0\n", "limits.max_connections"),
        ("[limits]\nthinking_budget = 100\nthinking_hard_cap = 50\n", "limits.thinking_hard_cap"),
        ("[limits]\nretry_base_ms = 500\nretry_max_ms = 100\n", "limits.retry_max_ms"),
    ],
)
def test_out_of_range_values_are_rejected_naming_key_and_file(
    tmp_path: Path, text: str, key: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ValueError) as err:
        Config.from_toml(path)
    assert key in str(err.value)
    assert str(path) in str(err.value)


def test_a_password_in_the_url_is_not_shown_by_repr_nor_by_a_file_error(tmp_path: Path) -> None:
    # docs/client.md, rule URL: the password is replaced by *** wherever the URL is shown
    infer = InferConfig(url="http://me:pa55word@h:8080/v1")
    assert repr(infer).startswith("InferConfig(url='http://me:***@h:8080/v1', model='default'")
    assert "pa55word" not in repr(infer) + repr(Config(infer=infer))
    assert infer.url == "http://me:pa55word@h:8080/v1"  # the field itself is as given
    path = write(tmp_path, "[infer]\nurl = 'http://me:pa55word@h:99999'\n")
    with pytest.raises(ValueError) as err:
        Config.from_toml(path)
    assert str(path) in str(err.value) and "infer.url" in str(err.value)
    assert "pa55word" not in str(err.value) and "http://me:***@h:99999" in str(err.value)


def test_a_password_in_the_url_and_an_api_key_are_refused_together(tmp_path: Path) -> None:
    path = write(tmp_path, "[infer]\nurl = 'http://me:pa55word@h'\napi_key = 'sk-123'\n")
    with pytest.raises(ValueError) as err:
        Config.from_toml(path)
    assert str(path) in str(err.value) and "infer.api_key" in str(err.value)
    assert "pa55word" not in str(err.value) and "sk-123" not in str(err.value)


def test_not_toml_is_a_value_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[infer\n")
    with pytest.raises(ValueError, match="not valid TOML") as err:
        Config.from_toml(path)
    assert str(path) in str(err.value)


def test_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Config.from_toml(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("make", "key"),
    [
        (lambda: Limits(max_line=-5), "limits.max_line"),
        (lambda: InferConfig(top_k=True), "infer.top_k"),
        (lambda: Config(limits="big"), "limits"),
        (lambda: Limits(max_connections=0), "limits.max_connections"),
        (lambda: Limits(max_connections=-1), "limits.max_connections"),
        (lambda: Limits(max_connections=2.0), "limits.max_connections"),
        (lambda: Limits(max_connections=True), "limits.max_connections"),
        (lambda: Limits(max_connections="8"), "limits.max_connections"),
    ],
)
def test_constructing_a_bad_config_directly_fails_the_same_way(make: Any, key: str) -> None:
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        make()


def test_every_limits_field_can_be_set_from_toml(tmp_path: Path) -> None:
    # Whatever field Limits gains later is readable from the [limits] table.
    defaults = Limits()
    lines = []
    for f in dataclasses.fields(Limits):
        value = getattr(defaults, f.name)
        text = str(value).lower() if isinstance(value, bool) else repr(value)
        lines.append(f"{f.name} = {text}")
    cfg = Config.from_toml(write(tmp_path, "[limits]\n" + "\n".join(lines) + "\n"))
    assert cfg.limits == defaults


# --- api_key: read like any key, never shown --------------------------------------------------

SECRET = "sk-s3cr3t-Do-Not-Print"


def test_from_toml_reads_the_api_key(tmp_path: Path) -> None:
    cfg = Config.from_toml(write(tmp_path, f'[infer]\napi_key = "{SECRET}"\n'))
    assert cfg.infer.api_key == SECRET
    assert Config.from_toml(write(tmp_path, "")).infer.api_key is None


def test_the_api_key_is_not_in_repr_or_str() -> None:
    cfg = Config(InferConfig(api_key=SECRET))
    for text in (repr(cfg), str(cfg), repr(cfg.infer), str(cfg.infer)):
        assert SECRET not in text
    assert cfg != Config()  # still part of the value


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("12345678901234", "infer.api_key must be a string, not int"),
        ('"sk-abc\\ndef"', "infer.api_key is not printable ASCII"),
        ('"sk-\u00e9t\u00e9"', "infer.api_key is not printable ASCII"),
        ('""', "infer.api_key is empty"),
    ],
)
def test_a_bad_api_key_is_refused_without_showing_it(tmp_path: Path, value: str, says: str) -> None:
    path = write(tmp_path, f"[infer]\napi_key = {value}\n")
    with pytest.raises(ValueError) as err:
        Config.from_toml(path)
    message = str(err.value)
    assert says in message and str(path) in message, message
    for part in ("12345678901234", "abc", "def", "\u00e9t\u00e9"):
        assert part not in message


def test_a_bad_api_key_in_the_constructor_is_not_shown_either() -> None:
    with pytest.raises(ValueError) as err:
        InferConfig(api_key=f"{SECRET}\r\nX-Evil: 1")
    assert SECRET not in str(err.value) and "Evil" not in str(err.value)
    with pytest.raises(ValueError) as err2:
        InferConfig(api_key=[SECRET])  # type: ignore[arg-type]
    assert SECRET not in str(err2.value)


# --- TIMEOUT-BOUND: no timeout past one day (docs/client.md) -----------------------------------

# Every Limits field that is a time, in seconds or in ms: each is bounded by one day or less.
SECONDS = [f.name for f in dataclasses.fields(Limits) if f.type == "float"]
TIMEOUTS = ["wait_timeout", "load_timeout", "stall_timeout", "connect_timeout", "slot_check_delay"]
MILLISECONDS = ["retry_base_ms", "retry_max_ms"]


def test_the_time_fields_are_the_ones_this_module_bounds() -> None:
    # A new float field of Limits is a time too, and needs its bound here and in the docs.
    assert sorted(SECONDS) == sorted([*TIMEOUTS, "sse_ping_interval"])


@pytest.mark.parametrize("name", TIMEOUTS)
@pytest.mark.parametrize("value", [86_400.5, 1e12, 1e300])
def test_a_timeout_past_one_day_is_refused_naming_the_field_and_the_bound(
    name: str, value: float
) -> None:
    with pytest.raises(ValueError) as err:
        Limits(**{name: value})
    assert str(err.value) == (
        f"limits.{name} must be more than 0 and at most 86400 seconds (one day), not {value!r}"
    )
    assert Limits(**{name: 86_400}).__getattribute__(name) == 86_400.0  # the bound itself


@pytest.mark.parametrize("name", TIMEOUTS)
def test_a_timeout_past_one_day_in_the_file_is_refused_naming_file_field_and_bound(
    tmp_path: Path, name: str
) -> None:
    path = write(tmp_path, f"[limits]\n{name} = 1e12\n")
    with pytest.raises(ValueError) as err:
        Config.from_toml(path)
    assert str(err.value) == (
        f"{path}: limits.{name} must be more than 0 and at most 86400 seconds (one day), "
        "not 1000000000000.0"
    )
    at_bound = Config.from_toml(write(tmp_path, f"[limits]\n{name} = 86400\n"))
    assert getattr(at_bound.limits, name) == 86_400.0


@pytest.mark.parametrize("name", [*SECONDS, *MILLISECONDS])
def test_every_time_field_is_bounded_by_one_day_or_less(name: str) -> None:
    past = 86_400.5 if name in SECONDS else 86_400_001
    with pytest.raises(ValueError, match=f"limits\\.{name} must be .* at most"):
        Limits(**{name: past})
