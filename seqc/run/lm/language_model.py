"""A trained language model as a scorer of word sequences, for other tasks' hypotheses: n-best
rescoring (`seqc.run.lm.rescore`) and shallow fusion in a recogniser's beam search
(`seqc.run.decoding.fusion`).

Why over step functions: a checkpoint (on its backend) and an exported artifact (ONNX, TFLite,
SavedModel) both give the encoder/step pair with explicit caches (`StepFunctions`), so one
scorer serves both, and a hypothesis is scored in O(T) steps, each prefix's caches kept for the
words that may follow it (fusion extends the same prefixes over and over). Whole sentences
(n-best rescoring) go through the sentence scorer where there is one (a checkpoint's forward
on its backend, an ONNX artifact's `sequence.onnx`): a batch of sentences in one call, where
a call per position cost more than a small LM's arithmetic (`bench/scoring.py`).

Two kinds of score, the SNIS paper's comparison:
- **normalised**: log p(w | h), the log-softmax of the step's logits over the whole vocabulary;
  what a cross-entropy LM must be read by, and it costs the full output layer per word and
  the sum of its exponentials (`seconds` counts both);
- **raw**: the output layer's score s_w of the one word asked for (the scoring program,
  `seqc.compiler.scoring`, or an artifact exported with `normalize = false`): log p(w | h) for
  a self-normalised model (NCE, SNIS variant B), one row of the output matrix per word.

A sentence is scored as the LM saw lines in training, then each word, then EOS (whose score is
counted: a hypothesis that stops mid-phrase costs what the LM thinks of stopping there). What
comes before the first word is the LM's `start`: BOS for an LM trained one line per sequence,
EOS for a packed one (a text LM by default: the stream is bos + line + eos + line + eos ...,
so every line but the first followed an EOS). It matters: the spoken-numbers word LM's dev
perplexity per word is 6.07 started from BOS and 4.10 from EOS (its training figure: 4.01-4.17).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqc.compiler.incremental import POS
from seqc.compiler.scoring import SCORE_INPUT
from seqc.compiler.signature import buffer_length
from seqc.run.decoding.forced import sequence_feeds
from seqc.spec.errors import UsageError

if TYPE_CHECKING:
    from seqc.backends.api import SentenceScorer, StepFunctions
    from seqc.compiler.config import DecodeConfig
    from seqc.compiler.step_signature import StepSignature
    from seqc.data.tokenizers import Tokenizer
    from seqc.run.decoding.fusion import TokenFusion, WordFusion
    from seqc.run.weights.restore import Source

NORMALIZED, RAW = "normalized", "raw"
SCORES = (NORMALIZED, RAW)
SENTENCE_BATCH = 32
"""Texts per call when whole sentences are scored (n-best rescoring). Larger batches are not
faster on a CPU: 256 a call took 0.55 ms a sentence of raw scores against 0.47 at 32, and
3.1 against 1.9-2.5 normalised (a 40,000-word LM's logits for 256 rows are 41 MB a step)."""
HISTORY = 64
"""History slots of a fusion prefix's caches (the LM's buckets are 64 tokens long): a longer
hypothesis's next word is scored after its last 63 words."""


@dataclass
class LanguageModel:
    """Log-scores of words after a history, by a language model's step functions."""

    fns: StepFunctions
    sig: StepSignature
    tokenizer: Tokenizer
    scores: str
    """`NORMALIZED` (log-softmax of logits) or `RAW` (a scoring program's s_w)."""
    name: str = "lm"
    start: int | None = None
    """The token before a sentence's first word: BOS, or EOS for a packed LM (None: BOS)."""
    sequence: SentenceScorer | None = None
    """Whole sentences in one call (`StepProgram.sequence`), what `sentences` uses; None:
    a call per position through the step."""
    seconds: float = 0.0
    """Time spent in the LM's step functions (what a comparison of scorers measures)."""
    words_scored: int = 0
    _states: dict[tuple[int, ...], _State] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.sig.token_input is None or self.sig.encoder_inputs:
            raise UsageError(
                f"{self.name} is not a language model: rescoring and fusion need a model that "
                "reads its own tokens one at a time (a decoder-only LM)",
                code="not-a-language-model",
                hint="give the run directory or artifact of an `lm` task",
            )
        if self.scores not in SCORES:
            raise ValueError(f"scores must be one of {SCORES}; found {self.scores!r}")
        if self.start is None:
            self.start = self.tokenizer.bos_id

    # ----------------------------------------------------------------- words -> ids
    def ids(self, words: Sequence[str]) -> list[int]:
        """Token ids of a word sequence (an unknown word is the tokenizer's unk)."""
        return [int(i) for i in self.tokenizer.encode(" ".join(words))] if words else []

    # ----------------------------------------------------------------- whole sentences
    def sentences(self, texts: Sequence[str], batch: int = SENTENCE_BATCH) -> list[float]:
        """Each text's log-score: its words and EOS after BOS, summed. Scored `batch` texts
        a call, shortest first (a batch steps through its longest text's positions, so texts
        of one length go together), and returned in the order given."""
        seqs = [self.ids(t.split()) for t in texts]
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        out = [0.0] * len(seqs)
        for lo in range(0, len(order), batch):
            chunk = order[lo : lo + batch]
            for i, score in zip(chunk, self._batch([seqs[i] for i in chunk]), strict=True):
                out[i] = score
        return out

    def _batch(self, seqs: list[list[int]]) -> list[float]:
        tok = self.tokenizer
        inputs = [[self.start, *s] for s in seqs]
        labels = [[*s, tok.eos_id] for s in seqs]
        length = max(len(x) for x in inputs)
        rows = len(seqs)
        x = np.full((rows, length), tok.pad_id, np.int32)
        y = np.full((rows, length), tok.pad_id, np.int32)
        real = np.zeros((rows, length), bool)
        for r, (a, b) in enumerate(zip(inputs, labels, strict=True)):
            x[r, : len(a)], y[r, : len(b)], real[r, : len(a)] = a, b, True
        self.words_scored += int(real.sum())
        if self.sequence is not None:
            return [float(t) for t in self._whole(x, y, real)]
        caches = self.sig.zero_caches(rows, buffer_length(length))
        total = np.zeros(rows, np.float64)
        for pos in range(length):
            scored, caches = self._step(x[:, pos : pos + 1], y[:, pos : pos + 1], pos, caches)
            total += np.where(real[:, pos], scored, 0.0)
        return [float(t) for t in total]

    def _whole(self, x: np.ndarray, y: np.ndarray, real: np.ndarray) -> np.ndarray:
        """Each row's summed score of `y` after `x` by the sentence scorer, in one call."""
        assert self.sequence is not None
        labels = self.sig.sequence_inputs[SCORE_INPUT]
        arrays = {"inputs": x, "tgt_in": x, "mask": real, "tgt_mask": real, labels: y}
        feeds = sequence_feeds(self.sig, arrays)
        start = time.perf_counter()
        scored = np.asarray(self.sequence(feeds), np.float64)
        total = np.where(real, scored, 0.0).sum(axis=1)
        self.seconds += time.perf_counter() - start
        return total

    # ----------------------------------------------------------------- one step
    def _step(
        self, token: np.ndarray, label: np.ndarray, pos: int, caches: dict[str, Any]
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Scores [rows] of `label` after `token` at `pos`, and the caches after `token`."""
        feeds: dict[str, Any] = {
            self.sig.token_input or "": np.asarray(token, np.int32),
            POS: np.asarray(pos, np.int32),
            **caches,
        }
        if self.sig.score_input is not None:
            feeds[self.sig.score_input] = np.asarray(label, np.int32)
        feeds = {k: feeds[k] for k in self.sig.step_inputs}
        # the timer covers the whole score: a normalised LM's normalisation is what raw scores
        # save, so it counts with the step that made the logits
        start = time.perf_counter()
        out, caches = self.fns.step(feeds)
        out = np.asarray(out)
        if self.sig.score_input is not None:  # a scoring program: s of the label, [rows, 1]
            scored = out.reshape(out.shape[0], -1)[:, 0].astype(np.float64)
        else:
            scored = label_log_probs(out.reshape(out.shape[0], -1), np.asarray(label))
        self.seconds += time.perf_counter() - start
        return scored, caches

    # ----------------------------------------------------------------- prefixes (fusion)
    def extend(self, history: tuple[str, ...], words: Sequence[str]) -> list[float]:
        """log-score of each of `words` after `history` (one call for all: one step with a row
        per word); "</s>" scores the end of the sentence. The caches of `history` are kept, so
        the words that follow a prefix cost one step, whatever its length."""
        # past the caches' history, the last words alone (a hypothesis that long is garbage
        # a young recogniser's beam holds; an LM's context this long barely moves a score)
        key = self._history_ids(history[-(HISTORY - 1) :])
        ids = [self.tokenizer.eos_id if w == "</s>" else self._word_id(w) for w in words]
        return self.extend_ids(key, ids)

    def extend_ids(self, history: tuple[int, ...], labels: Sequence[int]) -> list[float]:
        """`extend` over token ids: the log-score of each of `labels` after the tokens
        `history` (their last HISTORY - 1). What a subword LM fused at every token of a
        recogniser with its vocabulary asks (`seqc.run.decoding.fusion.TokenFusion`)."""
        key = tuple(int(i) for i in history[-(HISTORY - 1) :])
        state = self._state(key)
        rows = len(labels)
        if rows == 0:
            return []
        column = np.asarray([[int(i)] for i in labels], np.int32)
        caches = {
            k: _repeat(v, self.sig.batch_axis(self.sig.caches[k][0]), rows)
            for k, v in state.caches.items()
        }
        token = np.full((rows, 1), state.last, np.int32)
        scored, after = self._step(token, column, state.pos, caches)
        self.words_scored += rows
        self._keep(key, state, column[:, 0], after)
        return [float(s) for s in scored]

    def _word_id(self, word: str) -> int:
        ids = self.ids([word])
        return ids[0] if len(ids) == 1 else self.tokenizer.unk_id

    def _history_ids(self, history: tuple[str, ...]) -> tuple[int, ...]:
        return tuple(self._word_id(w) for w in history)

    def _state(self, ids: tuple[int, ...]) -> _State:
        """The caches after the start token and all of `ids` but the last (which is fed with
        the next word)."""
        known = self._states.get(ids)
        if known is not None:
            return known
        if not ids:
            state = _State(self.sig.zero_caches(1, HISTORY), int(self.start or 0), 0)
        else:
            parent = self._state(ids[:-1])
            token = np.asarray([[parent.last]], np.int32)
            _, caches = self._step(
                token, np.asarray([[ids[-1]]], np.int32), parent.pos, parent.caches
            )
            state = _State(_numpy(caches), ids[-1], parent.pos + 1)
        self._states[ids] = state
        return state

    def _keep(
        self, key: tuple[int, ...], parent: _State, labels: np.ndarray, caches: dict[str, Any]
    ) -> None:
        """Each row's caches as the state of its prefix + label (the next extension of it is
        then one step)."""
        caches = _numpy(caches)
        for r, label in enumerate(labels.tolist()):
            if label == self.tokenizer.eos_id:
                continue
            child = (*key, int(label))
            if child not in self._states:
                row = {
                    k: _take(v, self.sig.batch_axis(self.sig.caches[k][0]), r)
                    for k, v in caches.items()
                }
                self._states[child] = _State(row, int(label), parent.pos + 1)

    def forget(self) -> None:
        """Drop the prefixes' caches (between utterances: no two share a history)."""
        self._states.clear()


def label_log_probs(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """log softmax(logits)[label] of each row [rows], float64, from logits [rows, V]: the exp of
    the shifted float32 logits summed in float64 (the float64 log-softmax of the whole row, of
    which one entry is read, took 15 times as long for 32 rows of 30,733 words). Agrees with
    `log_softmax64` to about 1e-6."""
    z = np.asarray(logits, np.float32)
    top = z.max(axis=1, keepdims=True)
    total = np.exp(z - top).sum(axis=1, dtype=np.float64)
    picked = np.take_along_axis(z, labels.reshape(-1, 1).astype(np.int64), 1)[:, 0]
    return (picked - top[:, 0]).astype(np.float64) - np.log(total)


@dataclass
class _State:
    caches: dict[str, np.ndarray]
    last: int
    """The token fed next (the prefix's last word, or BOS)."""
    pos: int


def _numpy(caches: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in caches.items()}


def _repeat(a: np.ndarray, axis: int, rows: int) -> np.ndarray:
    return np.repeat(np.asarray(a), rows, axis=axis)


def _take(a: np.ndarray, axis: int, row: int) -> np.ndarray:
    return np.take(a, [row], axis=axis)


# --------------------------------------------------------------------------- opening one


@dataclass(frozen=True)
class LmSource:
    """Where a language model comes from: an exported artifact, or a run's checkpoint (with
    its spec and experiment); `scores` as `LanguageModel.scores`."""

    artifact: Path | None = None
    source: Source | None = None
    scores: str | None = None
    """None: raw for a scoring artifact, normalised otherwise."""


def open_language_model(lm: LmSource) -> LanguageModel:
    """The scorer of an artifact, or of a checkpoint restored on its backend."""
    if lm.artifact is not None:
        return _from_artifact(lm.artifact, lm.scores)
    if lm.source is None:
        raise UsageError("no language model given", code="missing-option")
    return _from_checkpoint(lm.source, lm.scores or NORMALIZED)


def _from_artifact(path: Path, scores: str | None) -> LanguageModel:
    from seqc.backends.api import sentence_scorer
    from seqc.run.export.artifact import load_artifact, step_functions

    art = load_artifact(path)
    sig = art.signature
    raw = sig.score_input is not None
    if scores == NORMALIZED and raw:
        raise UsageError(
            f"{path} scores given words without normalising (exported with normalize = "
            "false); it has no logits to normalise over",
            code="scoring-artifact",
            hint="use its raw scores (--lm-scores raw), or export the LM with normalize = true",
        )
    if scores == RAW and not raw:
        raise UsageError(
            f"{path} gives logits over the vocabulary; raw scores come from a scoring export",
            code="not-a-scoring-artifact",
            hint="export the self-normalised LM with onnx(normalize = false)",
        )
    tok, _ = art.tokenizers()
    packed = art.manifest.get("packed", True)  # before the manifest said: text LMs were packed
    fns = step_functions(art)
    return LanguageModel(
        fns,
        sig,
        tok,
        RAW if raw else NORMALIZED,
        str(path),
        start=tok.eos_id if packed else tok.bos_id,
        sequence=sentence_scorer(fns),
    )


def _from_checkpoint(source: Source, scores: str) -> LanguageModel:
    from seqc.backends import registry
    from seqc.compiler.incremental import incremental, stepping_inputs
    from seqc.compiler.scoring import SCORE_OUTPUT, scoring_graph, sequence_graph
    from seqc.compiler.step_signature import StepSignature
    from seqc.run.session import open_session
    from seqc.run.weights.restore import restore, run_backend

    if source.spec is None or source.experiment is None:
        raise UsageError(
            "a language model's checkpoint needs its spec and experiment", code="missing-option"
        )
    session = open_session(
        source.spec,
        source.experiment,
        list(source.overrides),
        cache_dir=source.cache_dir,
        task=source.task,
    )
    run_dir = source.run_dir or Path("runs") / source.experiment
    restored = restore(session, source.checkpoint or run_dir, run_backend(session, source.backend))
    params = {k: np.asarray(v) for k, v in dict(restored.state["params"]).items()}
    graph = session.graph
    labels, _ = session.compiled.labels
    if scores == RAW:
        program = incremental(
            scoring_graph(graph), [*stepping_inputs(graph), SCORE_INPUT], SCORE_OUTPUT
        )
    else:
        program = incremental(graph, stepping_inputs(graph))
    whole = program.sequence = sequence_graph(graph, normalize=scores == NORMALIZED)
    sig = StepSignature.of(
        program,
        session.compiled.fields,
        score_field=labels if scores == RAW else None,
        label_field=labels,
    )
    backend = registry.backend(restored.model.backend)
    fns = backend.step_functions(program, params)

    def sequence(feeds: Mapping[str, np.ndarray]) -> np.ndarray:
        """The scores of `feeds` [B, T], run at T rounded up to a bucket (the backend compiles
        once per shape; a sentence's scores do not depend on the padding after it)."""
        length = next(iter(feeds.values())).shape[1]
        pad = [(0, 0), (0, buffer_length(length) - length)]
        padded = {k: np.pad(np.asarray(v), pad) for k, v in feeds.items()}
        return np.asarray(backend.run(whole, params, padded)[0])[:, :length]

    name = f"{source.experiment} ({run_dir})"
    tok = session.pipeline.tokenizer
    start = tok.eos_id if session.pipeline.packed else tok.bos_id
    return LanguageModel(fns, sig, tok, scores, name, start=start, sequence=sequence)


def lm_at(path: Path) -> LmSource:
    """The LM a `decode = beam(lm = "...")` names: an exported artifact's folder (it holds
    manifest.json), or a run directory (run.json: its frozen spec and experiment)."""
    import json

    from seqc.run.weights.restore import Source
    from seqc.spec.errors import FileError

    if (path / "manifest.json").is_file():
        return LmSource(artifact=path)
    record = path / "run.json"
    if not record.is_file():
        raise FileError(
            f"no language model at {path}",
            path=str(path),
            code="file-not-found" if not path.exists() else "not-a-language-model",
            hint="give an exported LM's folder (seqc export) or a trained lm task's run directory",
        )
    run = json.loads(record.read_text(encoding="utf-8"))
    source = Source(spec=path / run["spec"], experiment=run["experiment"], run_dir=path,
                    task=run.get("task"))  # fmt: skip
    return LmSource(source=source)


_OPEN: dict[str, LanguageModel] = {}
"""LMs a strategy named, by path: a run's dev evaluations open the same one each time."""


def strategy_fusion(
    strategy: DecodeConfig | None, tokenizer: Tokenizer
) -> WordFusion | TokenFusion | None:
    """The shallow fusion a task's `decode = beam(lm = ...)` asks for, or None."""
    from seqc.compiler.config import Beam

    if not isinstance(strategy, Beam) or strategy.lm is None:
        return None
    key = str(Path(strategy.lm).resolve())
    lm = _OPEN.get(key)
    if lm is None:
        lm = _OPEN[key] = open_language_model(lm_at(Path(strategy.lm)))
    return fusion_of(lm, tokenizer, strategy.lm_weight, strategy.length_bonus)


def fusion_of(
    lm: LanguageModel, tokenizer: Tokenizer, weight: float, bonus: float
) -> WordFusion | TokenFusion:
    """How `lm` fuses into a recogniser with `tokenizer`: at every token where it shares the
    recogniser's vocabulary (a subword LM of the same SentencePiece model), else a word LM at
    word boundaries (`seqc.run.decoding.fusion`)."""
    from seqc.data.tokenizers import same_tokenizer
    from seqc.run.decoding.fusion import TokenFusion, WordFusion

    if same_tokenizer(lm.tokenizer, tokenizer):
        return TokenFusion(lm, tokenizer, weight, bonus)
    return WordFusion(lm, tokenizer, weight, bonus)


def fuse_into(gen: Any, lm: LmSource, weight: float, bonus: float) -> LanguageModel:
    """Shallow fusion of `lm` into a speech model's beam search: `gen`'s transcriber ranks by
    its own score plus `weight * log p_LM + bonus` per word from now on (`seqc decode --lm`,
    `seqc serve --lm`). A model that reads text, or an attention decoder set to decode
    greedily, is a usage error."""
    from seqc.compiler.config import Beam

    listen = gen.transcriber
    if listen is None:
        raise UsageError(
            "--lm fuses a word LM into a speech model's beam search; this model reads text",
            code="not-speech",
        )
    if listen.logits is None and not isinstance(listen.strategy, Beam):
        raise UsageError(
            "shallow fusion works in beam search; this attention decoder decodes greedily",
            code="fusion-needs-beam",
            hint="--set TASK.decode=beam(width = 4) (a CTC model searches with a beam of "
            "8 when its task decodes greedily)",
        )
    model = open_language_model(lm)
    listen.fusion = fusion_of(model, gen.target_tokenizer, weight, bonus)
    return model
