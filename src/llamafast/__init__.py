"""llamafast: read llama.cpp llama-server's streamed chat completions exactly, at C speed.

The three pieces: `Events` / `SseDecoder` (the SSE reader), `build_body` (the request body),
`Assembler` (chunks to events and one `Completion`); `ChatStream` fuses reader and assembler.
`Client` and `AsyncClient` talk to the server. `llamafast.pure` holds every public name of this
package, with the pure-Python twins.
"""

from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Every public name comes from `llamafast.pure`, so the two lists cannot drift apart: values,
# errors, config and build_body are the same objects; the twins and IMPLEMENTATION are the ones
# `_twins` selected (the Cython ones when the extensions are built), and so are the clients'
# (`llamafast.pure`'s clients are these run on the pure twins).
if TYPE_CHECKING:  # a type checker keeps the pure twins' declarations, from `pure`
    from ._client._async import AsyncClient as AsyncClient
    from ._client._sync import Client as Client
    from .pure import *  # noqa: F403
    from .pure import __all__ as __all__
else:
    # The names are bound on first use (PEP 562), not when the package is imported: `python -m
    # llamafast` and the `llamafast` script import this module before their own code runs, and
    # only what runs inside their code can turn Ctrl-C into one line and status 130.
    def _bind() -> None:
        import importlib

        pure = importlib.import_module(".pure", __name__)
        twins = importlib.import_module("._engine._twins", __name__)
        names = globals()
        names.update((name, getattr(pure, name)) for name in pure.__all__)
        names.update((name, getattr(twins.SELECTED, name)) for name in twins.PUBLIC)
        names["AsyncClient"] = importlib.import_module("._client._async", __name__).AsyncClient
        names["Client"] = importlib.import_module("._client._sync", __name__).Client
        names["IMPLEMENTATION"] = twins.SELECTED.IMPLEMENTATION
        names["__all__"] = pure.__all__

    def __getattr__(name: str) -> object:
        if name.startswith("__") and name != "__all__":  # __path__, __wrapped__, ...: not ours
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        if "__all__" not in globals():
            _bind()
        try:
            return globals()[name]
        except KeyError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None

    def __dir__() -> list[str]:
        if "__all__" not in globals():
            _bind()
        return sorted(globals())
