# Against a real llama-server started with --mmproj: the tiny random-weight projector that
# tools/llama-server/make_mmproj.py writes (vision: LLaVA-style, 32x32 images, 4 image tokens;
# audio: Whisper-style) beside the tiny qwen3 model. The model makes nothing of the media; what
# is tested is that the server reads the client's content parts as it reads OpenAI's: the
# media's tokens are in the prompt.
"""Content parts (docs/request-body.md, rule PARTS) against a real llama-server with --mmproj.

Needs LLAMAFAST_LLAMA_SERVER, LLAMAFAST_TEST_MODEL and LLAMAFAST_TEST_MMPROJ (a projector GGUF
for that model; tools/llama-server/build.sh writes one); skipped without them.
"""

from __future__ import annotations

import asyncio
import base64
import io
import math
import struct
import wave
import zlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _llama import BINARY, MMPROJ, MODEL, serve_model
from llamafast import Audio, Completion, Config, HttpError, Image, InferConfig, Limits, Text, User

IMAGE_TOKENS = 4  # (32 / 16) ** 2 patches: make_mmproj.py's projector

pytestmark = [
    pytest.mark.llama_server,
    pytest.mark.skipif(
        not (BINARY and MODEL and MMPROJ),
        reason="set LLAMAFAST_LLAMA_SERVER, LLAMAFAST_TEST_MODEL and LLAMAFAST_TEST_MMPROJ (a "
        "projector GGUF, as tools/llama-server/make_mmproj.py writes) to test content parts",
    ),
]


def png(width: int = 32, height: int = 32) -> bytes:
    """A real RGB PNG (a gradient), written with the standard library."""
    rows = b"".join(
        b"\x00" + b"".join(bytes((x * 8 % 256, y * 8 % 256, 128)) for x in range(width))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    head = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", head)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def wav(seconds: float = 0.5) -> bytes:
    """A real 16 kHz mono 16-bit WAV (a 440 Hz tone), written with the standard library."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        samples = (round(8000 * math.sin(i * 440 * 2 * math.pi / 16000)) for i in range(8000))
        out.writeframes(b"".join(struct.pack("<h", s) for s in samples))
    return buf.getvalue()


@pytest.fixture(scope="module")
def llama() -> Iterator[str]:
    with serve_model("--mmproj", MMPROJ) as url:
        yield url


@pytest.fixture(
    params=[(m, kind) for m in ("llamafast", "pure") for kind in ("sync", "async")],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def complete(request: pytest.FixtureRequest, llama: str) -> Any:
    """`complete(messages, **fields)` on a new client of one package, sync or async."""
    module: ModuleType = llamafast if request.param[0] == "llamafast" else llamafast.pure
    cfg = Config(InferConfig(url=llama), Limits(stall_timeout=120.0))

    def sync(messages: Any, **fields: Any) -> Completion:
        with module.Client(cfg) as client:
            return client.complete(messages, **fields)  # type: ignore[no-any-return]

    def run_async(messages: Any, **fields: Any) -> Completion:
        async def main() -> Completion:
            async with module.AsyncClient(cfg) as client:
                return await client.complete(messages, **fields)  # type: ignore[no-any-return]

        return asyncio.run(main())

    return sync if request.param[1] == "sync" else run_async


def prompt_tokens(done: Completion) -> int:
    return done.timings.prompt_n + done.timings.cache_n


def test_an_image_part_puts_the_image_in_the_prompt(complete: Any) -> None:
    text_only = complete([User([Text("What is this?")])], max_tokens=4)
    with_image = complete([User([Text("What is this?"), Image(png(), "image/png")])], max_tokens=4)
    assert with_image.finish_reason is llamafast.FinishReason.LENGTH
    assert prompt_tokens(with_image) == prompt_tokens(text_only) + IMAGE_TOKENS


def test_the_openai_dict_with_a_data_uri_is_the_same_prompt(complete: Any) -> None:
    uri = "data:image/png;base64," + base64.b64encode(png()).decode()
    as_dict = complete(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": uri}},
                ],
            }
        ],
        max_tokens=4,
    )
    as_values = complete([User([Text("What is this?"), Image(png(), "image/png")])], max_tokens=4)
    assert prompt_tokens(as_dict) == prompt_tokens(as_values)


def test_bytes_that_are_no_image_are_the_server_s_refusal(complete: Any) -> None:
    with pytest.raises(HttpError) as err:
        complete([User([Image(b"not an image", "image/png")])], max_tokens=4)
    assert err.value.status == 400


def test_an_audio_part_puts_the_sound_in_the_prompt(complete: Any) -> None:
    text_only = complete([User([Text("hear this")])], max_tokens=4)
    with_audio = complete([User([Text("hear this"), Audio(wav(), "wav")])], max_tokens=4)
    as_dict = complete(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hear this"},
                    {
                        "type": "input_audio",
                        "input_audio": {"data": base64.b64encode(wav()).decode(), "format": "wav"},
                    },
                ],
            }
        ],
        max_tokens=4,
    )
    assert prompt_tokens(with_audio) > prompt_tokens(text_only) + 100
    assert prompt_tokens(as_dict) == prompt_tokens(with_audio)
