"""llamafast: read llama.cpp llama-server's streamed chat completions exactly, at C speed.

The three pieces: `Events` / `SseDecoder` (the SSE reader), `build_body` (the request body),
`Assembler` (chunks to events and one `Completion`); `ChatStream` fuses reader and assembler.
`Client` and `AsyncClient` talk to the server. `llamafast.pure` holds every public name of this
package, with the pure-Python twins.
"""

from typing import TYPE_CHECKING

# Every public name comes from `llamafast.pure`, so the two lists cannot drift apart: values,
# errors, config and build_body are the same objects; the twins and IMPLEMENTATION are the ones
# `_twins` selected (the Cython ones when the extensions are built), and so are the clients'
# (`llamafast.pure`'s clients are these run on the pure twins).
from .pure import *  # noqa: F403
from .pure import __all__ as __all__

from . import _twins  # isort: skip
from ._aclient import AsyncClient as AsyncClient  # isort: skip
from ._client import Client as Client  # isort: skip

IMPLEMENTATION = _twins.SELECTED.IMPLEMENTATION

if not TYPE_CHECKING:  # a type checker keeps the pure twins' declarations, from `pure`
    globals().update((name, getattr(_twins.SELECTED, name)) for name in _twins.PUBLIC)

__version__ = "0.1.0"
