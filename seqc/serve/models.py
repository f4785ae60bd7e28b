"""A served model: one exported artifact, loaded once, and what it can do for a request.

Why the same decoders as `seqc decode --artifact`: the artifact's `TextDecoder`
(`seqc.run.decoding.text_decoder.from_artifact`) turns text into ids and back and holds the
step decoder and the transcriber, so the server's answer for a sentence is the command's, token
for token; what the server adds is running several sources in one call (`translate` decodes a
batch's sentences together, `decode_all`) and the request's own decode options.

What a model does follows from its artifact: a translator translates (`translate`), a language
model continues a prompt (`generate`) and scores a text (`score`: log p, summed over its tokens
and the end of the line), a scoring artifact (`normalize = false`) only scores, with its raw,
self-normalised scores, and a speech model transcribes (`transcribe`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from seqc.compiler.config import DecodeConfig
from seqc.run.decoding.steps import decode_all
from seqc.run.decoding.text_decoder import TextDecoder, fallback_strategy, from_artifact
from seqc.run.export.artifact import Artifact, load_artifact, step_functions
from seqc.run.rundir.outputs import one_line
from seqc.serve.errors import bad

Action = Literal["translate", "generate", "transcribe", "score"]


@dataclass(frozen=True)
class TextJob:
    """One sentence or prompt, and how to decode it."""

    text: str
    strategy: DecodeConfig
    nbest: int = 1
    """More than 1: the answer is the n best hypotheses of beam search (`Ranked`)."""


@dataclass(frozen=True)
class Ranked:
    """A job's n best outputs, best first, with each one's log-probability (the sum over its
    tokens and the end of the sequence, before the length penalty that ranked them)."""

    texts: list[str]
    scores: list[float | None]


@dataclass(frozen=True)
class AudioJob:
    """One utterance (float32 samples at the model's rate), and how to decode it."""

    samples: np.ndarray
    strategy: DecodeConfig | None


@dataclass
class ServedModel:
    name: str
    path: Path
    artifact: Artifact
    gen: TextDecoder | None
    """None for a scoring artifact, which decodes nothing."""
    actions: tuple[Action, ...]
    max_batch: int = 16
    ready: bool = False
    _score_fns: Any = None
    _lock: Any = None
    fusion: dict[str, Any] | None = None
    """The word LM fused into this speech model's beam search (`fuse`), as metadata shows it."""

    def fuse(self, lm: Path, weight: float, bonus: float) -> None:
        """Shallow fusion of an exported word LM into every transcript this model makes, as
        `seqc decode --artifact DIR --lm LM` fuses it (`seqc.run.lm.language_model.fuse_into`)."""
        from seqc.run.lm.language_model import LmSource, fuse_into

        model = fuse_into(self._gen(), LmSource(artifact=lm), weight, bonus)
        self.fusion = {
            "lm": str(lm),
            "scores": model.scores,
            "lm_weight": weight,
            "length_bonus": bonus,
        }

    @property
    def manifest(self) -> dict[str, Any]:
        return self.artifact.manifest

    @property
    def kind(self) -> str:
        return str(self.manifest["task_kind"])

    @property
    def main_action(self) -> Action:
        return self.actions[0]

    @property
    def strategy(self) -> DecodeConfig | None:
        if self.gen is None:
            return None
        return self.gen.strategy or (None if self.kind == "asr" else fallback_strategy())

    @property
    def sample_rate(self) -> int:
        return int((self.manifest.get("audio") or {}).get("sample_rate", 16000))

    # ------------------------------------------------------------------ running
    def translate(self, jobs: Sequence[TextJob]) -> list[str | Ranked]:
        """Each sentence's translation, the batch's sentences with one strategy decoded
        together; an empty sentence's is empty, as `seqc decode` gives it. A job that asks
        for its n best is decoded on its own (`Ranked`)."""
        gen = self._gen()
        tok = gen.tokenizer
        out: list[str | Ranked] = [""] * len(jobs)
        for i, job in enumerate(jobs):
            if job.nbest > 1:
                src = [*tok.encode(job.text), tok.eos_id] if job.text.strip() else None
                out[i] = self._ranked(job, [], src, gen.target_tokenizer, [])
        single = [job if job.nbest == 1 else None for job in jobs]
        for strategy, idx in _groups(single):
            full = [i for i in idx if jobs[i].text.strip()]
            sources = [[*tok.encode(jobs[i].text), tok.eos_id] for i in full]
            if not sources:
                continue
            assert gen.decoder is not None
            with self._guard():
                tokens = decode_all(gen.decoder, strategy, sources, self.max_batch)  # type: ignore[arg-type]
            for i, t in zip(full, tokens, strict=True):
                out[i] = one_line(str(gen.target_tokenizer.decode(t)))
        return out

    def generate(self, jobs: Sequence[TextJob]) -> list[str | Ranked]:
        """Each prompt completed to the end of its line, as `seqc decode` prints it: a
        language model's prompts decode one after another (their lengths differ)."""
        gen = self._gen()
        tok = gen.tokenizer
        assert gen.decoder is not None
        out: list[str | Ranked] = []
        for job in jobs:
            start = tok.encode(job.text)
            if job.nbest > 1:
                out.append(self._ranked(job, start, None, tok, start))
                continue
            with self._guard():
                ids = [*start, *gen.decoder.generate(job.strategy, start)]
            out.append(one_line(tok.decode(ids)))
        return out

    def transcribe(self, jobs: Sequence[AudioJob]) -> list[str]:
        gen = self._gen()
        assert gen.transcriber is not None
        out = []
        for job in jobs:
            listen = gen.transcriber
            if job.strategy is not None:
                listen = dataclasses.replace(listen, strategy=job.strategy)
            with self._guard():
                out.append(str(listen(job.samples)))
        return out

    def score(self, texts: Sequence[str]) -> list[float | None]:
        """Each text's log-probability after BOS, its tokens and the end of the line: the
        log-softmax of a language model's logits, or a scoring artifact's raw scores (taken as
        log p, as the model was trained self-normalised). None where it is not finite. By
        the artifact's sentence scorer, one call a text, where it has one (ONNX)."""
        from seqc.backends.api import sentence_scorer
        from seqc.compiler.scoring import SCORE_INPUT
        from seqc.run.decoding.forced import sequence_feeds, step_through

        tok, _ = self.artifact.tokenizers()
        special = self.manifest["special"]
        sig = self.artifact.signature
        fns = self._fns()
        scorer = sentence_scorer(fns)
        out: list[float | None] = []
        for text in texts:
            ids = [*tok.encode(text), special["eos"]]
            inputs = np.asarray([[special["bos"], *ids[:-1]]], np.int32)
            labels = np.asarray([ids], np.int32)
            arrays = {"inputs": inputs}
            if sig.score_field is not None:
                arrays[sig.score_field] = labels
            total = 0.0
            if scorer is not None:
                arrays[sig.sequence_inputs[SCORE_INPUT]] = labels
                with self._guard():
                    scored = scorer(sequence_feeds(sig, arrays))
                total = float(np.asarray(scored, np.float64).sum())
                out.append(total if math.isfinite(total) else None)
                continue
            with self._guard():
                steps = [logits for _, logits in step_through(fns, sig, arrays)]
            for pos, logits in enumerate(steps):
                row = np.asarray(logits, np.float64).reshape(-1)
                if sig.score_input is not None:
                    total += float(row[0])
                else:
                    shifted = row - row.max()
                    total += float(shifted[labels[0, pos]] - math.log(np.exp(shifted).sum()))
            out.append(total if math.isfinite(total) else None)
        return out

    def stream(self, action: Action, job: TextJob, heard: Callable[[str], None]) -> str:
        """One sentence translated or one prompt continued (`action`), `heard` given the text
        as its tokens are decided (each call: the text added since the last), and the whole
        answer returned, as `translate` or `generate` gives it. Why text and not tokens: a
        client shows words; a piece that does not yet decode to a stable prefix (a subword
        that a later piece joins) is held back until it does."""
        gen = self._gen()
        assert gen.decoder is not None
        tok = gen.tokenizer
        if action == "translate":
            prefix, src = [], [*tok.encode(job.text), tok.eos_id]
            out_tok = gen.target_tokenizer
        else:
            prefix, src, out_tok = tok.encode(job.text), None, tok
        told = str(out_tok.decode(prefix))
        tokens = list(prefix)

        def decided(new: list[int]) -> None:
            nonlocal told
            tokens.extend(new)
            text = str(out_tok.decode(tokens))
            if text.startswith(told) and len(text) > len(told):
                heard(text[len(told) :])
                told = text

        prompt = prefix if src is None else []
        with self._guard():
            got = gen.decoder.generate(job.strategy, prompt, src, decided=decided)  # type: ignore[call-arg]
        if action == "translate":
            return one_line(str(out_tok.decode(got)))
        return one_line(str(out_tok.decode([*prefix, *got])))

    def _ranked(
        self, job: TextJob, prompt: list[int], src: list[int] | None, out_tok: Any, shown: list[int]
    ) -> Ranked:
        """The n best of one source or prompt, each decoded after `shown` (a prompt's tokens)."""
        gen = self._gen()
        if src is None and gen.task == "seq2seq":  # an empty sentence: empty answers
            return Ranked([""] * job.nbest, [None] * job.nbest)
        nbest = getattr(gen.decoder, "nbest", None)
        if nbest is None:
            raise bad(f"model `{self.name}` cannot give n-best lists", "parameters.nbest")
        with self._guard():
            hyps = nbest(job.strategy, prompt, src, job.nbest)
        texts = [one_line(str(out_tok.decode([*shown, *h.tokens]))) for h in hyps]
        return Ranked(texts, [h.logprob if math.isfinite(h.logprob) else None for h in hyps])

    def _guard(self) -> AbstractContextManager[Any]:
        """The model's lock where its runtime is not safe to call from two threads at once
        (LiteRT's interpreter, TF); onnxruntime's sessions are."""
        return self._lock if self._lock is not None else contextlib.nullcontext()

    def _gen(self) -> TextDecoder:
        if self.gen is None:
            raise bad(f"model `{self.name}` only scores text", code="wrong-route")
        return self.gen

    def _fns(self) -> Any:
        """The step functions scoring runs on: the decoder's, or (a scoring artifact, which
        has no decoder) the artifact loaded in its runtime once."""
        decoder = self.gen.decoder if self.gen is not None else None
        if decoder is not None:
            return decoder.fns  # type: ignore[attr-defined]
        if self._score_fns is None:
            self._score_fns = step_functions(self.artifact)
        return self._score_fns

    # ------------------------------------------------------------------ description
    def metadata(self) -> dict[str, Any]:
        """The inference protocol's model metadata, with seqc's manifest facts."""
        m = self.manifest
        inputs, outputs = self.tensors()
        strategy = self.strategy
        return {
            "name": self.name,
            "versions": ["1"],
            "platform": f"seqc_{m['format']}",
            "inputs": inputs,
            "outputs": outputs,
            "parameters": {
                "task_kind": m["task_kind"],
                "actions": list(self.actions),
                "format": m["format"],
                "quantization": m.get("quantize"),
                "experiment": m.get("experiment"),
                "task": m.get("task"),
                "tokenizer": {"vocab_size": m.get("vocab_size")},
                "decode": strategy.to_json() if strategy is not None else None,
                "scoring": m.get("scoring"),
                "sample_rate": self.sample_rate if self.kind == "asr" else None,
                "fusion": self.fusion,
            },
        }

    def tensors(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        text = {"name": "text", "datatype": "BYTES", "shape": [-1]}
        score = {"name": "score", "datatype": "FP32", "shape": [-1]}
        if self.main_action == "transcribe":
            audio = {"name": "audio", "datatype": "FP32", "shape": [-1, -1]}
            return [audio], [text]
        if self.main_action == "score":
            return [text], [score]
        outputs = [text, score] if "score" in self.actions else [text]
        return [text], outputs


def _groups(jobs: Sequence[TextJob | None]) -> list[tuple[DecodeConfig, list[int]]]:
    """The jobs' indices by strategy, in first-seen order: one strategy decodes together
    (None: a job decoded elsewhere)."""
    groups: dict[DecodeConfig, list[int]] = {}
    for i, job in enumerate(jobs):
        if job is not None:
            groups.setdefault(job.strategy, []).append(i)
    return list(groups.items())


def load_model(path: Path, name: str | None = None) -> ServedModel:
    """An artifact folder as a served model (a `FileError` for a missing or corrupt one)."""
    art = load_artifact(path)
    m = art.manifest
    scoring = not (m.get("scoring") or {}).get("normalize", True)
    kind = m["task_kind"]
    actions: tuple[Action, ...]
    if scoring:
        actions = ("score",)
    elif kind == "asr":
        actions = ("transcribe",)
    elif kind == "seq2seq":
        actions = ("translate",)
    else:
        actions = ("generate", "score")
    gen = None if scoring else from_artifact(art)
    model = ServedModel(name or path.resolve().name, path, art, gen, actions)
    if art.format != "onnx":
        model._lock = threading.Lock()
    return model


def error_id() -> str:
    """A short id for a server error, in the response and in the log line."""
    return uuid.uuid4().hex[:12]
