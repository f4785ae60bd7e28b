"""Tokenizers: round trips, shared special ids, and a SentencePiece cache that saves retraining."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import sentencepiece as spm

from seqc.data.calls import make_call
from seqc.data.errors import DataError
from seqc.data.tokenizers import (
    BOS_ID,
    BYTE_VOCAB_SIZE,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    ByteTokenizer,
    CharTokenizer,
    SentencePieceTokenizer,
    Tokenizer,
    WordTokenizer,
    build_tokenizer,
    load_tokenizer,
)

SYLLABLES = ["ka", "lo", "mi", "re", "tu", "sa", "ven", "dor", "pi", "qua", "zel", "ob"]


def corpus(n: int = 300, seed: int = 0) -> list[str]:
    """A few hundred lines of made-up words: enough text for SentencePiece to train on."""
    rng = random.Random(seed)
    words = ["".join(rng.choices(SYLLABLES, k=rng.randint(1, 3))) for _ in range(120)]
    return [" ".join(rng.choices(words, k=rng.randint(3, 12))) for _ in range(n)]


def test_every_tokenizer_shares_the_special_ids() -> None:
    texts = corpus(50)
    for tok in (
        CharTokenizer.fit(texts),
        WordTokenizer.fit(texts),
        ByteTokenizer(),
        SentencePieceTokenizer.train(texts, vocab_size=60),
    ):
        assert isinstance(tok, Tokenizer)
        assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (PAD_ID, BOS_ID, EOS_ID, UNK_ID)
        ids = tok.encode(texts[0])
        assert ids and all(4 <= i < tok.vocab_size for i in ids)
        assert tok.decode([BOS_ID, *ids, EOS_ID, PAD_ID]) == texts[0]


def test_chars_min_count_and_lowercase() -> None:
    tok = CharTokenizer.fit(["aaab", "AB"], min_count=2, lowercase=True)
    assert tok.vocab_size == 4 + 2  # a, b; nothing else is seen twice
    assert tok.encode("Abc") == [tok.encode("a")[0], tok.encode("b")[0], UNK_ID]
    assert tok.decode(tok.encode("abc")) == "ab\u2047"


def test_words_keep_the_most_frequent_and_map_the_rest_to_unk() -> None:
    tok = WordTokenizer.fit(["the cat the dog the cat", "a bird"], vocab_size=6)
    assert tok.tokens[4:] == ("the", "cat")
    assert tok.encode("the  bird <s>") == [4, UNK_ID, UNK_ID]  # a literal "<s>" is not bos
    with pytest.raises(DataError, match="leaves no room"):
        WordTokenizer.fit(["x"], vocab_size=4)


def test_bytes_round_trip_any_text() -> None:
    tok = ByteTokenizer()
    text = "naïve 日本 \t emoji 🙂"
    assert tok.vocab_size == BYTE_VOCAB_SIZE == 260
    assert tok.decode(tok.encode(text)) == text


def test_sentencepiece_is_cached_and_not_retrained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = corpus()
    call = make_call("tokenizer", "sentencepiece", vocab_size=80, model_type="bpe")
    first = build_tokenizer(call, texts, tmp_path)
    assert first.vocab_size == 80

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("trained again instead of using the cache")

    monkeypatch.setattr(spm.SentencePieceTrainer, "train", no_training)
    second = build_tokenizer(call, texts, tmp_path)
    assert second.encode(texts[3]) == first.encode(texts[3])
    # other settings or other text are another model, so they would train
    with pytest.raises(AssertionError):
        build_tokenizer(call, [*texts, "one more line"], tmp_path)
    other = make_call("tokenizer", "sentencepiece", vocab_size=81, model_type="bpe")
    with pytest.raises(AssertionError):
        build_tokenizer(other, texts, tmp_path)


@pytest.mark.parametrize("damage", ["another-model", "truncated", "no-sum"])
def test_a_damaged_or_replaced_sentencepiece_cache_entry_is_rebuilt_not_used(
    tmp_path: Path, damage: str
) -> None:
    """An entry is used only if it is what its key names, as written: another valid model
    copied in was used before (a different tokenization of the same spec), a truncated one
    crashed the run."""
    texts = corpus()
    call = make_call("tokenizer", "sentencepiece", vocab_size=80, model_type="bpe")
    first = build_tokenizer(call, texts, tmp_path)
    (entry,) = tmp_path.glob("sentencepiece-*")
    model = entry / SentencePieceTokenizer.MODEL_FILE
    if damage == "another-model":
        other = SentencePieceTokenizer.train(corpus(seed=1), vocab_size=80, model_type="bpe")
        assert other.model_proto != first.model_proto
        model.write_bytes(other.model_proto)
    elif damage == "truncated":
        model.write_bytes(first.model_proto[:100])
    else:  # an entry of an older seqc, or a record edited: no sum to check the model by
        record = json.loads((entry / "tokenizer.json").read_text())
        del record["settings"]["sha256"]
        (entry / "tokenizer.json").write_text(json.dumps(record))
    again = build_tokenizer(call, texts, tmp_path)
    assert isinstance(again, SentencePieceTokenizer)
    assert again.encode(texts[3]) == first.encode(texts[3])
    assert model.read_bytes() == again.model_proto  # the entry was rebuilt whole
    assert [p.name for p in tmp_path.iterdir()] == [entry.name]  # nothing left beside it
    if damage == "another-model":
        assert again.model_proto == first.model_proto


def test_a_truncated_saved_sentencepiece_model_is_a_clear_error(tmp_path: Path) -> None:
    tok = SentencePieceTokenizer.train(corpus(), vocab_size=80)
    tok.save(tmp_path)
    (tmp_path / SentencePieceTokenizer.MODEL_FILE).write_bytes(tok.model_proto[:100])
    with pytest.raises(DataError) as info:
        load_tokenizer(tmp_path)
    assert info.value.code == "bad-tokenizer" and "spm.model" in str(info.value.path)


def test_sentencepiece_vocab_too_large_for_the_text_is_a_clear_error(tmp_path: Path) -> None:
    call = make_call("tokenizer", "sentencepiece", vocab_size=5000)
    with pytest.raises(DataError) as info:
        build_tokenizer(call, corpus(50), tmp_path)
    assert info.value.code == "vocab-too-large"
    assert "vocab_size <= " in info.value.render()


def test_save_and_load_every_kind(tmp_path: Path) -> None:
    texts = corpus(60)
    for i, tok in enumerate(
        [
            CharTokenizer.fit(texts, lowercase=True),
            WordTokenizer.fit(texts, vocab_size=50),
            ByteTokenizer(),
            SentencePieceTokenizer.train(texts, vocab_size=60),
        ]
    ):
        tok.save(tmp_path / str(i))
        back = load_tokenizer(tmp_path / str(i))
        assert type(back) is type(tok)
        assert back.vocab_size == tok.vocab_size
        assert back.encode(texts[1]) == tok.encode(texts[1])


def test_sentencepiece_loads_an_existing_model_file(tmp_path: Path) -> None:
    trained = SentencePieceTokenizer.train(corpus(), vocab_size=70)
    (tmp_path / "m.model").write_bytes(trained.model_proto)
    call = make_call("tokenizer", "sentencepiece", model="m.model")
    tok = build_tokenizer(call, [], tmp_path / "cache", base_dir=tmp_path)
    assert tok.vocab_size == 70
