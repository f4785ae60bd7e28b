"""Encoding a split once: read it in file order, tokenise it in worker processes, write arrays.

The reader streams examples (memory flat in the corpus size); every `CHUNK` examples go to a
pool of worker processes that tokenise them; the parent writes the results in order, so the
arrays are the same whatever the worker count. A split of fewer than `POOL_AFTER` chunks is
tokenised in this process: starting workers costs about a second, more than such a split takes.

Workers are started with `spawn`: the parent may already run JAX's or TensorFlow's threads, and
a forked copy of a threaded process can deadlock. Each worker loads the tokenizers from a
folder they were saved to, once.

The files are stat'ed before and after: a file that changed while it was read is an error
(the arrays would mix two versions of it), and nothing is kept.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing
import os
import shutil
import tempfile
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seqc.data.errors import DataError, display_path
from seqc.data.readers import BaseDirs, Example, iter_examples
from seqc.data.report import DropReport
from seqc.data.shards.digest import stat_key
from seqc.data.shards.layout import FORMAT, META, array_files, seqc_version
from seqc.data.staging import staging_dir
from seqc.data.tokenizers import Tokenizer, load_tokenizer
from seqc.resolve.values import CallValue

CHUNK = 20_000
"""Examples a worker tokenises at a time: a few MB of text, a few hundred ms of work."""
POOL_AFTER = 10
"""Chunks read before workers are started: a split of fewer (200,000 lines, ~10 MB of text,
a second or two here) is encoded in this process, where starting workers would cost more."""

Progress = Callable[[int, int], None]
"""Called with (0, 0) as a split's encoding starts, then as examples are written: (examples so
far, characters of text so far)."""


@dataclass(frozen=True)
class Sides:
    """What is encoded of each example: its source, its target, or both, and with which
    tokenizer; `lowercase` as the input block says."""

    source: Tokenizer | None
    target: Tokenizer | None
    lowercase: bool

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, t in (("source", self.source), ("target", self.target)) if t)


def encode_split(
    reader: CallValue,
    files: Sequence[Path],
    base_dir: BaseDirs | None,
    sides: Sides,
    folder: Path,
    key: str,
    *,
    workers: int = 1,
    progress: Progress | None = None,
) -> None:
    """Write the encoded split of `reader` into `folder` (replacing what is there)."""
    before = [stat_key(p) for p in files]
    stage = staging_dir(folder.parent, folder.name)
    try:
        drops = DropReport()
        examples = iter_examples(reader, base_dir, drops, files)
        written = _write(examples, sides, stage, workers, progress)
        after = [stat_key(p) for p in files]
        for path, a, b in zip(files, before, after, strict=True):
            if a != b:
                raise DataError(
                    f"{display_path(path)} changed while it was being encoded",
                    code="data-changed",
                    path=display_path(path),
                    hint="do not rewrite a corpus while seqc reads it; run again once it is "
                    "written",
                )
        meta = {
            "format": FORMAT,
            "seqc": seqc_version(),
            "key": key,
            "sources": [str(Path(p).resolve()) for p in files],
            "sides": list(sides.names),
            "drops": drops.to_json(),
            **written,
        }
        (stage / META).write_text(json.dumps(meta, indent=1), encoding="utf-8")
        if folder.exists():
            aside = staging_dir(folder.parent, folder.name + "-old")
            folder.rename(aside / folder.name)
            shutil.rmtree(aside, ignore_errors=True)
        stage.rename(folder)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


class _Writer:
    """One array file, appended to, with its CRC-32 and size kept as it grows."""

    def __init__(self, path: Path) -> None:
        self.f = path.open("wb")
        self.crc, self.bytes = 0, 0

    def write(self, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array).tobytes()
        self.f.write(data)
        self.crc = zlib.crc32(data, self.crc)
        self.bytes += len(data)

    def close(self) -> dict[str, int]:
        self.f.close()
        return {"bytes": self.bytes, "crc32": self.crc}


def _write(
    examples: Iterator[Example],
    sides: Sides,
    stage: Path,
    workers: int,
    progress: Progress | None,
) -> dict[str, object]:
    names = sides.names
    out = {name: _Writer(stage / name) for name in array_files(names)}
    ends = {s: 0 for s in names}
    for s in names:
        out[f"{s}.offsets"].write(np.zeros(1, np.int64))
    texts_hash = hashlib.sha256()
    files: list[dict[str, object]] = []
    count = chars = 0

    def take(chunk: list[Example], encoded: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        nonlocal count, chars
        for s in names:
            tokens, lengths = encoded[s]
            out[f"{s}.tokens"].write(tokens)
            out[f"{s}.offsets"].write(ends[s] + np.cumsum(lengths, dtype=np.int64))
            ends[s] += int(lengths.sum())
        out["lines"].write(np.fromiter((e.line for e in chunk), np.int32, len(chunk)))
        for e in chunk:
            text = f"{e.source}\t{e.target or ''}\n"
            texts_hash.update(text.encode("utf-8", "surrogatepass"))
            chars += len(text)
            if not files or files[-1]["path"] != e.file:
                files.append({"path": e.file, "examples": 0})
            files[-1]["examples"] = int(files[-1]["examples"]) + 1  # type: ignore[call-overload]
        count += len(chunk)
        if progress is not None:
            progress(count, chars)

    if progress is not None:
        progress(0, 0)
    chunks = _chunks(examples)
    head = list(itertools.islice(chunks, POOL_AFTER))
    if len(head) < POOL_AFTER or workers <= 1:  # small, or asked to: this process
        local = _Encoder(sides)
        for chunk in itertools.chain(head, chunks):
            take(chunk, local.encode(chunk))
    else:
        with _pool(sides, workers) as pool:
            pending: deque[tuple[list[Example], Future]] = deque()
            for chunk in itertools.chain(head, chunks):
                pending.append((chunk, pool.submit(_work, _texts(chunk))))
                while len(pending) > 2 * workers:
                    done, future = pending.popleft()
                    take(done, _result(future))
            while pending:
                done, future = pending.popleft()
                take(done, _result(future))
    return {
        "examples": count,
        "texts_sha256": texts_hash.hexdigest(),
        "files": files,
        "arrays": {name: w.close() for name, w in out.items()},
    }


def _result(future: Future) -> Any:
    """A worker's encoded chunk; a worker that died (killed, out of memory, or failed to start
    because the script that started the pool has an unguarded top level) is a DataError."""
    try:
        return future.result()
    except BrokenProcessPool:
        raise DataError(
            "a worker process encoding the data ended before its work was done",
            code="encode-worker-died",
            hint="if a script of yours started it, put its top level under "
            '`if __name__ == "__main__":`; else encode in one process (`seqc data encode '
            "FILE -e EXP --workers 1`); the worker's own error, if it had one, is above",
        ) from None


def _chunks(examples: Iterator[Example]) -> Iterator[list[Example]]:
    chunk: list[Example] = []
    for e in examples:
        chunk.append(e)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _texts(chunk: list[Example]) -> tuple[list[str], list[str]]:
    return [e.source for e in chunk], [e.target or "" for e in chunk]


class _Encoder:
    """Texts to ids, each followed by eos: one flat int32 array and the lengths per side."""

    def __init__(self, sides: Sides) -> None:
        self.sides = sides

    def encode(self, chunk: list[Example]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return self.encode_texts(*_texts(chunk))

    def encode_texts(
        self, sources: list[str], targets: list[str]
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        out = {}
        for name, tok, texts in (
            ("source", self.sides.source, sources),
            ("target", self.sides.target, targets),
        ):
            if tok is None:
                continue
            if self.sides.lowercase:
                texts = [t.lower() for t in texts]
            ids = tok.encode_batch(texts)
            lengths = np.fromiter((len(x) + 1 for x in ids), np.int64, len(ids))
            flat = np.empty(int(lengths.sum()), np.int32)
            pos = 0
            for x in ids:
                flat[pos : pos + len(x)] = x
                flat[pos + len(x)] = tok.eos_id
                pos += len(x) + 1
            out[name] = (flat, lengths)
        return out


_WORKER: _Encoder | None = None


def _init_worker(source_dir: str | None, target_dir: str | None, lowercase: bool) -> None:
    global _WORKER
    source = load_tokenizer(Path(source_dir)) if source_dir else None
    target = load_tokenizer(Path(target_dir)) if target_dir else None
    _WORKER = _Encoder(Sides(source, target, lowercase))


def _work(texts: tuple[list[str], list[str]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    assert _WORKER is not None
    return _WORKER.encode_texts(*texts)


class _pool:
    """A spawned pool whose workers hold the tokenizers (saved to a temporary folder)."""

    def __init__(self, sides: Sides, workers: int) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="seqc-encode-"))
        dirs: list[str | None] = []
        for name, tok in (("source", sides.source), ("target", sides.target)):
            if tok is None:
                dirs.append(None)
                continue
            tok.save(self.tmp / name)
            dirs.append(str(self.tmp / name))
        self.executor = ProcessPoolExecutor(
            max_workers=max(1, min(workers, os.cpu_count() or 1)),
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(dirs[0], dirs[1], sides.lowercase),
        )

    def __enter__(self) -> ProcessPoolExecutor:
        return self.executor

    def __exit__(self, *exc: object) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
