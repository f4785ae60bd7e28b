"""The encoded store: batches from it are the in-memory pipeline's, it is encoded once and reused,
and anything that should not be trusted (a changed file, another tokenizer, a damaged array,
another format) is encoded again or refused, never read as a wrong batch."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_data_pipeline import lines, pair_input, text_input

from seqc.data.bucketing import BucketBatcher, pad
from seqc.data.calls import make_call
from seqc.data.errors import DataError
from seqc.data.pipeline import InputPipeline, _eval_buckets
from seqc.data.readers import read_examples
from seqc.data.shards import encode as encode_module
from seqc.data.shards.encode import Sides, encode_split
from seqc.data.shards.layout import META, DamagedSplit, open_split


def _reference_batches(pipe: InputPipeline, split: str, count: int) -> list[dict]:
    """The batches as the pipeline made them before the store (issue 35): every example read
    and tokenised in memory, LM lines packed into one stream, sequences padded per batch."""
    reader = pipe.config[split]
    examples = read_examples(reader, pipe.base_dir)
    tok, ttok = pipe.tokenizer, pipe.target_tokenizer
    src = tok.encode_batch([e.source for e in examples])
    if pipe.task == "seq2seq":
        tgt = ttok.encode_batch([e.target or "" for e in examples])
        first = [np.asarray([*s, tok.eos_id]) for s in src]
        second = [np.asarray([ttok.bos_id, *t]) for t in tgt]
        third = [np.asarray([*t, ttok.eos_id]) for t in tgt]
        lengths = [max(len(a), len(b)) for a, b in zip(first, second, strict=True)]
    elif pipe.packed:
        window = min(pipe.buckets[-1].bound, pipe.max_length)
        stream = [tok.bos_id] + [i for s in src for i in [*s, tok.eos_id]]
        chunks = [
            stream[k * window : k * window + window + 1]
            for k in range(math.ceil((len(stream) - 1) / window))
        ]
        first = [np.asarray(c[:-1]) for c in chunks]
        second = [np.asarray(c[1:]) for c in chunks]
        lengths = [len(a) for a in first]
    else:
        first = [np.asarray([tok.bos_id, *s]) for s in src]
        second = [np.asarray([*s, tok.eos_id]) for s in src]
        lengths = [len(a) for a in first]
    buckets, max_length = pipe.buckets, pipe.max_length
    if split != "train":
        buckets, max_length = _eval_buckets(buckets, max(lengths)), None
    batcher = BucketBatcher(
        lengths,
        buckets,
        shuffle_buffer=pipe.shuffle_buffer if split == "train" else 0,
        seed=pipe.seed,
        max_length=max_length,
    )
    plans = batcher.iterate(0) if split == "train" else batcher.epoch(0, shuffle=False)
    out = []
    for plan, _ in zip(plans, range(count), strict=False):
        rows, length = plan.bucket.batch_size, plan.bucket.bound
        ids = list(plan.indices)
        if pipe.task == "seq2seq":
            s, sm = pad([first[i] for i in ids], rows, length, tok.pad_id)
            ti, _ = pad([second[i] for i in ids], rows, length, ttok.pad_id)
            to, tm = pad([third[i] for i in ids], rows, length, ttok.pad_id)
            out.append({"src": s, "src_mask": sm, "tgt_in": ti, "tgt_out": to, "tgt_mask": tm})
        else:
            x, _ = pad([first[i] for i in ids], rows, length, tok.pad_id)
            y, m = pad([second[i] for i in ids], rows, length, tok.pad_id)
            out.append({"inputs": x, "targets": y, "mask": m})
    return out


@pytest.mark.parametrize(
    ("make", "pack"),
    [(text_input, None), (text_input, False), (pair_input, None)],
    ids=["lm-packed", "lm-lines", "seq2seq"],
)
def test_batches_from_the_store_are_the_in_memory_ones(
    tmp_path: Path, make: Callable[..., dict[str, Any]], pack: bool | None
) -> None:
    pipe = InputPipeline(make(tmp_path), base_dir=tmp_path, cache_dir=tmp_path / "c", pack=pack)
    for split, count in (("train", 3 * pipe.steps_per_epoch()), ("dev", 100)):
        ours = list(pipe.batches(split)) if split == "dev" else None
        if ours is None:
            stream = pipe.batches(split)
            ours = [next(stream) for _ in range(count)]
        want = _reference_batches(pipe, split, count)
        assert len(ours) == len(want)
        for a, b in zip(ours, want, strict=True):
            assert set(a.arrays) == set(b)
            for name, value in b.items():
                np.testing.assert_array_equal(a.arrays[name], value, err_msg=name)


def test_a_second_pipeline_reads_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = text_input(tmp_path)
    first = InputPipeline(config, base_dir=tmp_path, cache_dir=tmp_path / "c")
    calls = []
    monkeypatch.setattr(
        "seqc.data.shards.store.encode_split", lambda *a, **k: calls.append(a) or None
    )
    second = InputPipeline(config, base_dir=tmp_path, cache_dir=tmp_path / "c")
    assert calls == [] and second.notes == []
    assert second.fingerprint() == first.fingerprint()
    a, b = next(first.batches()), next(second.batches())
    np.testing.assert_array_equal(a["inputs"], b["inputs"])


def _encoded_folders(cache: Path, split: str) -> list[Path]:
    return sorted(p for p in (cache / "shards").glob(f"{split}-*") if p.is_dir())


def test_a_changed_file_or_tokenizer_is_encoded_again(tmp_path: Path) -> None:
    config = text_input(tmp_path)
    cache = tmp_path / "c"
    before = InputPipeline(config, base_dir=tmp_path, cache_dir=cache)
    (tmp_path / "train.txt").write_text("\n".join(lines(150, 1, 12, seed=9)) + "\n")
    after = InputPipeline(config, base_dir=tmp_path, cache_dir=cache)
    assert after.sizes["train"] == 150 != before.sizes["train"]
    assert len(_encoded_folders(cache, "train")) == 2
    chars = {**config, "tokenizer": make_call("tokenizer", "chars")}
    other = InputPipeline(chars, base_dir=tmp_path, cache_dir=cache)
    assert other.tokenizer.kind == "chars"
    assert len(_encoded_folders(cache, "train")) == 3
    assert len(_encoded_folders(cache, "dev")) == 3  # the same file, under three vocabularies


def test_a_damaged_array_is_encoded_again_and_said(tmp_path: Path) -> None:
    config = text_input(tmp_path)
    cache = tmp_path / "c"
    good = InputPipeline(config, base_dir=tmp_path, cache_dir=cache)
    (folder,) = _encoded_folders(cache, "train")
    tokens = folder / "source.tokens"
    data = bytearray(tokens.read_bytes())
    data[5] ^= 0xFF  # one flipped byte: the size is right, the ids are not
    tokens.write_bytes(bytes(data))
    key = json.loads((folder / META).read_text())["key"]
    with pytest.raises(DamagedSplit, match="CRC-32"):
        open_split(folder, key)
    again = InputPipeline(config, base_dir=tmp_path, cache_dir=cache)
    assert any("encoding the train split again" in n and "CRC-32" in n for n in again.notes)
    np.testing.assert_array_equal(next(again.batches())["inputs"], next(good.batches())["inputs"])
    tokens.write_bytes(tokens.read_bytes()[:-4])  # truncated
    with pytest.raises(DamagedSplit, match="bytes, not the"):
        open_split(folder, key)
    meta = json.loads((folder / META).read_text())
    (folder / META).write_text(json.dumps({**meta, "seqc": "0.0.0-other"}))
    with pytest.raises(DamagedSplit, match=r"written by seqc 0\.0\.0-other"):
        open_split(folder, key)


def test_a_file_that_changes_while_encoding_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = text_input(tmp_path)
    reader = config["train"]
    tok = InputPipeline(config, base_dir=tmp_path, cache_dir=tmp_path / "c").tokenizer
    stats = iter(["a", "b"])  # stat'ed before and after: they differ
    monkeypatch.setattr(encode_module, "stat_key", lambda path: next(stats))
    folder = tmp_path / "out" / "train-x"
    with pytest.raises(DataError, match="changed while it was being encoded") as info:
        encode_split(
            reader, [tmp_path / "train.txt"], tmp_path, Sides(tok, None, False), folder, "k"
        )
    assert info.value.code == "data-changed"
    assert not folder.exists()  # nothing half-written is left to be read


def test_workers_write_the_same_arrays_as_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(encode_module, "CHUNK", 40)  # 200 lines: five chunks, two workers
    monkeypatch.setattr(encode_module, "POOL_AFTER", 2)
    config = text_input(tmp_path)
    pipe = InputPipeline(config, base_dir=tmp_path, cache_dir=tmp_path / "c", workers=1)
    sides = Sides(pipe.tokenizer, None, False)
    files = [tmp_path / "train.txt"]
    encode_split(config["train"], files, tmp_path, sides, tmp_path / "one", "k", workers=1)
    encode_split(config["train"], files, tmp_path, sides, tmp_path / "two", "k", workers=2)
    for name in ("source.tokens", "source.offsets", "lines"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    one, two = open_split(tmp_path / "one", "k"), open_split(tmp_path / "two", "k")
    assert one.meta["texts_sha256"] == two.meta["texts_sha256"]
    assert one.location(41) == two.location(41)
    assert one.location(41).endswith("train.txt:42")


UNGUARDED = """
from pathlib import Path
import seqc.data.shards.encode as encode
from seqc.data.calls import make_call
from seqc.data.pipeline import InputPipeline
encode.POOL_AFTER, encode.CHUNK = 2, 40
here = Path(__file__).parent
config = {"name": "t", "train": make_call("reader", "text", "train.txt"),
          "tokenizer": make_call("tokenizer", "chars")}
InputPipeline(config, base_dir=here, cache_dir=here / "cache", workers=2)
"""


def test_a_script_without_a_main_guard_is_told_so_not_left_waiting(tmp_path: Path) -> None:
    """Encoding workers start by importing the script that started them: an unguarded top level
    builds the pipeline again in each, which waited forever for the encoding lock its parent
    holds. Now the workers refuse and the parent says what to do."""
    text_input(tmp_path)
    (tmp_path / "script.py").write_text(UNGUARDED)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "script.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert "[unguarded-script]" in proc.stderr  # each worker's own error
    assert "[encode-worker-died]" in proc.stderr and '__name__ == "__main__"' in proc.stderr


def test_an_empty_split_is_an_error_naming_it(tmp_path: Path) -> None:
    config = text_input(tmp_path)
    (tmp_path / "dev.txt").write_text("\n\n")
    with pytest.raises(DataError, match=r"no examples in `dev\.txt`") as info:
        InputPipeline(config, base_dir=tmp_path, cache_dir=tmp_path / "c")
    assert info.value.code == "empty-corpus"
    assert not _encoded_folders(tmp_path / "c", "dev")


@pytest.mark.parametrize(
    ("make", "pack"),
    [(text_input, None), (text_input, False), (pair_input, None)],
    ids=["lm-packed", "lm-lines", "seq2seq"],
)
def test_two_processes_read_disjoint_rows_that_make_the_whole_batch(
    tmp_path: Path, make: Callable[..., dict[str, Any]], pack: bool | None
) -> None:
    """Each half of every batch from its own process's read; the other half's ids are zeros
    (never read), its masks the whole batch's (strategies weigh replicas by them)."""
    pipe = InputPipeline(make(tmp_path), base_dir=tmp_path, cache_dir=tmp_path / "c", pack=pack)
    data = pipe.splits["train"]
    assert data.batcher is not None
    for step in range(2 * pipe.steps_per_epoch()):
        plan = data.batcher.plan_for_step(step)
        rows = plan.bucket.batch_size
        whole = data.materialise(plan.bucket, plan.indices)
        halves = [(0, rows // 2), (rows // 2, rows)]
        for lo, hi in halves:
            share = data.materialise(plan.bucket, plan.indices, (lo, hi))
            other = np.ones(rows, bool)
            other[lo:hi] = False
            for name, value in whole.arrays.items():
                if name.endswith("mask"):
                    np.testing.assert_array_equal(share.arrays[name], value, err_msg=name)
                    continue
                np.testing.assert_array_equal(share.arrays[name][lo:hi], value[lo:hi], name)
                if name in ("targets", "src", "tgt_out"):  # no id of another row was read
                    assert not share.arrays[name][other].any(), name


def test_splits_of_files_gone_are_swept_when_another_is_encoded(tmp_path: Path) -> None:
    cache = tmp_path / "c"
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    InputPipeline(text_input(old), base_dir=old, cache_dir=cache)
    assert len(_encoded_folders(cache, "train")) == 1
    for f in old.iterdir():
        f.unlink()  # a temporary corpus, gone
    InputPipeline(pair_input(new), base_dir=new, cache_dir=cache)
    folders = _encoded_folders(cache, "train")
    assert (
        len(folders) == 1
        and "train.tsv" in json.loads((folders[0] / META).read_text())["sources"][0]
    )
    memo = json.loads((cache / "file-digests.json").read_text())
    assert all(str(new) in name for name in memo)  # the old files' digests are dropped too
    locks = sorted(p.name for p in (cache / "shards").glob(".*.lock"))
    assert locks == sorted(f".{p.name}.lock" for p in (cache / "shards").iterdir() if p.is_dir())
