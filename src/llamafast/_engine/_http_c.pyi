# What both twins of the clients' HTTP/1.1 response path offer (`_http_c` and `_http_py`):
# .ci/stubtest checks this stub against each of them.
from collections.abc import Callable

from typing_extensions import disjoint_base

from llamafast._engine._chat_c import Sink
from llamafast._errors import HttpParseError as HttpParseError
from llamafast._limits import BACKLOG as BACKLOG
from llamafast._limits import BUFFER as BUFFER

__all__ = [
    "BACKLOG",
    "BUFFER",
    "HttpParseError",
    "Receiver",
    "ResponseParser",
    "parse_head",
]

def parse_head(head: bytes) -> tuple[int, dict[str, str], bool, int, int, int]: ...

@disjoint_base
class ResponseParser:
    status: int
    headers: dict[str, str]
    keep_alive: bool
    surplus: bool
    def __init__(self, size: int = ...) -> None: ...
    def reset(self) -> None: ...
    @property
    def head_done(self) -> bool: ...
    @property
    def done(self) -> bool: ...
    def free(self) -> memoryview: ...
    def filled(self, n: int) -> list[memoryview]: ...
    @property
    def body_read(self) -> int: ...
    @property
    def fault(self) -> HttpParseError | None: ...
    def eof(self) -> None: ...
    def whole(self, limit: int, taken: list[bytes]) -> bool: ...
    @property
    def body_left(self) -> int: ...
    @property
    def collecting(self) -> bool: ...
    @property
    def overflow(self) -> bool: ...
    def take_body(self) -> memoryview: ...

@disjoint_base
class Receiver:
    parser: ResponseParser
    early: list[bytes]
    sink: Sink | None
    error: BaseException | None
    received: int
    last: float
    clock: Callable[[], float] | None
    waker: Callable[[None], object] | None
    deliver: Callable[[], None] | None
    on_fault: Callable[[], object] | None
    on_backlog: Callable[[], object] | None
    def __init__(self, parser: ResponseParser) -> None: ...
    def get_buffer(self, sizehint: int) -> memoryview: ...
    def buffer_updated(self, nbytes: int) -> None: ...
    def wake(self) -> None: ...
