"""The server's address, split once from `cfg.infer.url`."""

from __future__ import annotations

import dataclasses
import urllib.parse

__all__ = ["Target"]


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """The server's address, split once from `cfg.infer.url` (a path prefix is kept)."""

    scheme: str
    host: str
    port: int
    prefix: str
    url: str

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urllib.parse.urlsplit(url)
        if not parts.hostname:
            raise ValueError(f"infer.url has no host: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"), url.rstrip("/"))

    def path(self, path: str) -> str:
        return self.prefix + path
