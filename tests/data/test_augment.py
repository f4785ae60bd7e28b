"""Augmentation of training audio (`seqc.data.augment`, `augment = [...]` in an input block):
each augmentation's invariant, determinism from (seed, step, utterance), and the spec's errors.

Speed 0.9 makes an utterance 1/0.9 as long and its pitch 0.9 as high; a factor of 1 is the
identity; noise mixed at an SNR gives that SNR; pink and brown noise fall as 1/f and 1/f^2;
a simulated room's response decays in the reverberation time asked, and reverberation keeps an
utterance's length, loudness and the time of its direct sound."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from seqc.cli import app
from seqc.data import rooms
from seqc.data.augment import (
    Augmenter,
    Noise,
    Reverb,
    Speed,
    coloured,
    mix,
    resample,
    stretched,
)

RATE = 16_000
ROOT = Path(__file__).resolve().parents[2]


def _sine(hz: float, seconds: float, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _peak_hz(x: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * RATE / len(x))


def test_speed_changes_length_and_pitch_by_its_factor() -> None:
    x = _sine(440.0, 1.0)
    slow, fast = resample(x, 0.9), resample(x, 1.1)
    assert len(slow) == math.ceil(len(x) / 0.9) == stretched(len(x), 0.9)
    assert len(fast) == math.ceil(len(x) / 1.1)
    assert abs(_peak_hz(slow) - 440.0 * 0.9) < 2.0 and abs(_peak_hz(fast) - 440.0 * 1.1) < 2.0
    np.testing.assert_array_equal(resample(x, 1.0), x)  # a factor of 1 is the identity


def test_noise_is_mixed_at_the_snr_asked() -> None:
    rng = np.random.default_rng(0)
    x = _sine(300.0, 0.5, amplitude=0.05)  # quiet: nothing clips
    for snr in (0.0, 10.0, 25.0):
        noise = coloured("white", len(x), rng)
        mixed = mix(x, noise, snr)
        added = mixed.astype(np.float64) - x
        measured = 10 * math.log10(np.mean(x.astype(np.float64) ** 2) / np.mean(added**2))
        assert abs(measured - snr) < 0.01, (snr, measured)
    assert not mix(np.zeros(100, np.float32), noise[:100], 10.0).any()  # silence stays silent


@pytest.mark.parametrize(("colour", "slope"), [("white", 0.0), ("pink", -1.0), ("brown", -2.0)])
def test_coloured_noise_falls_as_its_colour_says(colour: str, slope: float) -> None:
    n = 1 << 16
    x = coloured(colour, n, np.random.default_rng(1))
    assert abs(float(np.mean(x**2)) - 1.0) < 1e-4 and abs(float(np.mean(x))) < 1e-6
    power = np.abs(np.fft.rfft(x)) ** 2
    f = np.arange(len(power))
    low, high = power[(f >= 100) & (f < 200)].mean(), power[(f >= 1600) & (f < 3200)].mean()
    octaves = math.log2(2400 / 150)  # the bands' centres, four octaves apart
    measured = math.log2(high / low) / octaves
    assert abs(measured - slope) < 0.25, measured


def test_draws_are_the_step_s_and_the_utterance_s_and_fit_the_bucket() -> None:
    aug = Augmenter(Speed((0.8, 1.0, 1.2)), Noise((5.0, 5.0), "pink", 1.0), seed=7)
    x = _sine(200.0, 0.5)
    bound = len(x) + 1000  # room for 1 / 1.2 less, not for 1 / 0.8 more
    outs = {(s, i): aug(x, s, i, bound) for s in range(6) for i in range(3)}
    for (s, i), out in outs.items():
        np.testing.assert_array_equal(aug(x, s, i, bound), out)  # the same, asked again
        assert len(out) == aug.length(s, i, len(x), bound) <= bound  # a mask without the wav
    assert len({len(v) for v in outs.values()}) > 1  # several factors were drawn
    assert any(not np.array_equal(outs[(0, 0)], outs[(s, 0)]) for s in range(1, 6))
    assert max(len(v) for v in outs.values()) == bound  # 0.8 raised to what the bound allows
    other = Augmenter(aug.speed, aug.noise, seed=8)
    assert any(not np.array_equal(other(x, s, 0, bound), outs[(s, 0)]) for s in range(6))


def _check(tmp_path: Path, augment: str, speech: bool = True, *args: str) -> str:
    """`seqc check` (or the command `args` name) of an example with `augment` in its input:
    a list (`[speed(...)]`) or a block (`{ speed(...) }`)."""
    spec = ROOT / "examples" / ("asr/spoken_numbers.seq" if speech else "lm/shakespeare.seq")
    text = spec.read_text()
    anchor = "  max_length = 6\n" if speech else "  tokenizer = sentencepiece("
    assert anchor in text
    written = f"augment {augment}" if augment.startswith("{") else f"augment = {augment}"
    text = text.replace(anchor, f"  {written}\n{anchor}", 1)
    imports = str(spec.parent.parent / "common").replace("\\", "/")
    (tmp_path / "s.seq").write_text(text.replace('import "../common/', f'import "{imports}/'))
    result = CliRunner().invoke(app, [*(args or ["check"]), str(tmp_path / "s.seq")])
    return result.output


def test_the_spec_s_augmentations_are_checked_at_their_line(tmp_path: Path) -> None:
    ok = _check(tmp_path, '[speed([0.9, 1.0, 1.1]), noise([10, 30], colour = "pink", p = 0.5)]')
    assert "error" not in ok, ok
    assert "snr is [low, high]" in _check(tmp_path, "[noise([30, 10])]")
    assert "s.seq:" in _check(tmp_path, "[speed([3.0])]")
    assert "augment-needs-audio" in _check(tmp_path, "[speed([0.9, 1.1])]", speech=False)
    assert "error" not in _check(tmp_path, "[speed([0.9, 1.1]), reverb([0.2, 0.5], p = 0.5)]")
    assert "rt60 is [low, high]" in _check(tmp_path, "[reverb([0.7, 0.2])]")
    assert "s.seq:" in _check(tmp_path, "[reverb([0.2, 5.0])]")  # past 2 s: located


def test_an_augment_block_is_the_list_of_its_calls_one_a_line(tmp_path: Path) -> None:
    """`augment { speed(...) noise(...) }` in an input is `augment = [speed(...), noise(...)]`;
    each line's error points at that line."""
    block = '{\n    speed([0.9, 1.0, 1.1])\n    noise([10, 30], colour = "pink", p = 0.5)\n  }'
    show = ["show", "-e", "asr.numbers.ctc"]
    listed = '[speed([0.9, 1.0, 1.1]), noise([10, 30], colour = "pink", p = 0.5)]'
    resolved = [
        line for line in _check(tmp_path, block, True, *show).splitlines() if "augment" in line
    ]
    assert resolved == [
        line for line in _check(tmp_path, listed, True, *show).splitlines() if "augment" in line
    ]
    assert any("speed(rates = [0.9, 1.0, 1.1]" in line and "noise(snr" in line for line in resolved)
    assert "error" not in _check(tmp_path, block)
    # the block opens where the example's `max_length = 6` was, its calls on the lines after
    lines = (ROOT / "examples" / "asr" / "spoken_numbers.seq").read_text().splitlines()
    opens = lines.index("  max_length = 6") + 1
    bad_call = _check(tmp_path, "{\n    speed([0.9])\n    noise([30, 10])\n  }")
    assert f"s.seq:{opens + 2}:" in bad_call and "snr is [low, high]" in bad_call, bad_call
    unknown = _check(tmp_path, "{\n    sped([0.9, 1.1])\n  }")
    assert f"s.seq:{opens + 1}:" in unknown and "speed" in unknown, unknown  # did you mean
    assigned = _check(tmp_path, "{\n    speed([0.9, 1.1])\n    p = 0.5\n  }")
    assert f"s.seq:{opens + 2}:5" in assigned and "list-block-item" in assigned, assigned
    # a block only where a list of calls is meant
    elsewhere = _check(tmp_path, "{ }").replace("augment {", "buckets {")
    assert "error" not in elsewhere


def test_simulated_rooms_decay_in_the_time_asked_and_repeat_by_seed() -> None:
    import pyroomacoustics as pra

    bank = rooms.responses((0.25, 0.35), 3, seed=7)
    assert len(bank) == 3 and all(np.max(np.abs(r)) == 1.0 for r in bank)
    again, other = rooms.responses((0.25, 0.35), 3, seed=7), rooms.responses((0.25, 0.35), 3, 8)
    assert all(np.array_equal(a, b) for a, b in zip(bank, again, strict=True))
    assert not np.array_equal(bank[0], other[0])
    for rir in bank:  # Schroeder's backward integration; the image method's tail runs short
        measured = pra.experimental.measure_rt60(rir, fs=rooms.SAMPLE_RATE, decay_db=30)
        assert 0.12 < measured < 0.5, measured


def test_reverberation_keeps_length_loudness_and_the_direct_sound() -> None:
    rir = rooms.responses((0.3, 0.3), 1, seed=1)[0]
    click = np.zeros(RATE, np.float32)
    click[4000] = 0.5
    wet = rooms.reverberate(click, rir)
    assert len(wet) == len(click) and int(np.argmax(np.abs(wet))) == 4000
    assert np.mean(wet**2) == pytest.approx(np.mean(click**2), rel=1e-4)
    tail = np.abs(wet[4100:8000])
    # nothing comes before the direct sound but its fractional-delay filter's half (40 samples)
    assert tail.max() > 1e-3 and np.sum(wet[:3950] ** 2) < 1e-6 * np.sum(wet**2)
    x = _sine(300.0, 0.5)
    np.testing.assert_array_equal(rooms.reverberate(np.zeros(100, np.float32), rir), 0.0)
    aug = Augmenter(None, None, seed=3, reverb=Reverb((0.3, 0.3), p=1.0, rooms=2))
    out = aug(x, step=5, index=2, bound=len(x))
    assert len(out) == len(x) and not np.allclose(out, x)
    np.testing.assert_array_equal(aug(x, step=5, index=2, bound=len(x)), out)  # deterministic
    never = Augmenter(None, None, seed=3, reverb=Reverb((0.3, 0.3), p=0.0, rooms=2))
    np.testing.assert_array_equal(never(x, step=5, index=2, bound=len(x)), x)
