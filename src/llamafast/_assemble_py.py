"""The assembler, pure twin (07-llama-assemble.md plus API.md's error payload).

SKELETON: to be written.
"""

from __future__ import annotations

from ._values import ChatEvent, Completion


class Assembler:
    def __init__(self) -> None:
        raise NotImplementedError

    def push(self, data: str | bytes) -> list[ChatEvent]:
        raise NotImplementedError

    @property
    def id(self) -> str | None:
        raise NotImplementedError

    @property
    def reasoning_tokens(self) -> int:
        raise NotImplementedError

    @property
    def in_reasoning(self) -> bool:
        raise NotImplementedError

    @property
    def is_finished(self) -> bool:
        raise NotImplementedError

    def finish(self, thinking_capped: bool = False) -> Completion:
        raise NotImplementedError
