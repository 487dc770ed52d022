# What both twins of the embeddings decoder offer (`_vectors_c` and `_vectors_py`): .ci/stubtest
# checks this stub against each of them.
from collections.abc import Sequence

from typing_extensions import disjoint_base

from llamafast._engine._embeddings import Embeddings

__all__ = ["Vectors"]

@disjoint_base
class Vectors:
    n: int
    def __init__(self, n: int) -> None: ...
    @property
    def dim(self) -> int: ...
    def add(self, parts: Sequence[bytes | memoryview], first: int, count: int) -> None: ...
    def finish(self) -> Embeddings: ...
