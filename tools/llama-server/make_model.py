#!/usr/bin/env python3
# ruff: noqa: E501
"""Write a tiny random-weight qwen3 GGUF for llama-server tests.

usage: make_model.py LLAMA_CPP_DIR OUT.gguf

- architecture qwen3, 4 layers, n_embd 256, 8 heads (4 KV heads, head_dim 32), n_ff 768;
  2-D weights F16, norms F32 (about 7 MB; big enough that generation is not absurdly fast)
- byte-level BPE tokenizer (pre "qwen2"): the 256 byte tokens, ~240 merges trained on a small
  built-in English text, and Qwen3's special tokens (<|endoftext|>, <|im_start|>, <|im_end|>
  as control tokens; <think>, </think>, <tool_call>, ... as user-defined tokens)
- chat template: llama.cpp's models/templates/Qwen-Qwen3-0.6B.jinja, with its generation prompt
  opening "<think>\n" unless enable_thinking is false (as Qwen3.5's template does), so that a
  random model reasons
- weights are random (seed 0) but shaped so the model only ever *samples* printable ASCII text:
  every token embedding carries a large constant in dimension 0, and the output rows of the
  special tokens (</think>, <|im_end|>, ...) and of non-printable bytes get a large negative
  weight in that dimension. So the model never ends its reasoning by itself nor stops by itself
  (only max_tokens, a stop string, the reasoning budget / control endpoint, grammar or
  logit_bias end or steer it).
"""

from __future__ import annotations

import itertools
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

LLAMA_CPP = Path(sys.argv[1]).resolve()
OUT = Path(sys.argv[2])
sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
import gguf  # noqa: E402

CORPUS = """
The quick brown fox jumps over the lazy dog. Hello, world! Hello there, how are you today?
I think the answer is seventeen times twenty three, which is three hundred ninety one.
Let me think step by step about this question. First, we compute the product of the numbers.
Then we add the results and check the answer again. The model is small and the weights are
random, so the text it writes is not meant to make sense. This is a test of the server, the
client, the stream and the reasoning. Say hello to the user and answer the question.
We are going to write some words: apple, banana, orange, water, number, answer, question,
reason, thinking, server, client, token, stream, model, random, small, large, and, or, but,
the, a, an, of, to, in, is, it, that, for, on, with, as, was, be, by, this, are, not, at.
0 1 2 3 4 5 6 7 8 9 10 17 23 391 100 42
"""
N_MERGES = 240

SPECIAL_CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SPECIAL_USER = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<tool_response>",
    "</tool_response>",
]


def bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=False))


B2U = bytes_to_unicode()


def train_bpe() -> list[tuple[str, str]]:
    words = re.findall(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+", CORPUS)
    counts = Counter(tuple(B2U[b] for b in w.encode()) for w in words)
    merges: list[tuple[str, str]] = []
    for _ in range(N_MERGES):
        pairs: Counter[tuple[str, str]] = Counter()
        for w, c in counts.items():
            for a, b in itertools.pairwise(w):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        new: Counter[tuple[str, ...]] = Counter()
        for w, c in counts.items():
            out: list[str] = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] += c
        counts = new
    return merges


def main() -> None:
    merges = train_bpe()
    tokens: list[str] = [B2U[b] for b in range(256)]
    types: list[int] = [gguf.TokenType.NORMAL] * 256
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:
            seen.add(a + b)
            tokens.append(a + b)
            types.append(gguf.TokenType.NORMAL)
    for t in SPECIAL_CONTROL:
        tokens.append(t)
        types.append(gguf.TokenType.CONTROL)
    for t in SPECIAL_USER:
        tokens.append(t)
        types.append(gguf.TokenType.USER_DEFINED)
    n_vocab = len(tokens)
    tid = {t: i for i, t in enumerate(tokens)}

    template = (LLAMA_CPP / "models/templates/Qwen-Qwen3-0.6B.jinja").read_text()
    old = "{%- if enable_thinking is defined and enable_thinking is false %}\n        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}"
    new = "{%- if enable_thinking is defined and enable_thinking is false %}\n        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- else %}\n        {{- '<think>\\n' }}\n    {%- endif %}"
    assert template.count(old) == 1, "Qwen3 template changed upstream"
    template = template.replace(old, new)

    n_embd, n_head, n_head_kv, head_dim, n_ff, n_layer = 256, 8, 4, 32, 768, 4
    rng = np.random.default_rng(0)

    def rnd(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def mat(rows: int, cols: int) -> np.ndarray:  # a layer weight, F16
        return rnd(rows, cols, std=0.5 / np.sqrt(cols)).astype(np.float16)

    # token embeddings: big constant in dim 0 (the "bias" direction), random elsewhere
    tok_embd = rnd(n_vocab, n_embd, std=1.0)
    tok_embd[:, 0] = 8.0
    # output head: dim 0 decides what may be sampled at all
    output = rnd(n_vocab, n_embd, std=3.0 / np.sqrt(n_embd))
    output[:, 0] = 0.0
    printable = {B2U[b] for b in [*list(range(32, 127)), 10]}
    for i, t in enumerate(tokens):
        special = types[i] != gguf.TokenType.NORMAL
        ok = not special and all(ch in printable for ch in t)
        if not ok:
            output[i, 0] = -10.0

    w = gguf.GGUFWriter(str(OUT), "qwen3")
    w.add_name("llamafast-tiny-random-qwen3")
    w.add_context_length(40960)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_eos_token_id(tid["<|im_end|>"])
    w.add_pad_token_id(tid["<|endoftext|>"])
    w.add_bos_token_id(tid["<|endoftext|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(template)

    w.add_tensor("token_embd.weight", tok_embd.astype(np.float16))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("output.weight", output.astype(np.float16))
    q_dim, kv_dim = n_head * head_dim, n_head_kv * head_dim
    for il in range(n_layer):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", mat(q_dim, n_embd))
        w.add_tensor(p + "attn_k.weight", mat(kv_dim, n_embd))
        w.add_tensor(p + "attn_v.weight", mat(kv_dim, n_embd))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, q_dim))
        w.add_tensor(p + "attn_q_norm.weight", np.ones(head_dim, dtype=np.float32))
        w.add_tensor(p + "attn_k_norm.weight", np.ones(head_dim, dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))

    OUT.parent.mkdir(parents=True, exist_ok=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {OUT}: vocab {n_vocab}, {len(merges)} merges, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
