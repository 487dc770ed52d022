"""The engine: bytes in, events out, in two twins behind the same names.

Each piece is a module pair, `_<stem>_py.py` (pure Python, always there) and `_<stem>_c.pyx`
(Cython, with a `.pyi` stub declaring what both offer, and a `.pxd` where another Cython module
cimports it): `_sse` reads server-sent events, `_assemble` folds chat chunks into events and one
`Completion`, `_chat` fuses the two (`Sink`, `ChatStream`), `_http` parses the response head
and its chunked framing, `_vectors` decodes an embeddings answer into one float32 buffer.
What both twins need lives in modules neither twin owns, so no `_c` module imports a `_py`
one: `_http_head` (the response head's rules), `_reader_contract` (what a caller's reader must
return), `_stream_state` (what every stream of ChatEvents shows); the JSON readers both twins
and the values use, `_strict_json` and `_partial_json`, are on the ground floor. `_extensions`
lists the compiled modules (setup.py builds them from that list) and reads the switch that
leaves them out; `_twins` is the one place that decides which twin runs, and the only module
that picks a twin by its module's name: everything above the engine reads `_twins.SELECTED`
or `_twins.PURE`. `_embeddings` holds `Embeddings`, the value the `_vectors` twins hand out (on
Python 3.11 it stands on the Cython twin's `_RowsExport`, which exports its buffer).

Nothing here imports the client, the CLI or the core; the engine imports only the ground floor
(`llamafast._values`, `_errors`, `_limits`, the JSON readers).
"""
