"""The recordings: whole HTTP responses of a real llama-server, byte for byte, and their pacing.

A folder of recordings holds `NAME.http` (status line, headers and body as they were received)
and, beside one, maybe `NAME.timing.json`: when each read of it returned,
`{"reads_ms_bytes": [[ms from the request, bytes], ...]}`. `Folder` is the one reader of such a
folder, whoever reads it: `BUNDLED` (this package's folder, what `llamafast replay` plays),
`SERVE` (its `serve/` folder, what `llamafast serve` answers with) and the tests' fixtures/http.
`split` cuts a response into its head and its body. Reading a file is all this module does:
what a malformed file means (a one-line error, a test failure) is its reader's to say.
"""

from __future__ import annotations

import dataclasses
import json
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import IO

from .._strict_json import parse

__all__ = ["BUNDLED", "HTTP", "SERVE", "TIMING", "Folder", "parse_reads", "split"]

HTTP = ".http"
"""A recording's file: `NAME.http`."""
TIMING = ".timing.json"
"""Beside `NAME.http`, `NAME.timing.json` may say when each read of the recording returned:
`{"reads_ms_bytes": [[ms from the request, bytes], ...]}`."""


def parse_reads(data: bytes) -> list[tuple[float, int]]:
    """The reads ((ms, bytes) each) a timing file's bytes record; [] when it names none.

    Raises ValueError when `data` is not strict JSON (docs/assembler.md, rule STRICT-JSON: no
    NaN, no nesting past MAX_DEPTH) or a read is not `[ms, bytes]`: two numbers, the bytes an
    integer (a bool is neither)."""
    timing = parse(data.decode("utf-8"), data)
    if not isinstance(timing, dict):
        raise ValueError(f"a JSON object holds the reads, not {type(timing).__name__}")
    reads = timing.get("reads_ms_bytes", [])
    if not isinstance(reads, list):
        raise ValueError(f"reads_ms_bytes is a list, not {type(reads).__name__}")
    out = []
    for read in reads:
        if not (
            isinstance(read, list)
            and len(read) == 2
            and all(isinstance(n, int | float) and not isinstance(n, bool) for n in read)
            and isinstance(read[1], int)
        ):
            raise ValueError(f"a read is [ms, bytes], not {json.dumps(read)[:40]}")
        out.append((float(read[0]), read[1]))
    return out


def split(raw: bytes) -> tuple[bytes, bytes]:
    """(head including the blank line, body) of a recorded response."""
    end = raw.index(b"\r\n\r\n") + 4
    return raw[:end], raw[end:]


@dataclasses.dataclass(frozen=True)
class Folder:
    """A folder of recordings (a package's resources or a directory on disk)."""

    root: Traversable

    def names(self) -> list[str]:
        """The recordings' names, sorted."""
        found = (p.name for p in self.root.iterdir())
        return sorted(name.removesuffix(HTTP) for name in found if name.endswith(HTTP))

    def http(self, name: str) -> Traversable:
        """Where recording `name`'s bytes are."""
        return self.root.joinpath(f"{name}{HTTP}")

    def timing(self, name: str) -> Traversable:
        """Where recording `name`'s timing is, when it has one (`is_file()`)."""
        return self.root.joinpath(f"{name}{TIMING}")

    def raw(self, name: str) -> bytes:
        """Recording `name`'s bytes: status line, headers, body."""
        return self.http(name).read_bytes()

    def open(self, name: str) -> IO[bytes]:
        """Recording `name` as a binary file (the caller closes it)."""
        return self.http(name).open("rb")

    def reads(self, name: str) -> list[tuple[float, int]]:
        """The reads recording `name`'s timing records; [] when it has no timing file."""
        timing = self.timing(name)
        return parse_reads(timing.read_bytes()) if timing.is_file() else []


BUNDLED = Folder(files(__name__))
SERVE = Folder(BUNDLED.root.joinpath("serve"))
