"""What `seqc decode --input` reads: wav files (paths, or a wav's bytes from standard input) or
the lines of text files, in order, each input classified by its content, not its name alone.

Why before the model loads: an unreadable file, bytes that are not UTF-8, or audio mixed with
text are the user's to fix, and are said at once rather than after minutes of loading. Lines
end at a newline (LF or CRLF) only, as `wc -l` and sacreBLEU count them, so hypothesis N is
always the translation of line N.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from seqc.data.audio import RIFF, WavBytes
from seqc.spec.errors import FileError, UsageError


@dataclass
class DecodeInputs:
    """What `seqc decode --input` was given: wav files (paths, or bytes from stdin) or the
    lines of text files, in order; neither: an interactive prompt."""

    wavs: list[Path | WavBytes] = field(default_factory=list)
    lines: list[str] | None = None


def read_inputs(paths: list[Path]) -> DecodeInputs:
    """Every `--input` read and classified: a `.wav` file, a wav on standard input (it starts
    with RIFF), else text. One kind per call (a transcript per wav, or a hypothesis per line);
    standard input once."""
    inputs = DecodeInputs()
    if [str(p) for p in paths].count("-") > 1:
        raise UsageError(
            "--input - is given twice: standard input can be read once",
            code="bad-input",
            hint="give - once, and the other inputs as files",
        )
    for path in paths:
        if str(path) == "-":
            data = read_input(path)
            if data.startswith(RIFF):
                inputs.wavs.append(WavBytes("<stdin>", data))
            else:
                inputs.lines = [*(inputs.lines or []), *text_lines(path, data)]
        elif path.suffix.lower() == ".wav":
            inputs.wavs.append(path)
        elif (data := read_input(path)).startswith(RIFF):  # a wav by another name
            inputs.wavs.append(WavBytes(str(path), data))
        else:
            inputs.lines = [*(inputs.lines or []), *text_lines(path, data)]
    if inputs.wavs and inputs.lines is not None:
        raise UsageError(
            "--input names both audio and text: a call decodes one kind",
            code="mixed-inputs",
            found=", ".join(str(p) for p in paths),
            hint="transcribe the wav files in one call and decode the text files in another",
        )
    return inputs


def read_input(path: Path) -> bytes:
    """The bytes of a decode input: a file, or `-` for standard input."""
    try:
        return sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as e:
        raise FileError(
            f"cannot read {path}: {e.strerror}", path=str(path), code="unreadable"
        ) from None


def text_lines(path: Path, data: bytes) -> list[str]:
    """The lines of a decode input, UTF-8; an undecodable byte is an error at its line. Lines
    end at a newline (LF or CRLF) only, as `wc -l` and sacreBLEU count them: a form feed or
    U+2028 inside a line would shift every later hypothesis."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise FileError(
            f"{path} is not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}",
            path=f"{path}:{line}",
            code="not-utf8",
            hint="convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None
    lines = text.split("\n")
    if lines[-1] == "":  # the last line's own newline ends it; it does not start another
        lines.pop()
    return [line.removesuffix("\r") for line in lines]
