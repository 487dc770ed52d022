"""llamafast: read llama.cpp llama-server's streamed chat completions exactly, at C speed.

The three pieces: `Events` / `SseDecoder` (the SSE reader), `build_body` (the request body),
`Assembler` (chunks to events and one `Completion`); `ChatStream` fuses reader and assembler.
`Client` and `AsyncClient` talk to the server. `llamafast.pure` holds every public name of this
package, with the pure-Python twins.
"""

from typing import TYPE_CHECKING

# Every public name comes from `llamafast.pure`, so the two lists cannot drift apart: values,
# errors, config, build_body and the clients are the same objects; the twins and IMPLEMENTATION
# are replaced below when the Cython extensions are built.
from .pure import *  # noqa: F403
from .pure import __all__ as __all__

from ._compat import IMPLEMENTATION as IMPLEMENTATION  # isort: skip
from ._compat import USE_EXTENSIONS  # isort: skip

if TYPE_CHECKING or not USE_EXTENSIONS:
    from ._assemble_py import Assembler as Assembler
    from ._chat_py import AsyncChatStream as AsyncChatStream
    from ._chat_py import ChatStream as ChatStream
    from ._chat_py import aiter_chat as aiter_chat
    from ._sse_py import Events as Events
    from ._sse_py import SseDecoder as SseDecoder
    from ._sse_py import aiter_events as aiter_events
    from ._sse_py import iter_events as iter_events
else:
    from ._assemble_c import Assembler as Assembler
    from ._chat_c import AsyncChatStream as AsyncChatStream
    from ._chat_c import ChatStream as ChatStream
    from ._chat_c import aiter_chat as aiter_chat
    from ._sse_c import Events as Events
    from ._sse_c import SseDecoder as SseDecoder
    from ._sse_c import aiter_events as aiter_events
    from ._sse_c import iter_events as iter_events

# The clients: the top level's read with the selected twins (llamafast.pure's with the pure ones).
from ._aclient import AsyncClient as AsyncClient
from ._client import Client as Client

__version__ = "0.1.0"
