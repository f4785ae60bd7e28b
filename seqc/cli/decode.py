"""`seqc decode`: generate with a trained model or an exported artifact, from files, standard
input or an interactive prompt; a speech model transcribes wav files.

On a terminal each line shows `source -> hypothesis`; into a pipe or a file (`> out.txt`), or
with --output, only the hypotheses, one line per input line (an empty one for an empty source),
ready for sacreBLEU (fairseq and Marian do the same): notes go to stderr. What is decoded with
is `seqc.run.decoding.opened.open_generator`; what is read, `seqc.run.decoding.inputs`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from seqc.backends import registry
from seqc.cli.console import ConsoleReporter, err, out
from seqc.cli.guard import guarded
from seqc.cli.lm_options import (
    LengthBonusOpt,
    LmExperimentOpt,
    LmOpt,
    LmRunDirOpt,
    LmScoresOpt,
    LmSpecOpt,
    LmWeightOpt,
    lm_source,
)
from seqc.cli.options import (
    BackendOpt,
    CheckpointOpt,
    OptionalExpOpt,
    RunDirOpt,
    SetOpt,
    TaskOpt,
    TokenizerCacheOpt,
)
from seqc.run.decoding.inputs import DecodeInputs, read_inputs
from seqc.run.decoding.opened import open_generator
from seqc.run.decoding.text_decoder import hypotheses, hypothesis, sample_text, transcribe_file
from seqc.run.rundir.outputs import LineFile, one_line
from seqc.run.weights.restore import Source
from seqc.spec.errors import UsageError


@guarded
def decode_cmd(
    spec: Annotated[
        Path | None,
        typer.Argument(help="A .seq file (optional with --artifact).", show_default=False),
    ] = None,
    experiment: OptionalExpOpt = None,
    run_dir: RunDirOpt = None,
    input_files: Annotated[
        list[Path] | None,
        typer.Option(
            "--input",
            help="One prompt/source per line; - for stdin. A speech model: a wav file to "
            "transcribe (16-bit PCM mono at the model's sample rate), or a wav on stdin (-). "
            "Repeatable: the files in order, a transcript per wav.",
        ),
    ] = None,
    set_: SetOpt = None,
    cache_dir: TokenizerCacheOpt = None,
    backend: BackendOpt = None,
    checkpoint: CheckpointOpt = None,
    task: TaskOpt = None,
    artifact: Annotated[
        Path | None,
        typer.Option(
            "--artifact",
            help="Decode with an exported artifact (ONNX via onnxruntime, TFLite via LiteRT, "
            "SavedModel via TF) instead of a checkpoint; the spec is then optional.",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            help="Write one hypothesis per input line to this file (atomically), as stdout "
            "gets when it is not a terminal.",
        ),
    ] = None,
    manifest: Annotated[
        Path | None,
        typer.Option(
            "--manifest",
            help="Transcribe the wavs of an audio manifest (JSON Lines of audio and text); "
            "with --nbest, each list keeps its line's transcript as the reference.",
            show_default=False,
        ),
    ] = None,
    nbest: Annotated[
        int,
        typer.Option(
            "--nbest",
            help="Write the N best transcripts of each wav with their "
            "scores, as JSON Lines (for seqc rescore); 0: the best alone.",
            min=0,
        ),
    ] = 0,
    lm: LmOpt = None,
    lm_spec: LmSpecOpt = None,
    lm_experiment: LmExperimentOpt = None,
    lm_run_dir: LmRunDirOpt = None,
    lm_scores: LmScoresOpt = None,
    lm_weight: LmWeightOpt = 0.3,
    length_bonus: LengthBonusOpt = 1.0,
) -> None:
    """Generate with the task's decode strategy, from a file or an interactive prompt; a
    speech model transcribes the wav file given as --input.

    On a terminal each line shows `source -> hypothesis`; into a pipe or a file (`> out.txt`)
    or with --output, only the hypotheses, one line per input line (an empty one for an empty
    source), ready for sacreBLEU: notes go to stderr."""
    if backend is not None:  # a bad --backend fails before the data is read, not after
        registry.check_backend(backend)
    if output is not None and not input_files and manifest is None:
        raise UsageError(
            "--output needs --input: the file holds one hypothesis per input line",
            code="missing-option",
            hint="seqc decode ... --input sources.txt --output hypotheses.txt",
        )
    fused = lm_source(lm, lm_spec, lm_experiment, lm_run_dir, lm_scores, cache_dir)
    if manifest is not None and input_files:
        raise UsageError(
            "--manifest and --input both name what to transcribe: give one", code="bad-option"
        )
    speech = read_speech_manifest(manifest) if manifest is not None else None
    inputs = read_inputs(input_files or [])  # read before the model loads: errors first
    if speech is not None:
        inputs.wavs = [Path(u.source) for u in speech]
    if (nbest or fused is not None) and not inputs.wavs:
        raise UsageError(
            "--nbest and --lm are for transcribing speech: give wavs (--input utt.wav) or "
            "--manifest FILE",
            code="missing-option",
        )
    target = LineFile(output) if output is not None else None  # an unwritable path fails now
    source = Source(
        spec=spec,
        experiment=experiment,
        overrides=tuple(set_ or ()),
        run_dir=run_dir,
        checkpoint=checkpoint,
        cache_dir=cache_dir,
        backend=backend,
        task=task,
        artifact=artifact,
    )
    try:
        gen = open_generator(source, ConsoleReporter())
        if fused is not None:
            fuse(gen, fused, lm_weight, length_bonus)
        if nbest:
            _write_nbest(gen, inputs.wavs, speech, nbest, target)
        else:
            _decode_lines(gen, inputs, target)
    except BaseException:
        if target is not None:
            target.abort()
        raise
    if target is not None:
        target.commit()
        err.print(f"wrote {target.lines} lines to {output}")


def read_speech_manifest(path: Path) -> list[Any]:
    """The utterances of an audio manifest, each wav's header checked (the data reader's
    located errors)."""
    from seqc.data.readers import read_audio_manifest
    from seqc.spec.errors import FileError

    if not path.is_file():
        raise FileError(
            f"no manifest at {path}",
            path=str(path),
            code="file-not-found",
            hint='JSON Lines, one {"audio": "wavs/1.wav", "text": "..."} per line',
        )
    return list(read_audio_manifest(path))


def fuse(gen: Any, lm: Any, weight: float, bonus: float) -> None:
    """Shallow fusion of the LM into the speech model's beam search (`fuse_into`)."""
    from seqc.run.lm.language_model import fuse_into

    model = fuse_into(gen, lm, weight, bonus)
    err.print(
        f"fusing {model.name} ({model.scores} scores), lm_weight = {weight:g}, "
        f"length_bonus = {bonus:g}"
    )


def _write_nbest(
    gen: Any, wavs: list[Any], speech: list[Any] | None, n: int, target: LineFile | None
) -> None:
    """Each wav's n-best list as a JSON line (`seqc.run.lm.nbest`), into `target` or stdout."""
    import json

    from seqc.run.lm.nbest import Hypothesis, NBest

    if gen.transcriber is None:
        raise UsageError(
            "--nbest lists a speech model's transcripts; this model reads text", code="not-speech"
        )
    for k, wav in enumerate(wavs):
        found = gen.transcriber.wav_nbest(wav, n)
        ref = speech[k].target if speech is not None else None
        ident = speech[k].location if speech is not None else str(wav)
        line = NBest(ident, tuple(Hypothesis(t, s) for t, s in found), ref).to_json()
        text = json.dumps(line, ensure_ascii=False)
        if target is not None:
            target.write(text)
        else:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()


def _decode_lines(gen: Any, inputs: DecodeInputs, target: LineFile | None) -> None:
    """Transcribe the wavs, or decode the input lines or an interactive prompt's. Into `target`,
    or into a stdout that is not a terminal, the bare hypotheses one per line, so `> out.txt`
    scores and pipes; a terminal gets `source -> hypothesis` (a wav's name and its transcript,
    when there are several)."""
    plain = target is not None or not sys.stdout.isatty()
    lines = inputs.lines

    def emit(line: str) -> None:
        if target is not None:
            target.write(line)
        else:
            sys.stdout.write(one_line(line) + "\n")
            sys.stdout.flush()  # a pipe's reader sees each line as it is decoded

    if gen.task == "asr" or inputs.wavs:
        if lines is not None:  # a speech model reads audio: text in a wav's place
            transcribe_file(gen, None, text=True)
        wavs = inputs.wavs or [None]
        for wav in wavs:
            transcript = transcribe_file(gen, wav)
            if plain:
                emit(transcript)
            else:
                out.print(f"{wav}: {transcript}" if len(wavs) > 1 else transcript)
        return
    if lines is not None and plain:
        for text in hypotheses(gen, lines):
            emit(text)
        return
    if lines is not None:  # an empty source stays empty: no held-out sentence stands in for it
        for line in lines:
            out.print(sample_text(gen, line) if line.strip() or gen.task == "lm" else "")
        return
    err.print("type a prompt and press enter; an empty line or Ctrl-D ends")
    while True:
        try:
            if plain:  # the prompt goes to the terminal, not into the redirected output
                err.print("> ", end="")
            line = input() if plain else input("> ")
        except EOFError:
            break
        if not line.strip():
            break
        if plain:
            emit(hypothesis(gen, line))
        else:
            out.print(sample_text(gen, line))


COMMANDS = {"decode": decode_cmd}
"""This module's commands by name (`seqc.cli.app.LAZY_COMMANDS`)."""
