# Strategy: the I/O drivers of the sans-I/O core (llamafast._core), written once: _async.py is
# the asyncio driver (AsyncClient); _sync.py (Client) is generated from it by tools/unasync.py;
# _transport.py holds the connections both carry the core's commands out on (and the engine:
# which twin's Receiver and Sink they run), _deliver.py complete()'s handing out of events.
"""The clients: `Client` (blocking) and `AsyncClient` (asyncio)."""

from ._async import AsyncClient, AsyncClientStream
from ._sync import Client, ClientStream

__all__ = ["AsyncClient", "AsyncClientStream", "Client", "ClientStream"]
