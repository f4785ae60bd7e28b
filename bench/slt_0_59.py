"""A trained spoken-numbers run against pocketsphinx on flite's `slt` speaking 0-59 (issue 38).

    python bench/slt_0_59.py --run-dir runs/asr.robust [-e asr.numbers.robust] [--checkpoint W]

The issue's yardstick: pocketsphinx 5.1.1 with its stock US-English model, untrained on our
data, scores WER 9.38% on `slt` speaking the cardinals 0-59 (measured by the issue's author).
This synthesises the same 60 utterances the way the corpus does (`seqc.data.corpora.
spoken_numbers.synthesise`: flite's slt, resampled to 16 kHz, peak at -3 dBFS) into
`runs/bench-slt-0-59/`, writes their manifest, and scores the run on it with
`seqc eval --manifest`. `slt` never speaks in training, so the voice is unseen; the numbers
0-59 are not held out (other voices speak them in training), as they are not for pocketsphinx.

Ends with `name: value` lines: slt_0_59_wer, slt_0_59_cer, pocketsphinx_wer (the issue's
figure, for the ratio), slt_0_59_wer_over_pocketsphinx.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from seqc.data.corpora import spoken_numbers, voices

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "runs" / "bench-slt-0-59"
SPEC = ROOT / "examples" / "asr" / "spoken_numbers.seq"
POCKETSPHINX_WER = 9.38


def build(folder: Path) -> Path:
    """The 60 utterances and their manifest, `folder/slt-0-59.jsonl`."""
    (folder / "wavs" / "slt").mkdir(parents=True, exist_ok=True)
    tools = spoken_numbers.find_tools()
    lines = []
    for n in range(60):
        text = spoken_numbers.phrase(n, "cardinal")
        utterance = spoken_numbers.Utterance("slt", n + 1, n, "cardinal", text, voices.TEST)
        lines.append(spoken_numbers.synthesise(utterance, folder, tools))
    manifest = folder / "slt-0-59.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("-e", "--experiment", default="asr.numbers.robust")
    parser.add_argument("--checkpoint", type=Path, help="weights to score (seqc eval's flag)")
    args = parser.parse_args()
    manifest = build(FOLDER)
    command = [sys.executable, "-m", "seqc.cli", "eval", str(SPEC), "-e", args.experiment,
               "--run-dir", str(args.run_dir), "--manifest", str(manifest),
               "--by", "voice"]  # fmt: skip
    if args.checkpoint is not None:
        command += ["--checkpoint", str(args.checkpoint)]
    print("$", " ".join(command[2:]), flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    print(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.exit(done.returncode)
    wer = float(re.findall(r"wer: ([\d.]+)", done.stdout)[-1])
    cer = float(re.findall(r"cer: ([\d.]+)", done.stdout)[-1])
    print(f"slt_0_59_wer: {wer:.2f}")
    print(f"slt_0_59_cer: {cer:.2f}")
    print(f"pocketsphinx_wer: {POCKETSPHINX_WER:.2f}")
    print(f"slt_0_59_wer_over_pocketsphinx: {wer / POCKETSPHINX_WER:.3f}")


if __name__ == "__main__":
    main()
