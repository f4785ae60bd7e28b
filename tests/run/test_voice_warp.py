"""Test-time voice normalisation (`decode = beam(..., warp = voice_warp())`): each speaker's
audio resampled by the factor the model is most confident under.

The model here is a constructed one: its frame posteriors are surest when the audio's dominant
frequency is 400 Hz, so a speaker at 500 Hz should be lowered by 0.8 and one at 333 Hz raised by
1.2 (resampling by f scales every frequency by f), whatever the order the utterances come in."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from seqc.compiler.config import Beam, DecodeConfig, VoiceWarp
from seqc.compiler.lower.ctc import FORCED
from seqc.run.decoding.ctc import real_frames
from seqc.run.decoding.voice_warp import (
    batched,
    choose,
    confidence,
    normalised,
    speakers,
    warped,
)
from seqc.run.scoring.normalised import warp_of, without_warp

RATE = 16000
WARP = VoiceWarp(factors=(0.8, 1.0, 1.2), by="voice", utterances=100)


def tone(hz: float, seconds: float = 0.5) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return np.sin(2 * np.pi * hz * t).astype(np.float32)


def dominant(x: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(x))
    return float(np.argmax(spectrum) * RATE / len(x))


def forward(utterances: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Two-symbol frame log-posteriors, surest when the utterance's dominant frequency is 400
    Hz; one frame per 160 samples."""
    out = []
    for x in utterances:
        p = np.exp(-abs(dominant(x) - 400.0) / 200.0) * 0.98 + 0.01
        frames = max(1, len(x) // 160)
        out.append(np.log(np.tile([p, 1 - p], (frames, 1))))
    return out


def test_the_factor_chosen_is_the_one_the_model_is_surest_under() -> None:
    choice = choose(forward, [tone(500)] * 3, WARP)
    assert choice.factor == 0.8 and choice.utterances == 3
    assert max(choice.confidence.values()) == choice.confidence[0.8]
    assert choose(forward, [tone(333)], WARP).factor == 1.2
    assert choose(forward, [tone(400)], WARP).factor == 1.0


def test_a_tie_goes_to_the_factor_nearest_one() -> None:
    def flat(utterances: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.log(np.full((4, 2), 0.5)) for _ in utterances]

    assert choose(flat, [tone(500)], WARP).factor == 1.0


def test_only_a_speakers_first_utterances_choose() -> None:
    few = VoiceWarp(factors=(0.8, 1.0, 1.2), by="voice", utterances=2)
    choice = choose(forward, [tone(500), tone(500), tone(333), tone(333), tone(333)], few)
    assert choice.factor == 0.8 and choice.utterances == 2


def test_each_speaker_gets_its_own_factor_and_the_order_is_kept() -> None:
    utterances = [tone(500), tone(333), tone(500, 0.75), tone(333, 0.25), tone(420)]
    keys = ["high", "low", "high", "low", None]
    scores, choices = normalised(forward, utterances, keys, WARP)
    factor = {k: c.factor for k, c in choices.items()}
    assert factor == {"high": 0.8, "low": 1.2, "utterance 5": 1.0}
    # each utterance's frames are its own, at its speaker's factor (1/f as many samples)
    factors = [0.8, 1.2, 0.8, 1.2, 1.0]  # 420 Hz, alone: 1.0 is 20 Hz off, 0.8 is 64
    want = [len(warped(x, f)) // 160 for x, f in zip(utterances, factors, strict=True)]
    assert [z.shape[0] for z in scores] == want


def test_speakers_group_in_order_and_an_unnamed_utterance_is_alone() -> None:
    groups = speakers(["a", None, "b", "a", None])
    assert list(groups.values()) == [[0, 3], [1], [2], [4]]


def test_warped_resamples_and_a_factor_of_one_is_the_identity() -> None:
    x = tone(500)
    assert np.array_equal(warped(x, 1.0), x)
    assert len(warped(x, 0.8)) == pytest.approx(len(x) / 0.8, abs=1)
    assert dominant(warped(x, 0.8)) == pytest.approx(400, abs=4)


def test_confidence_is_the_best_paths_log_probability_per_frame() -> None:
    z = np.log(np.array([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]))
    assert confidence(z) == pytest.approx(np.mean(np.log([0.5, 0.9, 0.8])))


def test_a_batched_forward_cuts_each_utterance_to_its_real_frames() -> None:
    """A padded batch's padding frames are blank with certainty (FORCED elsewhere): the
    confidence must not count them, or the shortest utterance would look surest."""
    seen: list[tuple[int, ...]] = []

    def logits(arrays: dict) -> np.ndarray:
        audio, mask = arrays["audio"], arrays["audio_mask"]
        seen.append(audio.shape)
        frames = audio.shape[1] // 160
        z = np.full((audio.shape[0], frames, 3), FORCED, np.float32)
        z[..., 0] = 0.0
        for r in range(audio.shape[0]):
            z[r, : int(mask[r].sum()) // 160] = [0.0, 1.0, 2.0]
        return z

    run = batched(logits, batch=4, pad=8000)
    out = run([tone(400, 0.1), tone(400, 0.3), tone(400, 0.2), tone(400, 0.4), tone(400, 0.5)])
    assert [z.shape[0] for z in out] == [10, 30, 20, 40, 50]
    assert all(width % 8000 == 0 for _, width in seen) and [b for b, _ in seen] == [4, 1]
    assert [z.shape[0] for z in run([tone(400, 0.1)] * 3)] == [10] * 3  # 3 rows run as 4
    assert seen[-1][0] == 4
    assert real_frames(logits({"audio": np.zeros((1, 320)), "audio_mask": np.ones((1, 320))})).all()


def test_a_decode_with_a_warp_reads_back_from_json_and_can_drop_it() -> None:
    beam = Beam(max_length=64, width=8, length_penalty=0.6, warp=WARP)
    again = DecodeConfig.from_json(beam.to_json())
    assert again == beam and warp_of(again) == WARP
    assert warp_of(without_warp(beam)) is None and without_warp(None) is None


def test_a_voice_warp_on_a_task_that_is_not_ctc_is_an_error_at_its_decode(
    tmp_path: Path,
) -> None:
    """An attention decoder's (or a text task's) decode has no frame posteriors to be sure of:
    the error points at the decode that asks, in the spec or in a `--set`."""
    from lowering_helpers import compile_spec

    from seqc.spec.errors import CheckError

    spec = Path(__file__).resolve().parents[2] / "examples" / "asr" / "spoken_numbers.seq"
    symbols = {"spoken_numbers.vocab_size": 40}
    robust = compile_spec(spec, "asr.numbers.robust", symbols=symbols)
    assert warp_of(robust.decode) == VoiceWarp(
        factors=(0.8, 0.84, 0.88, 0.92, 0.96, 1.0, 1.04, 1.08, 1.12, 1.16, 1.2),
        by="voice",
        utterances=100,
    )
    warp = "asr_las.decode = beam(width = 2, warp = voice_warp())"
    with pytest.raises(CheckError) as err:
        compile_spec(spec, "asr.numbers.las.tiny", [warp], symbols=symbols)
    assert err.value.code == "warp-needs-ctc" and "`asr_las`" in str(err.value)
    mine = tmp_path / "mine.seq"
    mine.write_text(
        f'seqc 1\nimport "{spec.as_posix()}"\n'
        f"experiment las.warp extends asr.numbers.las.tiny {{\n  {warp}\n}}\n"
    )
    with pytest.raises(CheckError) as err:
        compile_spec(mine, "las.warp", symbols=symbols)
    assert err.value.code == "warp-needs-ctc"
    assert err.value.span is not None and (err.value.span.file, err.value.span.line) == (
        str(mine),
        4,
    )


def test_eval_prints_a_line_per_speaker_or_counts_by_factor_for_many() -> None:
    from seqc.run.scoring.asr_eval import WARP_LINES, warp_lines

    one = {"flite:slt": {"factor": 0.84, "utterances": 100}}
    assert warp_lines("test", one) == [
        "test voice warp: flite:slt: factor 0.84 (chosen on 100 utterances)"
    ]
    many = {f"v{i}": {"factor": 0.8 if i % 3 else 1.0, "utterances": 1} for i in range(30)}
    assert len(many) > WARP_LINES
    assert warp_lines("dev", many) == [
        "dev voice warp: 30 speakers, by factor 0.8: 20, 1: 10 (scores.json: each)"
    ]


def test_a_factor_that_would_make_an_utterance_too_short_for_the_model_is_no_candidate() -> None:
    """Resampling by 1.2 makes an utterance 1/1.2 as long: below the model's shortest input it
    would be the runtime's error, so that factor is left out (1 always stays)."""
    short = tone(333, 0.1)  # 1,600 samples; 1,334 at 1.2
    choice = choose(forward, [short], WARP, min_samples=1500)
    assert set(choice.confidence) == {0.8, 1.0} and choice.factor == 1.0
    assert choose(forward, [short], WARP).factor == 1.2


def test_a_resume_may_add_or_change_a_voice_warp_but_not_the_rest_of_the_decode() -> None:
    """Training's dev evaluations leave the warp out, so a run started without one resumes
    with one (and back); a beam's width is another matter."""
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program
    from seqc.resolve.values import to_json
    from seqc.run.rundir.resume import changes

    spec = Path(__file__).resolve().parents[2] / "examples" / "asr" / "spoken_numbers.seq"
    program, symbols = load_program(spec), {"spoken_numbers.vocab_size": 40}

    def settings(*sets: str) -> object:
        return resolve(program, "asr.numbers.robust", list(sets), symbols)

    plain = to_json(settings("asr_robust.decode = beam(width = 8)").config)
    assert changes(plain, settings()) == []
    warped = settings('asr_robust.decode = beam(width = 8, warp = voice_warp(by = ""))')
    assert changes(to_json(settings().config), warped) == []
    wider = changes(plain, settings("asr_robust.decode = beam(width = 16)"))
    assert [path for path, *_ in wider] == ["asr_robust.decode.width"]


def test_the_utterances_that_chose_are_not_run_again_at_the_factor_chosen() -> None:
    runs: list[int] = []

    def counted(utterances: Sequence[np.ndarray]) -> list[np.ndarray]:
        runs.append(len(utterances))
        return forward(utterances)

    few = VoiceWarp(factors=(0.8, 1.0, 1.2), by="voice", utterances=2)
    three = [tone(500), tone(500, 0.3), tone(500, 0.4)]
    scores, choices = normalised(counted, three, ["a"] * 3, few)
    assert choices["a"].factor == 0.8 and runs == [2, 2, 2, 1]  # 3 factors x 2, then the third
    want = [len(warped(x, 0.8)) // 160 for x in three]
    assert [z.shape[0] for z in scores] == want
