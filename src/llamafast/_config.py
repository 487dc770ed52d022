"""What the body builder and the client read: nested frozen dataclasses with working defaults.

Every field is checked when the object is built (type and range), so a bad `Config(...)` fails
as early as a bad file; `Config.from_toml` adds the unknown-key check and names the file.
"""

from __future__ import annotations

import dataclasses
import math
import os
import textwrap
import tomllib
from dataclasses import dataclass, field
from typing import Any

from ._errors import cut
from ._url import Target, redact
from ._values import seal

__all__ = ["MAX_SECONDS", "Config", "InferConfig", "Limits"]

_INT_MAX = 2**63 - 1

MAX_SECONDS = 86_400.0
"""The longest timeout, deadline or wait a `Limits` field may set: one day (docs/client.md, rule
TIMEOUT-BOUND). The clients add a timeout to the clock and hand it to the OS (a socket's timeout,
a select): a larger one overflows there (OverflowError, struct.error) instead of being honoured,
so it is refused here, when the config is made, naming the field."""


def _range(lo: float | None = None, hi: float | None = None, *, open_lo: bool = False) -> Any:
    return {"lo": lo, "hi": hi, "open_lo": open_lo}


def _check(obj: Any, table: str) -> None:
    """Check each field of the dataclass `obj` against its type and its `_range` metadata."""
    for f in dataclasses.fields(obj):
        key = f"{table}.{f.name}"
        value = getattr(obj, f.name)
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        if kind == "bool":
            ok = isinstance(value, bool)
        elif kind == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind == "float":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok and isinstance(value, int):
                object.__setattr__(obj, f.name, float(value))
                value = float(value)
        elif kind == "str":
            ok = isinstance(value, str)
        elif kind == "str | None":
            ok = value is None or isinstance(value, str)
        else:  # a nested table, checked by its own __post_init__
            continue
        if not ok:
            if f.metadata.get("secret"):  # a key in the wrong place is still a key: not shown
                raise ValueError(f"{key} must be {_KIND_NAMES[kind]}, not {type(value).__name__}")
            raise ValueError(f"{key} must be {_KIND_NAMES[kind]}, not {value!r}")
        if kind == "float" and not math.isfinite(value):
            raise ValueError(f"{key} must be a finite number, not {value!r}")
        bounds = f.metadata.get("range")
        if bounds is None:
            continue
        lo, hi, open_lo = bounds["lo"], bounds["hi"], bounds["open_lo"]
        if (lo is not None and (value <= lo if open_lo else value < lo)) or (
            hi is not None and value > hi
        ):
            raise ValueError(f"{key} must be {_describe(lo, hi, open_lo)}, not {value!r}")


_KIND_NAMES = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "str | None": "a string",
}


def _describe(lo: float | None, hi: float | None, open_lo: bool) -> str:
    if hi == MAX_SECONDS:  # a timeout: name the bound's meaning (rule TIMEOUT-BOUND)
        return f"more than {lo:g} and at most {hi:g} seconds (one day)"
    if lo is not None and hi is not None:
        return f"{'more than' if open_lo else 'at least'} {lo:g} and at most {hi:g}"
    if lo is not None:
        return f"{'more than' if open_lo else 'at least'} {lo:g}"
    return f"at most {hi:g}"


def _document(cls: Any) -> Any:
    """Append each field's `doc` metadata, with its default, to the class docstring: the field
    holds the one explanation, and help() shows it."""
    lines = [cls.__doc__.rstrip(), "", "Fields (default):"]
    for f in dataclasses.fields(cls):
        text = f"{f.name} ({f.default!r}): {f.metadata['doc']}"
        lines.append(
            textwrap.fill(
                text,
                92,
                initial_indent="    ",
                subsequent_indent="        ",
                break_long_words=False,
                break_on_hyphens=False,  # "docs/request-body.md" stays whole
            )
        )
    cls.__doc__ = "\n".join(lines) + "\n"
    return cls


def _r(
    default: Any,
    lo: float | None = None,
    hi: float | None = None,
    *,
    open_lo: bool = False,
    doc: str = "",
) -> Any:
    return field(default=default, metadata={"range": _range(lo, hi, open_lo=open_lo), "doc": doc})


_DEFAULT_URL = "http://127.0.0.1:8080"


def _shown(name: str, value: object) -> str:
    if name == "url":
        return repr(redact(str(value)))
    if name == "urls" and isinstance(value, tuple):
        return repr(tuple(redact(str(u)) for u in value))
    return repr(value)


@_document
@dataclass(frozen=True, slots=True)
class InferConfig:
    """Where the server is and how to sample: the `[infer]` table."""

    url: str = field(
        default=_DEFAULT_URL,
        metadata={
            "doc": "the server's URL, http:// or https://; a path in it prefixes every request "
            "(a final /v1 dropped), a query goes with every request, user:password@ is sent as "
            "Basic auth and the password never shown (docs/client.md, rule URL)"
        },
    )
    model: str = field(default="default", metadata={"doc": "the body's `model` field"})
    temperature: float = _r(
        0.6,
        0.0,
        100.0,
        doc="the sampling temperature when the request sets none "
        "(docs/request-body.md, rule FALLBACK)",
    )
    top_p: float = _r(0.95, 0.0, 1.0, doc="nucleus sampling, when the request sets none")
    top_k: int = _r(
        20, 0, _INT_MAX, doc="the k likeliest tokens (0: all), when the request sets none"
    )
    api_key: str | None = field(
        default=None,
        repr=False,
        metadata={
            "secret": True,
            "doc": "sent as `Authorization: Bearer <key>` on every request; a secret, never in "
            "repr() or an error message (docs/client.md, rule API-KEY)",
        },
    )
    ca_file: str | None = field(
        default=None,
        metadata={
            "doc": "a PEM file of CA certificates to trust for an https:// server (a private "
            "CA), instead of the system's; read when a client is made (docs/client.md, rule TLS)"
        },
    )

    urls: tuple[str, ...] = field(
        default=(),
        metadata={
            "doc": "several servers serving the same model, each checked as `url` (then left at "
            "its default): a conversation's turns go to one of them, its prompt cache "
            "(docs/client.md, rule FLEET)"
        },
    )

    def __post_init__(self) -> None:
        _check(self, "infer")
        target = Target.parse(self.url)  # docs/client.md, rule URL
        targets = self._targets()
        key = self.api_key
        # It goes into an HTTP header: visible ASCII only (a line break would end the header,
        # and the HTTP client's own complaint would show the key).
        if key is not None and not (key and key.isascii() and key.isprintable()):
            what = "empty" if not key else "not printable ASCII"
            raise ValueError(
                f"infer.api_key is {what}: a key is sent in an HTTP header, so it must be "
                "printable ASCII characters (the key is not shown here)"
            )
        if self.ca_file == "":
            raise ValueError("infer.ca_file is empty: give the path of a PEM file, or leave it out")
        if key is not None and any(t.auth_header is not None for t in (target, *targets)):
            raise ValueError(
                "infer.url has a user name or password and infer.api_key is set: both would be "
                "the Authorization header, so give only one (neither is shown here)"
            )

    def _targets(self) -> list[Target]:
        """`urls` checked (rule FLEET): a tuple of URLs, each as `url` is, and not with `url`."""
        urls = self.urls
        if isinstance(urls, list):  # as TOML gives it
            object.__setattr__(self, "urls", tuple(urls))
            urls = self.urls
        if not isinstance(urls, tuple):
            raise ValueError(f"infer.urls must be a list of URLs, not {cut(redact(str(urls)))}")
        if urls and self.url != _DEFAULT_URL:
            raise ValueError(
                f"infer.url ({redact(self.url)}) and infer.urls are both given: give the one "
                "server as url, or every server in urls"
            )
        targets = []
        for i, url in enumerate(urls):
            try:
                targets.append(Target.parse(url))
            except ValueError as err:
                raise ValueError(str(err).replace("infer.url", f"infer.urls[{i}]", 1)) from None
        return targets

    def __repr__(self) -> str:
        # As the generated one, but the URLs' passwords shown as *** (api_key is left out).
        shown = [
            f"{f.name}={_shown(f.name, getattr(self, f.name))}"
            for f in dataclasses.fields(self)
            if f.repr
        ]
        return f"InferConfig({', '.join(shown)})"


@_document
@dataclass(frozen=True, slots=True)
class Limits:
    """Every bound the reader, the body builder and the client respect: the `[limits]` table."""

    max_tokens: int = _r(4096, 1, _INT_MAX, doc="the body's max_tokens when the request sets none")
    max_line: int = _r(
        1 << 20,
        1,
        _INT_MAX,
        doc="the longest event-stream line, in bytes (docs/sse.md, rule MAX-LINE)",
    )
    wait_timeout: float = _r(
        600.0,
        0.0,
        MAX_SECONDS,
        open_lo=True,
        doc="seconds a request may wait for its turn, its slot and its first byte "
        "(docs/client.md, rule WAIT)",
    )
    load_timeout: float = _r(
        600.0,
        0.0,
        MAX_SECONDS,
        open_lo=True,
        doc="seconds to wait for a model load (docs/client.md, rule LOAD)",
    )
    stall_timeout: float = _r(
        60.0,
        0.0,
        MAX_SECONDS,
        open_lo=True,
        doc="seconds without a byte once the stream started (docs/client.md, rule STALL)",
    )
    connect_timeout: float = _r(
        10.0,
        0.0,
        MAX_SECONDS,
        open_lo=True,
        doc="seconds to open a connection; also bounds each /slots, /health and control request",
    )
    retries: int = _r(
        3,
        0,
        1000,
        doc="retries of a failed connection or a 503 before the first byte "
        "(docs/client.md, rule RETRIES)",
    )
    retry_base_ms: int = _r(
        200,
        1,
        3_600_000,
        doc="the first back-off in ms, doubled each retry (docs/client.md, rule BACKOFF)",
    )
    retry_max_ms: int = _r(
        10_000, 1, 3_600_000, doc="the longest back-off in ms; at least retry_base_ms"
    )
    wait_for_slot: bool = field(
        default=True,
        metadata={
            "doc": "when false, a busy slot is BusyError at once instead of a wait "
            "(docs/client.md, rule SLOTS)"
        },
    )
    thinking_budget: int = _r(
        0,
        0,
        _INT_MAX,
        doc="reasoning tokens after which the server is asked to end the reasoning; 0: off "
        "(docs/client.md, rule BUDGET)",
    )
    thinking_hard_cap: int = _r(
        0,
        0,
        _INT_MAX,
        doc="reasoning tokens after which the stream is closed; 0: off, else at least "
        "thinking_budget (docs/client.md, rule HARD-CAP)",
    )
    sse_ping_interval: float = _r(
        0.0, 0.0, 3600.0, doc="seconds between the server's ping comments, sent in the body; 0: off"
    )
    slot_check_delay: float = _r(
        0.25,
        0.0,
        MAX_SECONDS,
        open_lo=True,
        doc="seconds without a first byte before /slots is asked (docs/client.md, rule SLOTS)",
    )

    embed_batch: int = _r(
        64,
        1,
        1 << 20,
        doc="texts per embeddings request; an `embed` call of more sends several, in order "
        "(as many at a time as the server has slots, at most max_connections)",
    )
    max_connections: int = _r(
        32,
        1,
        1 << 16,
        doc="connections open to one server at once for one call, whatever its /slots "
        "claims (docs/client.md, rule FAN-OUT)",
    )
    resume: bool = field(
        default=True,
        metadata={
            "doc": "resume a broken stream where the server supports it, and stop the "
            "generation of a stream closed early (docs/client.md, rule RESUME)"
        },
    )

    def __post_init__(self) -> None:
        _check(self, "limits")
        if self.thinking_hard_cap and self.thinking_hard_cap < self.thinking_budget:
            raise ValueError(
                f"limits.thinking_hard_cap must be at least limits.thinking_budget "
                f"({self.thinking_budget}), not {self.thinking_hard_cap}"
            )
        if self.retry_max_ms < self.retry_base_ms:
            raise ValueError(
                f"limits.retry_max_ms must be at least limits.retry_base_ms "
                f"({self.retry_base_ms}), not {self.retry_max_ms}"
            )


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the body builder and the clients read: `infer` (an `InferConfig`, where the
    server is and how to sample) and `limits` (a `Limits`, every bound). Both default to their
    own defaults; `Config.from_toml(path)` reads them from the `[infer]` and `[limits]` tables."""

    infer: InferConfig = field(default_factory=InferConfig)
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        if not isinstance(self.infer, InferConfig):
            raise ValueError(f"infer must be an InferConfig, not {self.infer!r}")
        if not isinstance(self.limits, Limits):
            raise ValueError(f"limits must be a Limits, not {self.limits!r}")

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> Config:
        """Read a TOML file with optional `[infer]` and `[limits]` tables.

        Raises `ValueError` naming the file and the key for an unknown key, a wrong type or an
        out-of-range value; `OSError` if the file cannot be read.
        """
        name = os.fspath(path)
        with open(name, "rb") as file:
            try:
                data = tomllib.load(file)
            except tomllib.TOMLDecodeError as err:
                raise ValueError(f"{name}: not valid TOML: {err}") from None
        tables: dict[str, Any] = {"infer": InferConfig, "limits": Limits}
        for key, value in data.items():
            if key not in tables:
                raise ValueError(f"{name}: unknown key {key!r} (expected [infer] or [limits])")
            if not isinstance(value, dict):
                raise ValueError(f"{name}: {key} must be a table, not {value!r}")
            known = {f.name for f in dataclasses.fields(tables[key])}
            for sub in value:
                if sub not in known:
                    raise ValueError(
                        f"{name}: unknown key {key}.{sub} (known: {', '.join(sorted(known))})"
                    )
        try:
            return cls(
                infer=InferConfig(**data.get("infer", {})),
                limits=Limits(**data.get("limits", {})),
            )
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None


seal(globals())
