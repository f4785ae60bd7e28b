"""`seqc serve` in process, through `httpx.ASGITransport`: the inference protocol's routes and
the task routes on exported artifacts (a translator in ONNX and TFLite, a language model in
ONNX), answers equal to `seqc decode --artifact`'s, batching, and every error path a 4xx with
a JSON body naming the field."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from served_artifacts import Served
from typer.testing import CliRunner

from seqc.cli import app as cli
from seqc.serve.app import build_app
from seqc.serve.config import ServeConfig
from seqc.serve.models import ServedModel, load_model
from seqc.serve.server import Server

SOURCES = ["abcd", "hgf", "bad", "cafe", "", "gg"]


@pytest.fixture(scope="module")
def models(arts: Served) -> dict[str, ServedModel]:
    return {
        "mt": load_model(arts.artifact("mt"), "mt"),
        "mt-tflite": load_model(arts.artifact("mt", "tflite-none"), "mt-tflite"),
        "lm": load_model(arts.artifact("lm"), "lm"),
    }


@contextlib.asynccontextmanager
async def serving(
    models: dict[str, ServedModel], **config
) -> AsyncIterator[tuple[httpx.AsyncClient, Server]]:
    server = Server(models, ServeConfig(**config))
    transport = httpx.ASGITransport(app=build_app(server))
    await server.start()
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://seqc") as client:
            yield client, server
    finally:
        await server.stop()


def _decoded(args: list[str], lines: list[str]) -> list[str]:
    result = CliRunner().invoke(cli, ["decode", *args, "--input", "-"], input="\n".join(lines))
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def _infer(texts: list[str], **params) -> dict:
    body: dict = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(texts)]}]}
    body["inputs"][0]["data"] = texts
    if params:
        body["parameters"] = params
    return body


def test_health_metadata_and_readiness(models) -> None:
    async def main() -> None:
        async with serving(models) as (c, _):
            assert (await c.get("/v2/health/live")).json() == {"live": True}
            assert (await c.get("/v2/health/ready")).status_code == 200
            assert (await c.get("/v2")).json()["name"] == "seqc"
            meta = (await c.get("/v2/models/mt")).json()
            assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
            assert meta["parameters"]["task_kind"] == "seq2seq"
            assert meta["parameters"]["decode"]["kind"] == "greedy"
            assert meta["parameters"]["format"] == "onnx"
            assert (await c.get("/v2/models/lm/ready")).json()["ready"] is True
            missing = await c.get("/v2/models/nope")
            assert missing.status_code == 404 and "mt" in missing.json()["error"]

    asyncio.run(main())


def test_translations_are_those_of_seqc_decode_on_each_format(arts: Served, models) -> None:
    want = _decoded(["--artifact", str(arts.artifact("mt"))], SOURCES)
    assert len(want) == len(SOURCES) and any(want) and want[4] == ""

    async def main() -> None:
        async with serving(models) as (c, _):
            for name in ("mt", "mt-tflite"):
                r = await c.post(f"/v2/models/{name}/infer", json={**_infer(SOURCES), "id": "7"})
                assert r.status_code == 200, r.text
                body = r.json()
                assert body["id"] == "7" and body["model_name"] == name
                (out,) = body["outputs"]
                assert out == {"name": "text", "datatype": "BYTES", "shape": [6], "data": want}
                r = await c.post(f"/v1/models/{name}/translate", json={"text": SOURCES})
                assert r.json() == {"translations": want}

    asyncio.run(main())


def test_beam_search_in_a_batch_is_beam_search_alone(models) -> None:
    """Options in `parameters` decode as that strategy would one source at a time."""
    model = models["mt"]
    from seqc.serve.params import strategy_for

    beam = strategy_for(model.strategy, {"beam": 3}, 256)
    tok = model.gen.tokenizer
    alone = [
        model.gen.target_tokenizer.decode(model.gen.decoder.generate(beam, [], [*tok.encode(s), 2]))
        for s in SOURCES[:4]
    ]

    async def main() -> None:
        async with serving(models) as (c, _):
            r = await c.post(
                "/v1/models/mt/translate", json={"text": SOURCES[:4], "parameters": {"beam": 3}}
            )
            assert r.json()["translations"] == alone

    asyncio.run(main())


def test_nbest_lists_are_beam_search_s_best_first_with_their_log_probabilities(models) -> None:
    """`nbest`: each sentence's n best, the first the one-best answer; the scores are the
    hypotheses' log-probabilities, in the order the length penalty ranked them."""
    model = models["mt"]
    from seqc.serve.params import strategy_for

    beam = strategy_for(model.strategy, {"beam": 4}, 256)
    tok = model.gen.tokenizer
    src = [*tok.encode(SOURCES[0]), tok.eos_id]
    hyps = model.gen.decoder.nbest(beam, [], src, 3)
    assert hyps[0].tokens == model.gen.decoder.generate(beam, [], src)
    alpha = beam.length_penalty
    assert [h.score(alpha) for h in hyps] == sorted((h.score(alpha) for h in hyps), reverse=True)
    want = [model.gen.target_tokenizer.decode(h.tokens) for h in hyps]

    async def main() -> None:
        async with serving(models) as (c, _):
            params = {"beam": 4, "nbest": 3}
            r = await c.post(
                "/v1/models/mt/translate", json={"text": SOURCES[:2], "parameters": params}
            )
            body = r.json()
            assert r.status_code == 200, body
            assert body["translations"][0] == want
            assert [len(x) for x in body["translations"]] == [3, 3]
            assert body["scores"][0] == pytest.approx([h.logprob for h in hyps], rel=1e-6)
            r = await c.post(
                "/v2/models/mt/infer", json={**_infer(SOURCES[:2]), "parameters": params}
            )
            out = {o["name"]: o for o in r.json()["outputs"]}
            assert out["text"]["shape"] == [2, 3] and out["score"]["shape"] == [2, 3]
            assert out["text"]["data"][:3] == want
            plain = await c.post(
                "/v1/models/mt/translate", json={"text": SOURCES[:1], "parameters": {"beam": 4}}
            )
            assert plain.json()["translations"] == [want[0]]
            lm = await c.post("/v1/models/lm/generate", json={"text": ["ab"], "parameters": params})
            (texts,) = lm.json()["texts"]
            assert len(texts) == 3 and all(t.startswith("ab") for t in texts)

    asyncio.run(main())


def test_a_language_model_continues_prompts_as_seqc_decode_does_and_scores_text(
    arts: Served, models
) -> None:
    prompts = ["the ", "to be"]
    want = _decoded(["--artifact", str(arts.artifact("lm"))], prompts)

    async def main() -> None:
        async with serving(models) as (c, _):
            body = {**_infer(prompts), "outputs": [{"name": "text"}, {"name": "score"}]}
            r = await c.post("/v2/models/lm/infer", json=body)
            assert r.status_code == 200, r.text
            text, score = r.json()["outputs"]
            assert text["data"] == want
            assert score["datatype"] == "FP32" and len(score["data"]) == 2
            assert all(s is not None and s < 0 for s in score["data"])
            r = await c.post("/v1/models/lm/score", json={"text": prompts})
            assert r.json()["scores"] == pytest.approx(score["data"], abs=1e-6)
            r = await c.post("/v1/models/lm/generate", json={"text": prompts})
            assert r.json() == {"texts": want}

    asyncio.run(main())


def test_a_text_is_scored_as_the_sum_of_its_tokens_log_probabilities(models) -> None:
    """The score is log p of each token after BOS and of the end of the line, by the ONNX
    LM's sentence scorer (one call), checked here against its logits step by step."""
    from seqc.run.decoding.forced import teacher_forced

    model = models["lm"]
    assert model.artifact.signature.sequence_inputs  # it has a sentence scorer
    (got,) = model.score(["to be"])
    tok, special = model.gen.tokenizer, model.manifest["special"]
    ids = [*tok.encode("to be"), special["eos"]]
    inputs = np.asarray([[special["bos"], *ids[:-1]]], np.int32)
    logits = teacher_forced(model.gen.decoder.fns, model.artifact.signature, {"inputs": inputs})
    z = np.asarray(logits, np.float64)[0]
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    assert got == pytest.approx(float(sum(logp[i, t] for i, t in enumerate(ids))), abs=1e-5)


def test_requests_that_arrive_together_are_decoded_in_fewer_model_calls(models) -> None:
    sentences = [f"{'abcdefgh'[i % 8]}{'hgfedcba'[i % 5]}{'ab'[i % 2]}" for i in range(12)]

    async def main() -> None:
        async with serving(models, max_batch_size=16, max_delay_ms=100) as (c, server):
            alone = [
                (await c.post("/v1/models/mt/translate", json={"text": [s]})).json()
                for s in sentences
            ]
            calls = server.batchers[("mt", "translate")].batches
            answers = await asyncio.gather(
                *(c.post("/v1/models/mt/translate", json={"text": [s]}) for s in sentences)
            )
            together = server.batchers[("mt", "translate")].batches - calls
            assert [a.json() for a in answers] == alone
            assert together < len(sentences) / 2, together
            metrics = (await c.get("/metrics")).text
            assert 'seqc_requests_total{model="mt",route="translate",status="200"} 24.0' in metrics
            assert "seqc_batch_size_bucket" in metrics and "seqc_queue_wait_seconds" in metrics

    asyncio.run(main())


def _tensor(**kw) -> bytes:
    tensor = {"name": "text", "datatype": "BYTES", "shape": [1], "data": ["ab"]} | kw
    return json.dumps({"inputs": [tensor]}).encode()


BAD_INFER = [
    (b"{not json", 400, "body"),
    (json.dumps({"inputs": []}).encode(), 400, "inputs"),
    (_tensor(datatype="FP32", data=[1]), 400, "inputs[0].datatype"),
    (_tensor(shape=[2]), 400, "inputs[0].shape"),
    (_tensor(shape=[0], data=[]), 400, "inputs[0].data"),
    (_tensor(data=[3]), 400, "inputs[0].data[0]"),
    (_tensor(name="words"), 400, "inputs"),
    (json.dumps({**_infer(["ab"]), "parameters": {"beams": 2}}).encode(), 400, "parameters.beams"),
    (_tensor(data=["a" * 3000]), 400, "inputs[0].data[0]"),
    (json.dumps({**_infer(["ab"]), "parameters": {"nbest": 2}}).encode(), 400, "parameters.nbest"),
    (
        json.dumps({**_infer(["ab"]), "parameters": {"beam": 2, "nbest": 3}}).encode(),
        400,
        "parameters.nbest",
    ),
    (b"[1, 2]", 400, "body"),
]


@pytest.mark.parametrize(("body", "status", "field"), BAD_INFER)
def test_bad_requests_are_the_clients_error_naming_the_field(models, body, status, field) -> None:
    async def main() -> None:
        async with serving(models) as (c, _):
            r = await c.post(
                "/v2/models/mt/infer", content=body, headers={"content-type": "application/json"}
            )
            assert r.status_code == status, r.text
            assert r.json()["field"] == field and r.json()["error"]

    asyncio.run(main())


def test_limits_keys_and_load_answer_with_their_status(models, tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(models, max_body_bytes=200, api_key="s3cret", max_queue=1) as (c, _):
            key = {"Authorization": "Bearer s3cret"}
            assert (await c.get("/v2/health/ready")).status_code == 200  # no key needed
            r = await c.post("/v1/models/mt/translate", json={"text": ["ab"]})
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            r = await c.post(
                "/v1/models/mt/translate",
                json={"text": ["ab"]},
                headers={"Authorization": "Bearer nope"},
            )
            assert r.status_code == 401
            r = await c.post("/v1/models/mt/translate", json={"text": ["ab"]}, headers=key)
            assert r.status_code == 200
            r = await c.post("/v1/models/mt/translate", json={"text": ["x" * 300]}, headers=key)
            assert r.status_code == 413
            r = await c.post("/v1/models/mt/translate", json={"text": ["ab", "cd"]}, headers=key)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            r = await c.post("/v1/models/mt/transcribe", content=b"RIFF", headers=key)
            assert r.status_code == 400 and r.json()["code"] == "wrong-route"
            r = await c.post("/v1/models/mt/translate", json={"txt": ["ab"]}, headers=key)
            assert r.status_code == 400 and r.json()["field"] == "body"
        async with serving(models, timeout_s=0.000001) as (c, _):
            r = await c.post("/v1/models/mt/translate", json={"text": ["abcd"]})
            assert r.status_code == 504 and r.json()["code"] == "timeout"

    asyncio.run(main())


def test_the_page_and_its_files_are_served(models) -> None:
    async def main() -> None:
        async with serving(models, api_key="k") as (c, _):
            page = await c.get("/")
            assert page.status_code == 200 and "seqc serve" in page.text
            assert "fetch(" in (await c.get("/static/page.js")).text
            listed = (await c.get("/v1/models", headers={"Authorization": "Bearer k"})).json()
            assert [m["name"] for m in listed["models"]] == ["mt", "mt-tflite", "lm"]

    asyncio.run(main())


def test_a_client_that_goes_away_has_its_waiting_sources_dropped(models) -> None:
    from seqc.serve.errors import ServeError
    from seqc.serve.models import TextJob

    async def gone() -> None:
        await asyncio.sleep(0.01)

    async def main() -> None:
        async with serving(models, max_delay_ms=500) as (_, server):
            model = server.models["mt"]
            batcher = server.batchers[("mt", "translate")]
            before = batcher.batches
            other = asyncio.ensure_future(
                server.run(model, "translate", [TextJob("abc", model.strategy)])
            )
            with pytest.raises(ServeError) as e:
                await server.run(model, "translate", [TextJob("abcd", model.strategy)], gone)
            assert e.value.status == 499
            assert await other == [model.translate([TextJob("abc", model.strategy)])[0]]
            assert batcher.batches == before + 1
            sizes = server.metrics.registry.get_sample_value("seqc_batch_size_sum", {"model": "mt"})
            assert sizes == 1  # the batch held the other request's source only

    asyncio.run(main())


def _events(body: str) -> list[tuple[str | None, dict]]:
    out = []
    for block in body.strip().split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: ") :])
        out.append((name, data))
    return out


@pytest.mark.parametrize("params", [{}, {"beam": 3}])
def test_a_streamed_answer_is_the_plain_answer_in_pieces(models, params: dict) -> None:
    async def main() -> None:
        async with serving(models) as (c, _):
            route = "/v1/models/mt/translate"
            body = {"text": ["abcdefg"], "parameters": params}
            plain = (await c.post(route, json=body)).json()["translations"][0]
            r = await c.post(route, json={**body, "stream": True})
            assert r.headers["content-type"].startswith("text/event-stream")
            events = _events(r.text)
            pieces = [d["text"] for name, d in events if name is None]
            assert events[-1] == ("done", {"text": plain}) and "".join(pieces) == plain
            # greedy decides a token a step: the text comes as it is decided, not at the end
            assert len(pieces) > 1 or params
            r = await c.post("/v1/models/lm/generate", json={"text": ["to be"], "stream": True})
            events = _events(r.text)
            pieces = "".join(d["text"] for name, d in events if name is None)
            want = (await c.post("/v1/models/lm/generate", json={"text": ["to be"]})).json()
            assert events[-1] == ("done", {"text": want["texts"][0]})
            assert want["texts"][0].endswith(pieces) and pieces
            r = await c.post(route, json={"text": ["ab", "cd"], "stream": True})
            assert r.status_code == 400 and r.json()["field"] == "text"

    asyncio.run(main())
