"""Scores per group of a manifest field (`seqc eval --by voice`), and `--manifest`'s override:
the fields a manifest line carries reach its example, each group's rates are its own corpus
rates and add up to the overall counts, and a field no line has is an error at the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from wavs import utterances

from seqc.data.errors import DataError
from seqc.data.readers import Example, read_audio_manifest, read_jsonl
from seqc.run.scoring.breakdown import MISSING, check_field, group_of, rates_by, table
from seqc.run.scoring.own_manifest import manifest_override
from seqc.run.scoring.wer import error_rates
from seqc.spec.errors import FileError, UsageError

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "asr" / "spoken_numbers.seq"


def _with_fields(folder: Path, fields: list[dict]) -> Path:
    """A manifest of tones whose lines carry `fields` besides audio, text and duration."""
    path = utterances(folder, "m.jsonl", [0.5] * len(fields))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text(
        "".join(json.dumps({**x, **f}) + "\n" for x, f in zip(lines, fields, strict=True))
    )
    return path


def test_a_manifest_line_s_other_scalar_fields_reach_its_example(tmp_path: Path) -> None:
    fields = [{"voice": "flite:slt", "rate": 170, "nested": {"a": 1}}, {"engine": "espeak-ng"}]
    examples = list(read_audio_manifest(_with_fields(tmp_path, fields)))
    assert examples[0].fields == {"duration": 0.5, "voice": "flite:slt", "rate": 170}
    assert examples[1].fields == {"duration": 0.5, "engine": "espeak-ng"}
    assert group_of(examples[0], "voice") == "flite:slt" and group_of(examples[0], "rate") == "170"
    assert group_of(examples[1], "voice") == MISSING
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(
        '{"source": "a", "target": "b", "domain": "law"}\n{"source": "c", "target": "d"}\n'
    )
    assert [ex.fields for ex in read_jsonl(jsonl)] == [{"domain": "law"}, None]


def test_each_group_is_scored_on_its_own_and_the_counts_add_up() -> None:
    groups = ["slt", "awb", "slt", "awb", "kal"]
    refs = ["one two three", "four five", "six", "seven eight nine ten", "eleven"]
    hyps = ["one two tree", "four five", "", "seven eight nine ten ten", "eleven"]
    rates = rates_by(groups, hyps, refs)
    assert list(rates) == ["awb", "slt", "kal"]  # largest first, ties by name
    slt = rates["slt"]
    assert slt["utterances"] == 2 and slt["words"] == 4
    assert slt["wer"] == pytest.approx(100 * 2 / 4)  # one substitution, one deletion
    assert rates["awb"]["wer"] == pytest.approx(100 * 1 / 6) and rates["kal"]["wer"] == 0.0
    overall = error_rates(hyps, refs)
    for count in ("words", "substitutions", "deletions", "insertions", "chars", "char_edits"):
        assert sum(r[count] for r in rates.values()) == overall[count], count
    lines = table("voice", rates)
    assert lines[0].split() == ["voice", "utterances", "words", "wer", "cer"]
    assert lines[2].split()[:4] == ["slt", "2", "4", "50.00"]


def test_a_field_no_line_has_is_an_error_at_the_manifest() -> None:
    examples = [Example("a.wav", "one", "dev.jsonl", 1, fields={"voice": "x", "rate": 1})]
    check_field(examples, "voice", "dev")
    with pytest.raises(DataError) as e:
        check_field(examples, "voce", "dev")
    text = str(e.value.render() if hasattr(e.value, "render") else e.value)
    assert "voce" in text and "dev.jsonl" in text
    assert e.value.suggestion == "voice"
    with pytest.raises(DataError, match="no line of the test split"):
        check_field([Example("a.wav", "one", "t.jsonl", 1)], "voice", "test")


def test_manifest_replaces_the_split_s_path_or_adds_the_split(tmp_path: Path) -> None:
    mine = _with_fields(tmp_path, [{"speaker": "me"}])
    said = manifest_override(SPEC, "asr.numbers.tiny", [], None, "test", mine)
    assert said == f"asr_ctc.input.test.path={json.dumps(str(mine.resolve()))}"
    without = ["asr_ctc.input.test=none"]
    said = manifest_override(SPEC, "asr.numbers.tiny", without, None, "test", mine)
    assert said.startswith(f"asr_ctc.input.test=audio_manifest({json.dumps(str(mine.resolve()))}")
    assert 'audio = "audio"' in said and "sample_rate = 16000" in said
    with pytest.raises(FileError, match="no manifest at"):
        manifest_override(SPEC, "asr.numbers.tiny", [], None, "test", tmp_path / "gone.jsonl")
    lm = ROOT / "examples" / "lm" / "shakespeare.seq"
    with pytest.raises(UsageError, match="scores a speech task"):
        manifest_override(lm, "lm.shakespeare.quick", [], None, "test", mine)
