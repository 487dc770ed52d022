#!/usr/bin/env python3
"""Write a tiny random-weight projector (mmproj) GGUF for the tiny qwen3 model: vision and audio.

usage: make_mmproj.py LLAMA_CPP_DIR OUT.gguf

- vision: a LLaVA-style CLIP (projector type "mlp"): 32x32 images in 16x16 patches (4 image
  tokens), 2 ViT blocks of width 64, a two-layer MLP into the text model's 256-wide embeddings
- audio: a Whisper-style encoder (projector type "qwen2a"): 80 mel bins, two conv1d layers,
  2 blocks of width 64, one linear layer into the text model (a 30 s chunk: 1500 audio tokens)

The weights are random (seed 0): the media mean nothing to the model; they only let
llama-server, started with `--mmproj`, accept image and audio parts, so the client's
content-part body is tested end to end against the server's own parsing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

LLAMA_CPP = Path(sys.argv[1]).resolve()
OUT = Path(sys.argv[2])
sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
import gguf  # noqa: E402

IMAGE, PATCH, WIDTH, FF, BLOCKS, HEADS, TEXT = 32, 16, 64, 128, 2, 4, 256
MELS, AUDIO_POS = 80, 1500  # a 30 s chunk is 3000 mel frames, halved by the second conv


def blocks(writer: gguf.GGUFWriter, w: Any, prefix: str, *, key_bias: bool) -> None:
    """The encoder's transformer blocks, `prefix` "v" (vision) or "a" (audio)."""
    zeros, ones = np.zeros(WIDTH, np.float32), np.ones(WIDTH, np.float32)
    for i in range(BLOCKS):
        blk = f"{prefix}.blk.{i}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            writer.add_tensor(f"{blk}.{name}.weight", w(WIDTH, WIDTH))
            if key_bias or name != "attn_k":
                writer.add_tensor(f"{blk}.{name}.bias", zeros)
        for name in ("ln1", "ln2"):
            writer.add_tensor(f"{blk}.{name}.weight", ones)
            writer.add_tensor(f"{blk}.{name}.bias", zeros)
        writer.add_tensor(f"{blk}.ffn_up.weight", w(FF, WIDTH))
        writer.add_tensor(f"{blk}.ffn_up.bias", np.zeros(FF, np.float32))
        writer.add_tensor(f"{blk}.ffn_down.weight", w(WIDTH, FF))
        writer.add_tensor(f"{blk}.ffn_down.bias", zeros)


def main() -> None:
    rng = np.random.default_rng(0)

    def w(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    writer = gguf.GGUFWriter(str(OUT), "clip")
    writer.add_string("general.name", "tiny-mmproj")
    writer.add_uint32("general.file_type", 0)
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_bool("clip.has_audio_encoder", True)
    # Two modalities: each its own projector type (a clip.projector_type would serve both).
    writer.add_string("clip.vision.projector_type", "mlp")
    writer.add_string("clip.audio.projector_type", "qwen2a")
    writer.add_bool("clip.use_gelu", True)
    writer.add_uint32("clip.vision.image_size", IMAGE)
    writer.add_uint32("clip.vision.patch_size", PATCH)
    writer.add_uint32("clip.vision.embedding_length", WIDTH)
    writer.add_uint32("clip.vision.feed_forward_length", FF)
    writer.add_uint32("clip.vision.block_count", BLOCKS)
    writer.add_uint32("clip.vision.projection_dim", TEXT)
    writer.add_uint32("clip.vision.attention.head_count", HEADS)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    n_pos = (IMAGE // PATCH) ** 2
    # numpy shapes are ggml's ne reversed: a linear layer is (out, in).
    writer.add_tensor("v.patch_embd.weight", w(WIDTH, 3, PATCH, PATCH))
    writer.add_tensor("v.position_embd.weight", w(n_pos, WIDTH))
    writer.add_tensor("v.pre_ln.weight", np.ones(WIDTH, np.float32))
    writer.add_tensor("v.pre_ln.bias", np.zeros(WIDTH, np.float32))
    blocks(writer, w, "v", key_bias=True)
    for key, value in (
        ("embedding_length", WIDTH),
        ("feed_forward_length", FF),
        ("block_count", BLOCKS),
        ("projection_dim", TEXT),
        ("attention.head_count", HEADS),
        ("num_mel_bins", MELS),
    ):
        writer.add_uint32(f"clip.audio.{key}", value)
    writer.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)
    # conv1d kernels: numpy (out, in, width)
    writer.add_tensor("a.conv1d.1.weight", w(WIDTH, MELS, 3).astype(np.float16))
    writer.add_tensor("a.conv1d.1.bias", np.zeros((WIDTH, 1), np.float32))
    writer.add_tensor("a.conv1d.2.weight", w(WIDTH, WIDTH, 3).astype(np.float16))
    writer.add_tensor("a.conv1d.2.bias", np.zeros((WIDTH, 1), np.float32))
    writer.add_tensor("a.position_embd.weight", w(AUDIO_POS, WIDTH))
    blocks(writer, w, "a", key_bias=False)  # Whisper's key projection has no bias
    writer.add_tensor("a.post_ln.weight", np.ones(WIDTH, np.float32))
    writer.add_tensor("a.post_ln.bias", np.zeros(WIDTH, np.float32))
    writer.add_tensor("mm.a.fc.weight", w(TEXT, WIDTH))
    writer.add_tensor("mm.a.fc.bias", np.zeros(TEXT, np.float32))

    writer.add_tensor("mm.0.weight", w(TEXT, WIDTH))
    writer.add_tensor("mm.0.bias", np.zeros(TEXT, np.float32))
    writer.add_tensor("mm.2.weight", w(TEXT, TEXT))
    writer.add_tensor("mm.2.bias", np.zeros(TEXT, np.float32))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
