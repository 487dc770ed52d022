"""Embeddings answers in the shape llama-server writes them (fixtures/http/embeddings_*.http):
`model`, `object`, `usage`, then `data`, each item `embedding`, `index`, `object` (and
`encoding_format` for base64); a list of numbers is float32 values written as the shortest
double (what llama-server prints, e.g. 0.10544906556606293). Seeded, so every run sends the
same bytes."""

from __future__ import annotations

import base64
import json
import random
import struct

MODEL = "/models/embed.gguf"


def vectors(n: int, dim: int, seed: int = 0) -> list[bytes]:
    """`n` rows of `dim` little-endian float32 values, about N(0, 0.05) like a unit-norm
    embedding's."""
    rng = random.Random(seed)
    return [struct.pack(f"<{dim}f", *(rng.gauss(0, 0.05) for _ in range(dim))) for _ in range(n)]


def body(rows: list[bytes], b64: bool) -> bytes:
    dim = len(rows[0]) // 4
    if b64:
        data = [
            {
                "embedding": base64.b64encode(r).decode(),
                "index": i,
                "object": "embedding",
                "encoding_format": "base64",
            }
            for i, r in enumerate(rows)
        ]
    else:
        data = [
            {"embedding": list(struct.unpack(f"<{dim}f", r)), "index": i, "object": "embedding"}
            for i, r in enumerate(rows)
        ]
    tokens = 10 * len(rows)
    doc = {
        "model": MODEL,
        "object": "list",
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "data": data,
    }
    return json.dumps(doc, separators=(",", ":")).encode()
