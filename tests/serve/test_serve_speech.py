"""`seqc serve` with a speech model: a WAV as the body, as a form's file, or samples as the
inference protocol's `audio` tensor, each transcribed as `seqc decode --artifact DIR --input
utt.wav` transcribes it; audio at another rate is refused with the command that converts it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner
from wavs import needs_voices

from seqc.cli import app as cli
from seqc.data.audio import read_wav
from seqc.data.corpora import spoken_numbers
from seqc.serve.app import build_app
from seqc.serve.config import ServeConfig
from seqc.serve.models import load_model
from seqc.serve.server import Server

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "asr" / "spoken_numbers.seq"
pytestmark = needs_voices
runner = CliRunner()


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """`asr.numbers.tiny` trained on a tiny corpus and exported to ONNX; the dev wavs."""
    folder = tmp_path_factory.mktemp("asr")
    data = folder / "data"
    spoken_numbers.build(data, sizes={"train": 12, "dev": 4, "test": 4}, workers=1)
    text = SPEC.read_text().replace(".cache/data/spoken-numbers/", f"{data.as_posix()}/")
    (folder / "asr.seq").write_text(text)
    base = [str(folder / "asr.seq"), "-e", "asr.numbers.tiny", "--cache-dir", str(folder / "c")]
    run = folder / "run"
    onnx = ["--format", "onnx", "--quantize", "none", "--wer", "2", "--batches", "1"]
    for args in (
        ["train", *base, "--run-dir", str(run), "--no-progress"],
        ["export", *base, "--run-dir", str(run), *onnx],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, result.output
    wavs = sorted(data.rglob("*.wav"))[:3]
    return run / "export" / "onnx-none", wavs


def _decoded(artifact: Path, wav: Path) -> str:
    result = runner.invoke(cli, ["decode", "--artifact", str(artifact), "--input", str(wav)])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()[-1]


def test_audio_is_transcribed_as_seqc_decode_does(speech) -> None:
    artifact, wavs = speech
    want = [_decoded(artifact, w) for w in wavs]
    model = load_model(artifact, "numbers")

    async def main() -> None:
        server = Server({"numbers": model}, ServeConfig())
        transport = httpx.ASGITransport(app=build_app(server))
        await server.start()
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://s") as c:
                meta = (await c.get("/v2/models/numbers")).json()
                assert meta["inputs"][0]["name"] == "audio"
                assert meta["parameters"]["sample_rate"] == 16000
                route = "/v1/models/numbers/transcribe"
                for wav, text in zip(wavs, want, strict=True):
                    data = wav.read_bytes()
                    r = await c.post(route, content=data, headers={"content-type": "audio/wav"})
                    assert r.status_code == 200 and r.json() == {"text": text}, r.text
                    files = {"file": ("utt.wav", data, "audio/wav")}
                    assert (await c.post(route, files=files)).json() == {"text": text}
                    samples = read_wav(wav).tolist()
                    tensor = {"name": "audio", "datatype": "INT16", "shape": [1, len(samples)]}
                    body = {"inputs": [{**tensor, "data": samples}]}
                    r = await c.post("/v2/models/numbers/infer", json=body)
                    assert r.json()["outputs"][0]["data"] == [text], r.text
                r = await c.post(route, content=b"not a wav", headers={"content-type": "audio/wav"})
                assert r.status_code == 400 and r.json()["field"] == "body"
                r = await c.post(route, content=b"{}", headers={"content-type": "application/json"})
                assert r.status_code == 415
                body["parameters"] = {"sample_rate": 8000}
                r = await c.post("/v2/models/numbers/infer", json=body)
                assert r.status_code == 400 and "sox" in r.json()["error"]
        finally:
            await server.stop()

    asyncio.run(main())


def test_a_served_recogniser_fuses_an_lm_as_seqc_decode_does(speech, arts) -> None:
    """`seqc serve ASR --lm LM`: every transcript fuses the word LM as `seqc decode --artifact
    ASR --lm LM` does (same weights, same transcripts), and the model's metadata says so; an
    LM with no speech model to fuse into is refused."""
    from seqc.cli.serve import fuse_lm
    from seqc.spec.errors import UsageError

    artifact, wavs = speech
    wavs = wavs[:2]
    lm = arts.artifact("lm")
    knobs = ["--lm", str(lm), "--lm-weight", "0.8", "--length-bonus", "0.5"]
    want = []
    for wav in wavs:
        result = runner.invoke(
            cli, ["decode", "--artifact", str(artifact), "--input", str(wav), *knobs]
        )
        assert result.exit_code == 0, result.output
        want.append(result.stdout.splitlines()[-1])
    model = load_model(artifact, "numbers")
    fuse_lm({"numbers": model}, lm, 0.8, 0.5)

    async def main() -> None:
        server = Server({"numbers": model}, ServeConfig())
        transport = httpx.ASGITransport(app=build_app(server))
        await server.start()
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://s") as c:
                meta = (await c.get("/v2/models/numbers")).json()
                fusion = meta["parameters"]["fusion"]
                assert fusion["lm"] == str(lm) and fusion["lm_weight"] == 0.8
                route = "/v1/models/numbers/transcribe"
                for wav, text in zip(wavs, want, strict=True):
                    headers = {"content-type": "audio/wav"}
                    r = await c.post(route, content=wav.read_bytes(), headers=headers)
                    assert r.status_code == 200 and r.json() == {"text": text}, r.text
        finally:
            await server.stop()

    asyncio.run(main())
    with pytest.raises(UsageError, match="none of the models served transcribes speech"):
        fuse_lm({"lm": load_model(lm, "lm")}, lm, 0.8, 0.5)
