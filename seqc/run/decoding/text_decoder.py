"""Decoders as the run commands use them: a trained model's or an exported artifact's, with the
tokenizers that turn text into ids and back, and for a speech model a transcriber of wav files.
`seqc train` prints a sample with one, `seqc decode` generates or transcribes with one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqc.compiler.config import DecodeConfig

if TYPE_CHECKING:
    from seqc.backends.api import Generator, Model
    from seqc.data.audio import WavSource
    from seqc.data.tokenizers import Tokenizer
    from seqc.run.export.artifact import Artifact
    from seqc.run.scoring.transcribe import Transcriber
    from seqc.run.session import Session


@dataclass
class TextDecoder:
    """A decoder with what turns text into its ids and back, from a session or an artifact;
    a speech model's `transcriber` turns audio into text (its `decoder` is None for CTC)."""

    decoder: Generator | None
    tokenizer: Tokenizer
    target_tokenizer: Tokenizer
    task: str
    strategy: DecodeConfig | None
    """None only for a speech model whose task names no `decode` (its transcriber's own)."""
    default_source: str | None = None
    transcriber: Transcriber | None = None
    """Speech tasks: audio in, text out."""
    default_audio: tuple[Path, str] | None = None
    """The first dev utterance's wav and transcript: what the sample after training hears."""


FALLBACK_MAX_LENGTH = 48
"""Tokens decoded when neither the task nor the artifact names a strategy, by the sample after
training, `seqc decode`, `seqc eval --artifact` and a training run's dev translations: greedy
with the catalogue's defaults but this `max_length`, shorter than the catalogue's 64. Kept at 48,
what these have always decoded, so that their output does not change; `seqc eval` of a
checkpoint and `seqc export`'s BLEU column decode with the catalogue's default itself."""


def fallback_strategy() -> DecodeConfig:
    """The strategy of a task or artifact that names none (`FALLBACK_MAX_LENGTH`)."""
    from seqc.run.decoding.defaults import default_strategy

    return default_strategy(max_length=FALLBACK_MAX_LENGTH)


def from_session(session: Session, model: Model, params: Any) -> TextDecoder:
    from seqc.run.decoding.decoders import decoder_for

    pipeline = session.pipeline
    tok, ttok = pipeline.tokenizer, pipeline.target_tokenizer
    split = "dev" if "dev" in pipeline.splits else "train"
    if pipeline.task == "asr":
        from seqc.compiler.min_length import min_audio_samples
        from seqc.run.scoring.transcribe import Transcriber

        first = pipeline.splits[split].first_example()
        strategy = session.compiled.decode
        rate, shortest = pipeline.sample_rate, min_audio_samples(session.graph)
        if model.task.ctc:
            listen = Transcriber(
                ttok,
                strategy,
                logits=lambda a: model.logits(params, a),
                sample_rate=rate,
                min_samples=shortest,
            )
        else:
            dec = decoder_for(model, params, ttok.bos_id, ttok.eos_id, ttok.pad_id)
            listen = Transcriber(
                ttok, strategy, decoder=dec, sample_rate=rate, min_samples=shortest
            )
        audio = (Path(first.audio.path), first.target or "") if first.audio else None
        return TextDecoder(None, tok, ttok, "asr", strategy, None, listen, audio)
    dec = decoder_for(model, params, ttok.bos_id, ttok.eos_id, ttok.pad_id)
    default = pipeline.splits[split].first_example().source if pipeline.task == "seq2seq" else None
    strategy = session.compiled.decode or fallback_strategy()
    return TextDecoder(dec, tok, ttok, pipeline.task, strategy, default)


def from_artifact(artifact: Artifact) -> TextDecoder:
    from seqc.run.decoding.steps import StepDecoder
    from seqc.run.export.artifact import step_functions

    m = artifact.manifest
    tok, ttok = artifact.tokenizers()
    if m["task_kind"] == "asr":  # audio in: a transcriber, not a text generator
        return artifact_transcriber(artifact, ttok)
    special = m["special"]
    d = m.get("decode")
    dec = StepDecoder(
        step_functions(artifact),
        artifact.signature,
        special["bos"],
        special["eos"],
        special["pad"],
    )
    strategy = DecodeConfig.from_json(d) if d else fallback_strategy()
    return TextDecoder(dec, tok, ttok, m["task_kind"], strategy)


def artifact_transcriber(artifact: Artifact, tok: Tokenizer) -> TextDecoder:
    """A speech artifact's transcriber: CTC frame logits in one pass, or an attention decoder
    stepping over its encoder's output; wav files at the sample rate the manifest records."""
    from seqc.run.decoding.forced import one_pass
    from seqc.run.decoding.steps import StepDecoder
    from seqc.run.export.artifact import step_functions
    from seqc.run.scoring.transcribe import Transcriber

    m = artifact.manifest
    d = m.get("decode")
    strategy = DecodeConfig.from_json(d) if d else None
    fns, sig = step_functions(artifact), artifact.signature
    audio = m.get("audio") or {}
    rate = int(audio.get("sample_rate", 16000))
    # an artifact exported before the manifest recorded its shortest input checks nothing more
    shortest = int(audio.get("min_samples", 1))
    if sig.encoder_only:
        listen = Transcriber(
            tok,
            strategy,
            logits=lambda a: one_pass(fns, sig, a),
            sample_rate=rate,
            min_samples=shortest,
        )
    else:
        special = m["special"]
        dec = StepDecoder(fns, sig, special["bos"], special["eos"], special["pad"])
        listen = Transcriber(tok, strategy, decoder=dec, sample_rate=rate, min_samples=shortest)
    return TextDecoder(None, tok, tok, "asr", strategy, None, listen)


def sample_text(g: TextDecoder, prompt: str | None = None) -> str:
    tok = g.tokenizer
    if g.task == "asr":  # a speech model hears the first dev utterance
        if g.transcriber is None or g.default_audio is None:
            return ""
        wav, reference = g.default_audio
        return f"{g.transcriber.wav(wav)}  (reference: {reference})"
    if g.task == "lm":
        start = tok.encode(prompt or "")
        ids = [*start, *g.decoder.generate(g.strategy, start, stop_at_eos=False)]
        lines, line = [], []
        for i in ids:  # an LM's EOS ends a line of the corpus: print it as a line break
            if i == tok.eos_id:
                lines.append(tok.decode(line))
                line = []
            else:
                line.append(i)
        return "\n".join([*lines, tok.decode(line)])
    prompt = prompt or g.default_source  # translate a held-out sentence, not an empty one
    if not prompt:
        return ""
    return f"{prompt} -> {_translate(g, prompt)}"


def _translate(g: TextDecoder, source: str) -> str:
    src = [*g.tokenizer.encode(source), g.tokenizer.eos_id]
    return str(g.target_tokenizer.decode(g.decoder.generate(g.strategy, [], src)))


def hypothesis(g: TextDecoder, line: str) -> str:
    """The output for one input line as one line of text and nothing else, for a file that
    lines up with its input (`seqc decode > out.txt`, scored by sacreBLEU): a translation, empty
    for an empty source; a language model's prompt completed to the end of its line (its EOS).
    Unlike `sample_text`, no source is echoed and no held-out sentence stands in for an empty
    one."""
    from seqc.run.rundir.outputs import one_line

    if g.task == "lm":
        tok = g.tokenizer
        start = tok.encode(line)
        return one_line(tok.decode([*start, *g.decoder.generate(g.strategy, start)]))
    return one_line(_translate(g, line)) if line.strip() else ""


STREAM_CHUNK = 64
"""Input lines translated together by `hypotheses`: enough for the decoder's batches to group
sources of like length, few enough that a pipe's reader sees output early."""


def hypotheses(g: TextDecoder, lines: list[str]) -> Iterator[str]:
    """`hypothesis` of each line, in order: a translator's decoder that decodes several sources
    at once (`generate_many`) gets the lines `STREAM_CHUNK` at a time, each chunk's output
    yielded before the next is decoded."""
    many = getattr(g.decoder, "generate_many", None)
    if g.task != "seq2seq" or many is None:
        yield from (hypothesis(g, line) for line in lines)
        return
    from seqc.run.rundir.outputs import one_line

    tok = g.tokenizer
    for at in range(0, len(lines), STREAM_CHUNK):
        chunk = lines[at : at + STREAM_CHUNK]
        full = [i for i, line in enumerate(chunk) if line.strip()]
        tokens = many(g.strategy, [[*tok.encode(chunk[i]), tok.eos_id] for i in full])
        out = [""] * len(chunk)  # an empty source stays empty
        for i, t in zip(full, tokens, strict=True):
            out[i] = one_line(str(g.target_tokenizer.decode(t)))
        yield from out


def transcribe_file(gen: TextDecoder, path: WavSource | None, *, text: bool = False) -> str:
    """The transcript of the wav `path` (a file, or bytes read from standard input); errors for
    a text model given a wav, or a speech model given none, or given text (`text`) (a wrong
    rate, stereo or missing file is the audio reader's `DataError`)."""
    from seqc.spec.errors import UsageError

    if gen.task != "asr" or gen.transcriber is None:
        raise UsageError(
            f"{path} is audio, and this is a `{gen.task}` model, which reads text",
            code="not-speech",
            hint="give --input a text file (one prompt or source per line)",
        )
    if path is None:
        raise UsageError(
            "a speech model transcribes wav audio: "
            + ("the input is text" if text else "give a wav file as --input"),
            code="missing-option",
            hint="seqc decode ... --input utterance.wav (or --input - < utterance.wav)",
        )
    return str(gen.transcriber.wav(path))
