#!/usr/bin/env python3
"""Make a tiny llama-architecture GGUF with random weights and a real tokenizer.

The model is for tests: it loads in llama-server in about a second, generates a few hundred
tokens/s on one CPU core and produces random but well-formed text. It borrows the Qwen2
tokenizer (vocabulary, merges, special tokens) and its ChatML chat template from llama.cpp's
vocab-only file models/ggml-vocab-qwen2.gguf, and is written with the gguf-py package of the
same llama.cpp source tree (scripts/llama/build.sh puts that tree in .cache/llama/src).

    scripts/llama/make_tiny_model.py [--out PATH] [--seed N] [--layers N] [--width N] ...

Deterministic: the same arguments and source tree give the same bytes. Idempotent: when the
output exists and was made with the same arguments (see PATH.params) nothing is done; --force
writes it again. The file is written next to PATH and renamed into place, so concurrent runs
never see half a file.

Needs numpy (Debian: python3-numpy, which is for /usr/bin/python3; a pyenv or venv python without
numpy is not enough: the script then re-runs itself with /usr/bin/python3 when that one has numpy).

Two things keep the output usable behind a real server:

* About 1,700 of Qwen2's tokens are fragments of a UTF-8 character (their bytes are not valid
  UTF-8 on their own). With plain random output weights the model samples them and llama-server
  answers HTTP 500 when the text it has to send is not valid UTF-8. Those tokens, and the control
  tokens (<|im_end|>, <|endoftext|>, ...), get output rows that are zero except for a large
  negative weight on one hidden dimension that is constant by construction (the token embeddings
  put the same value there and no layer writes to it), so their logits are always about -500:
  no sampler setting (top_k=0, top_p=1, min_p=0, any temperature) ever picks them.
* Because end-of-generation tokens are never sampled, every request runs to its max_tokens (or
  to the end of its context slot): stream lengths in tests are exact.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE = Path(os.environ.get("FLEETGATE_LLAMA_CACHE", ROOT / ".cache" / "llama"))


def reexec_with_numpy() -> None:
    """numpy is missing from this python: try Debian's python (python3-numpy) instead."""
    system_python = "/usr/bin/python3"
    if os.environ.get("FLEETGATE_TINY_MODEL_REEXEC") or not os.path.exists(system_python):
        return
    if os.path.realpath(sys.executable) == os.path.realpath(system_python):
        return
    probe = subprocess.run([system_python, "-c", "import numpy"], capture_output=True)
    if probe.returncode != 0:
        return
    env = dict(os.environ, FLEETGATE_TINY_MODEL_REEXEC="1")
    os.execve(system_python, [system_python, __file__, *sys.argv[1:]], env)


try:
    import numpy as np
except ImportError:
    reexec_with_numpy()
    sys.exit("make_tiny_model.py: numpy is missing (Debian: apt-get install python3-numpy, "
             "then run with /usr/bin/python3)")


def bytes_to_unicode() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet: the character each byte is written as, reversed."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_CACHE / "src",
                    help="llama.cpp source tree (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=DEFAULT_CACHE / "models" / "tiny-qwen2.gguf",
                    help="output GGUF (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=64, help="embedding width (n_embd)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=128, help="feed-forward width")
    ap.add_argument("--context", type=int, default=4096, help="training context (n_ctx_train)")
    ap.add_argument("--force", action="store_true", help="write even when up to date")
    args = ap.parse_args()

    vocab_file = args.src / "models" / "ggml-vocab-qwen2.gguf"
    gguf_py = args.src / "gguf-py"
    if not vocab_file.is_file() or not gguf_py.is_dir():
        sys.exit(f"make_tiny_model.py: no llama.cpp source tree at {args.src} "
                 "(run scripts/llama/build.sh first)")
    sys.path.insert(0, str(gguf_py))
    import gguf  # noqa: E402  (from the source tree, matching the llama-server that loads it)

    if args.width % args.heads or args.heads % args.kv_heads:
        sys.exit("make_tiny_model.py: --width must divide by --heads, --heads by --kv-heads")

    params = {k: v for k, v in vars(args).items() if k not in ("force", "out", "src")}
    params["format"] = 1  # bump when the construction below changes
    params_file = args.out.with_name(args.out.name + ".params")
    if not args.force and args.out.is_file() and params_file.is_file():
        try:
            if json.loads(params_file.read_text()) == params:
                print(f"{args.out} is up to date", file=sys.stderr)
                return 0
        except ValueError:
            pass

    # The tokenizer, from the vocab-only file.
    reader = gguf.GGUFReader(str(vocab_file))

    def field(name: str):
        f = reader.fields[name]
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            if f.types[1] == gguf.GGUFValueType.STRING:
                return [bytes(f.parts[i]) for i in f.data]
            return [int(f.parts[i][0]) for i in f.data]
        if f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return f.parts[f.data[0]][0].item()

    tokens: list[bytes] = field("tokenizer.ggml.tokens")
    token_types: list[int] = field("tokenizer.ggml.token_type")
    merges: list[bytes] = field("tokenizer.ggml.merges")
    n_vocab = len(tokens)

    # Tokens that must never be sampled: UTF-8 fragments and everything that is not a normal
    # token (control tokens: end of text, the chat template's markers, ...).
    byte_of = bytes_to_unicode()
    banned = np.zeros(n_vocab, dtype=bool)
    n_fragments = 0
    for i, (tok, ttype) in enumerate(zip(tokens, token_types)):
        if ttype != gguf.TokenType.NORMAL:
            banned[i] = True
            continue
        text = tok.decode("utf-8")
        try:
            raw = bytes(byte_of[c] for c in text)
            raw.decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            banned[i] = True
            n_fragments += 1

    # Random weights, deterministic in the seed.
    rng = np.random.default_rng(args.seed)
    d, n_ff = args.width, args.ffn
    head_dim = d // args.heads
    d_kv = head_dim * args.kv_heads
    const_value = 8.0  # hidden dimension 0 holds this for every token at every layer

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    token_embd = normal((n_vocab, d), 1.0)
    token_embd[:, 0] = const_value
    output = normal((n_vocab, d), 0.45)  # logits of normal tokens: std ~ 2.5
    output[:, 0] = 0.0
    output[banned, :] = 0.0
    output[banned, 0] = -100.0  # x normalised dim 0 (~5.7) -> logit ~ -570

    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_name(f"{args.out.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(str(tmp_out), "llama")
    writer.add_name("tiny-qwen2 (random weights, for tests)")
    writer.add_description(f"make_tiny_model.py {json.dumps(params, sort_keys=True)}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_vocab_size(n_vocab)
    writer.add_context_length(args.context)
    writer.add_embedding_length(d)
    writer.add_block_count(args.layers)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(args.heads)
    writer.add_head_count_kv(args.kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(1000000.0)
    writer.add_layer_norm_rms_eps(1e-6)

    writer.add_tokenizer_model(field("tokenizer.ggml.model"))
    writer.add_tokenizer_pre(field("tokenizer.ggml.pre"))
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(field("tokenizer.ggml.bos_token_id"))
    writer.add_eos_token_id(field("tokenizer.ggml.eos_token_id"))
    writer.add_pad_token_id(field("tokenizer.ggml.padding_token_id"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(field("tokenizer.chat_template"))

    writer.add_tensor("token_embd.weight", token_embd.astype(np.float16))
    for layer in range(args.layers):
        norm = np.ones(d, dtype=np.float32)
        norm[0] = 0.0  # the layers do not see the constant dimension ...
        p = f"blk.{layer}."
        writer.add_tensor(p + "attn_norm.weight", norm.copy())
        writer.add_tensor(p + "attn_q.weight", normal((d, d), d ** -0.5))
        writer.add_tensor(p + "attn_k.weight", normal((d_kv, d), d ** -0.5))
        writer.add_tensor(p + "attn_v.weight", normal((d_kv, d), d ** -0.5))
        wo = normal((d, d), 0.5 * d ** -0.5)
        wo[0, :] = 0.0  # ... and do not write to it
        writer.add_tensor(p + "attn_output.weight", wo)
        writer.add_tensor(p + "ffn_norm.weight", norm.copy())
        writer.add_tensor(p + "ffn_gate.weight", normal((n_ff, d), d ** -0.5))
        writer.add_tensor(p + "ffn_up.weight", normal((n_ff, d), d ** -0.5))
        down = normal((d, n_ff), 0.5 * n_ff ** -0.5)
        down[0, :] = 0.0
        writer.add_tensor(p + "ffn_down.weight", down)
    writer.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    writer.add_tensor("output.weight", output.astype(np.float16))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp_out, args.out)
    tmp_params = params_file.with_name(f"{params_file.name}.{os.getpid()}.tmp")
    tmp_params.write_text(json.dumps(params, sort_keys=True) + "\n")
    os.replace(tmp_params, params_file)
    size_mb = args.out.stat().st_size / 1e6
    print(f"wrote {args.out} ({size_mb:.1f} MB; vocab {n_vocab}, {n_fragments} UTF-8 fragment "
          f"tokens and {int(banned.sum()) - n_fragments} control tokens never sampled)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
