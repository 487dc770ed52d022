"""The server's URL (`cfg.infer.url`), checked and split once: what the transport connects to
and sends, and the form that may be shown (docs/client.md, rule URL)."""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import re
import urllib.parse

from ._errors import cut

__all__ = ["Target", "redact"]

# What a request target may hold as it is (RFC 3986: a path's characters, and "?" in a query).
# Any other character, a non-ASCII one included, is sent as the %XX escapes of its UTF-8 bytes,
# so the request line is always ASCII; a "%" that starts an escape is kept as it is.
_SAFE = "/:@!$&'()*+,;=?%"
_PLAIN = re.compile(r"[A-Za-z0-9._~/:@!$&'()*+,;=?-]*")
_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# A host name as sent (after IDNA for a non-ASCII one); "_" appears in container names.
_HOST_NAME = re.compile(r"[a-z0-9_.-]+")
# C0 controls and DEL: a URL never holds one (urllib would drop a tab or a line break silently).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _encode(text: str) -> str:
    if _PLAIN.fullmatch(text):
        return text  # the common case: nothing to escape
    return urllib.parse.quote(_STRAY_PERCENT.sub("%25", text), safe=_SAFE)


def redact(url: str) -> str:
    """`url` with the password of its user info replaced by `***`, checked or not.

    Anything between the scheme and the last "@" counts as user info, so a password holding a
    raw "/", "?" or "#" is hidden too (a path holding "@" is then cut more than needed).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at, place = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return f"{scheme}{sep}{user}:***@{place}"


def _refuse(why: str, url: str) -> ValueError:
    """The error for a URL that cannot be used: the field, why, and the URL (no password)."""
    return ValueError(f"infer.url {why}: {cut(redact(url))}")


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """The server's address, split once from `cfg.infer.url`.

    `host` and `port` are what to connect to (`host` ASCII, an IPv6 literal without brackets);
    `host_header` the `Host` header's value; `prefix` the URL's path, percent-encoded, without
    a final "/" or "/v1"; `query` "" or "?..." as in the URL; `auth_header` the
    `Authorization` value for the URL's user info (None without); `url` the form that may be
    shown: the password as `***`.
    """

    scheme: str
    host: str
    port: int
    prefix: str
    url: str
    query: str
    host_header: str
    auth_header: str | None = dataclasses.field(repr=False)

    @classmethod
    def parse(cls, url: str) -> Target:
        """Check `url` and split it; a `ValueError` naming infer.url and the URL (its password
        as `***`) if it cannot be used."""
        _check_text(url)
        try:
            parts = urllib.parse.urlsplit(url)
            host = parts.hostname
        except ValueError:  # unbalanced brackets, a bracketed host that is no IP address
            raise _refuse("has a bad host", url) from None
        scheme = parts.scheme.lower()
        host, port, host_header = _address(url, scheme, host, parts)
        try:
            prefix = _encode(parts.path).rstrip("/")
            query = _encode(parts.query)
        except UnicodeError:
            raise _refuse("is not valid Unicode", url) from None
        # An openai-style base URL ends in /v1; the client's own paths already start with it
        # (/v1/chat/completions) or are the server's root ones (/slots, /health): the same
        # server either way.
        if prefix.endswith("/v1"):
            prefix = prefix[: -len("/v1")]
        auth_header, shown_user = _user_info(url, parts)
        if query:
            query = "?" + query
        shown = f"{scheme}://{shown_user}{host_header}{prefix}{query}"
        return cls(scheme, host, port, prefix, shown, query, host_header, auth_header)

    def path(self, path: str) -> str:
        """The request target for the client's `path`: the prefix, `path` (percent-encoded),
        and the URL's query. The query goes on every request: it is part of the server's
        address (a proxy or gateway in front of llama-server may route or admit by it)."""
        path = self.prefix + _encode(path)
        if not self.query:
            return path
        return path + ("&" + self.query[1:] if "?" in path else self.query)


def _check_text(url: str) -> None:
    """Refuse a URL by its text alone: not a string, a control character, spaces around it,
    a scheme other than http and https, a fragment."""
    if not isinstance(url, str):
        raise ValueError(f"infer.url must be a string, not {type(url).__name__}")
    if _CONTROL.search(url):
        raise _refuse("has a control character", url)
    if url != url.strip():
        raise _refuse("has spaces around it", url)
    if not url.lower().startswith(("http://", "https://")):
        raise ValueError(f"infer.url must start with http:// or https://, not {cut(redact(url))}")
    if "#" in url:
        # A fragment only means something to a browser; it is never sent to a server.
        raise _refuse("has a fragment (#...), which is never sent to a server", url)


def _address(
    url: str, scheme: str, host: str | None, parts: urllib.parse.SplitResult
) -> tuple[str, int, str]:
    """(host, port, Host header) of the split `url`: the host as connected to (ASCII, after
    IDNA; an IPv6 literal without brackets), the port (the scheme's when not given)."""
    if not host:
        raise _refuse("has no host", url)
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:  # 0, out of range, or not a number
        raise _refuse("has a bad port (it must be 1 to 65535)", url)
    port = port or (443 if scheme == "https" else 80)
    try:
        if ":" in host:  # urlsplit only gives a ":" for a bracketed host
            host = str(ipaddress.IPv6Address(host))
            ascii_host = f"[{host}]"
        else:
            host = host.encode("idna").decode("ascii")
            if not _HOST_NAME.fullmatch(host):
                raise ValueError(host)
            ascii_host = host
    except (ValueError, UnicodeError):
        raise _refuse("has a bad host", url) from None
    default = 443 if scheme == "https" else 80
    return host, port, ascii_host if port == default else f"{ascii_host}:{port}"


def _user_info(url: str, parts: urllib.parse.SplitResult) -> tuple[str | None, str]:
    """(the `Authorization` header, the user info as shown) of the split `url`: (None, "")
    without user info. User info is sent as Basic auth (as httpx and requests do), its escapes
    decoded; it is shown with the password as `***`."""
    user, password = parts.username, parts.password
    if not user and password is None:
        return None, ""
    try:
        plain = urllib.parse.unquote(user or "", errors="strict")
        plain += ":" + urllib.parse.unquote(password or "", errors="strict")
        auth_header = "Basic " + base64.b64encode(plain.encode()).decode("ascii")
    except UnicodeError:
        raise _refuse("has user info that is not valid UTF-8", url) from None
    return auth_header, (user or "") + ("" if password is None else ":***") + "@"
