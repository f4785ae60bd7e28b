"""Generation inside TensorFlow graphs: greedy, sampling and beam search, each a `tf.while_loop`.

The in-graph mirror of `seqc.run.decoding.search.Decoder`, with the same constructor and
`generate`, so a caller swaps one for the other. Each step recomputes the whole forward pass over
a fixed-length buffer and reads the logits at the current position (causal attention makes the
later positions irrelevant), as the reference does; no key/value cache. The whole loop of one
`generate` call is one graph run, not one run per step.

One `tf.function` per (strategy kind, buffer length, beam width): prompt and source lengths,
`max_length`, the seed and the sampling knobs are tensors, so one trace serves every prompt
whose buffer rounds up to the same length. Log-probabilities are computed in float64 from the
model's logits, as the reference does, so that greedy and beam search take the reference's
decisions and not ones flipped by float32 roundoff near a tie. Sampling draws from TF's stateless
generator: reproducible per seed, but not the reference's numpy stream.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
import tensorflow as tf

from seqc.compiler.compile import CompiledTask
from seqc.compiler.config import Beam, DecodeConfig, Greedy, Sample
from seqc.compiler.signature import buffer_length

KINDS = ("greedy", "sample", "beam")
NEG_INF = float("-inf")

UNSHAPED = Sample(max_length=0, temperature=1.0, top_k=0, top_p=1.0, seed=0)
"""The sampling knobs fed to the greedy loop, which reads none of them: its graph has the
sampling loop's inputs (one signature for both), so it is given values that leave the
distribution as it is."""


class Forward(Protocol):
    """What a decoder reads of its model: the task (its kind) and the forward pass, traced into
    the decoding loop. `TfModel` (`seqc.backends.tf.train`) is one, and builds its decoder
    (`TfModel.decoder`): naming what is read, not the class, keeps this module below the
    model's instead of the two importing each other."""

    task: CompiledTask

    def forward(
        self, arrays: Mapping, rng: tf.Tensor | None, training: bool, params: Mapping | None = None
    ) -> tf.Tensor:
        """The model's logits for a batch's arrays (`TfModel.forward`)."""
        ...


class TfDecoder:
    """Decodes with a `TfModel` (a language model or an encoder-decoder; any `Forward`), whole
    loops in-graph.

    `params` is the model's dict of variables (read at every call, so a decoder made before
    training sees the trained values) or of arrays by layer path.
    """

    def __init__(
        self, model: Forward, params: Mapping[str, Any], bos: int, eos: int, pad: int
    ) -> None:
        self.model, self.task = model, model.task.kind
        self.bos, self.eos, self.pad = bos, eos, pad
        self.given_params = params
        """The params as given: a search that must call back into Python at every step (shallow
        fusion) loops over the same model and params outside the graph instead
        (`seqc.run.decoding.decoders.with_fusion`)."""
        # Arrays become tensors once; variables stay variables, read at each call.
        self.params = {
            k: v if isinstance(v, tf.Variable) else tf.convert_to_tensor(v)
            for k, v in params.items()
        }
        self._params_spec = {k: tf.TensorSpec(v.shape, v.dtype) for k, v in self.params.items()}
        self._compiled: dict[tuple[str, int, int], Any] = {}

    # ---------------------------------------------------------------- API
    def generate(
        self,
        strategy: DecodeConfig,
        prompt: list[int],
        src: list[int] | None = None,
        seed: int = 0,
        stop_at_eos: bool = True,
    ) -> list[int]:
        """Token ids after the prompt (LM) or of the translation (seq2seq), without BOS.

        With `stop_at_eos` False a language model runs on past the end of a line (its EOS is
        kept in the output), which is what a multi-line sample wants. Beam search always ends a
        hypothesis at EOS, as the reference does."""
        if not isinstance(strategy, Greedy | Sample | Beam):
            raise ValueError(
                f"decode strategy `{strategy.kind}`: expected one of {', '.join(KINDS)}"
            )
        if self.task == "seq2seq" and src is None:
            raise ValueError("a seq2seq decoder needs `src`, the source token ids")
        max_len = strategy.max_length
        start = [self.bos, *prompt]
        length = buffer_length(len(start) + max_len)
        buf = np.full(length, self.pad, np.int32)
        buf[: len(start)] = start
        src_arr = np.asarray(src if src is not None else [], np.int32)
        common = (self.params, buf, src_arr, np.int32(len(start)), np.int32(max_len))
        if isinstance(strategy, Beam):
            alpha = np.float64(strategy.length_penalty)
            row, n = self._function("beam", length, strategy.width)(*common, alpha)
        else:
            knobs = UNSHAPED if isinstance(strategy, Greedy) else strategy
            row, n = self._function(strategy.kind, length, 1)(
                *common,
                np.bool_(stop_at_eos),
                np.int64(seed or knobs.seed),
                np.float64(knobs.temperature),
                np.int32(knobs.top_k),
                np.float64(knobs.top_p),
            )
        return row.numpy()[len(start) : len(start) + int(n)].tolist()

    @property
    def trace_count(self) -> int:
        """Graphs built so far, over every (kind, length, width): what a retrace would raise."""
        return sum(f.experimental_get_tracing_count() for f in self._compiled.values())

    # ---------------------------------------------------------------- graphs
    def _function(self, kind: str, length: int, width: int) -> Any:
        """The compiled loop for this key, built on first use with a fixed signature."""
        key = (kind, length, width)
        if key not in self._compiled:
            i32, f64 = tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float64)
            common = [
                self._params_spec,
                tf.TensorSpec([length], tf.int32),  # BOS, prompt, then pad
                tf.TensorSpec([None], tf.int32),  # source ids (empty for an LM)
                i32,  # start length (BOS + prompt)
                i32,  # max_length
            ]
            if kind == "beam":
                body: Callable[..., Any] = self._beam_fn(width)
                signature = [*common, f64]
            else:
                body = self._token_fn(greedy=kind == "greedy")
                signature = [*common, tf.TensorSpec([], tf.bool), tf.TensorSpec([], tf.int64)]
                signature += [f64, i32, f64]
            self._compiled[key] = tf.function(body, autograph=False, input_signature=signature)
        return self._compiled[key]

    def _log_probs(
        self, params: dict, rows: tf.Tensor, src: tf.Tensor, pos: tf.Tensor
    ) -> tf.Tensor:
        """Float64 log-probabilities [rows, V] of the next token after rows[:, :pos + 1]."""
        if self.task == "lm":
            arrays = {"inputs": rows}
        else:
            arrays = {
                "src": src,
                "src_mask": src != self.pad,
                "tgt_in": rows,
                "tgt_mask": rows != self.pad,
            }
        logits = self.model.forward(arrays, None, training=False, params=params)
        logits = tf.cast(tf.gather(logits, pos, axis=1), tf.float64)
        logits -= tf.reduce_max(logits, axis=-1, keepdims=True)
        return logits - tf.math.log(tf.reduce_sum(tf.exp(logits), axis=-1, keepdims=True))

    def _token_fn(self, greedy: bool) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
        """Greedy or sampled decoding of one row: returns (buffer row, tokens generated)."""

        def run(
            params: dict,
            buf: tf.Tensor,
            src: tf.Tensor,
            start_len: tf.Tensor,
            max_len: tf.Tensor,
            stop_at_eos: tf.Tensor,
            seed: tf.Tensor,
            temperature: tf.Tensor,
            top_k: tf.Tensor,
            top_p: tf.Tensor,
        ) -> tuple[tf.Tensor, tf.Tensor]:
            base_seed = tf.stack([seed, tf.constant(0, tf.int64)])
            src_rows = src[None]

            def cond(step: tf.Tensor, rows: tf.Tensor, n: tf.Tensor, done: tf.Tensor) -> Any:
                return (step < max_len) & ~done

            def body(step: tf.Tensor, rows: tf.Tensor, n: tf.Tensor, done: tf.Tensor) -> tuple:
                pos = start_len - 1 + step
                logp = self._log_probs(params, rows, src_rows, pos)[0]
                if greedy:
                    tok = tf.argmax(logp, output_type=tf.int32)
                else:
                    step_seed = tf.random.experimental.stateless_fold_in(base_seed, step)
                    tok = _sample(logp, temperature, top_k, top_p, step_seed)
                stop = stop_at_eos & tf.equal(tok, self.eos)
                rows = tf.where(stop, rows, _put(rows, pos + 1, tok[None]))
                return step + 1, rows, n + tf.cast(~stop, tf.int32), stop

            zero = tf.constant(0, tf.int32)
            state = (zero, buf[None], zero, tf.constant(False))
            _, rows, n, _ = tf.while_loop(cond, body, state)
            return rows[0], n

        return run

    def _beam_fn(self, width: int) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
        """Beam search of `width`, step for step the reference's `Decoder._beam`.

        Each step ranks the top width + 1 continuations of every beam by total log-probability
        (a stable sort: ties keep beam-major order, as Python's sort does), then walks the
        ranking until `width` open beams are collected; the EOS candidates passed on the way
        finish. In-graph the walk is a cumulative count of non-EOS candidates: the j-th open
        beam is the candidate where that count first reaches j + 1, and an EOS candidate is
        passed iff fewer than `width` open ones precede it. Of the finished hypotheses only the
        count and the best (the first of the highest score) are kept: that is all the stopping
        rule and the final pick read. Before the first step only beam 0 is alive; the others
        start at -inf, so their candidates rank last and are never reached (beam 0 alone has at
        least `width` non-EOS candidates).
        """
        n_cand = width * (width + 1)

        def penalty(n: tf.Tensor, alpha: tf.Tensor) -> tf.Tensor:
            return ((5.0 + tf.cast(n, tf.float64)) / 6.0) ** alpha

        def run(
            params: dict,
            buf: tf.Tensor,
            src: tf.Tensor,
            start_len: tf.Tensor,
            max_len: tf.Tensor,
            alpha: tf.Tensor,
        ) -> tuple[tf.Tensor, tf.Tensor]:
            src_rows = tf.tile(src[None], [width, 1])
            parents_of = tf.repeat(tf.range(width), width + 1)  # flat candidate -> its beam
            ranks = tf.range(1, width + 1)[:, None]

            def cond(step: tf.Tensor, *state: tf.Tensor) -> Any:
                done = state[-1]
                return (step < max_len) & ~done

            def body(
                step: tf.Tensor,
                rows: tf.Tensor,
                logprob: tf.Tensor,
                n_finished: tf.Tensor,
                best_score: tf.Tensor,
                best_row: tf.Tensor,
                best_len: tf.Tensor,
                done: tf.Tensor,
            ) -> tuple:
                pos = start_len - 1 + step
                logp = self._log_probs(params, rows, src_rows, pos)
                top_logp, top_tok = tf.math.top_k(logp, k=width + 1)
                alive = logprob > NEG_INF
                totals = tf.where(alive[:, None], logprob[:, None] + top_logp, NEG_INF)
                # top_k over every candidate: descending, ties to the lower (beam-major) index.
                ranked, order = tf.math.top_k(tf.reshape(totals, [n_cand]), k=n_cand)
                toks = tf.gather(tf.reshape(top_tok, [n_cand]), order)
                parents = tf.gather(parents_of, order)
                is_eos = tf.equal(toks, self.eos)
                opens = tf.cumsum(tf.cast(~is_eos, tf.int32))  # open candidates up to here
                # The new beams: the j-th open candidate in ranking order, j < width.
                picks = tf.argmax(
                    tf.cast(~is_eos[None, :] & tf.equal(opens[None, :], ranks), tf.int32),
                    axis=1,
                    output_type=tf.int32,
                )
                # The EOS candidates ranked before the width-th open one finish, scored at
                # the length of their parent (EOS not counted); the first is their best.
                finishing = is_eos & (opens < width)
                first = tf.argmax(tf.cast(finishing, tf.int32), output_type=tf.int32)
                score = ranked[first] / penalty(step, alpha)
                better = tf.reduce_any(finishing) & (score > best_score)
                best_score = tf.where(better, score, best_score)
                best_row = tf.where(better, rows[parents[first]], best_row)
                best_len = tf.where(better, step, best_len)
                n_finished += tf.reduce_sum(tf.cast(finishing, tf.int32))

                rows = _put(
                    tf.gather(rows, tf.gather(parents, picks)), pos + 1, tf.gather(toks, picks)
                )
                logprob = tf.gather(ranked, picks)
                best_open = tf.reduce_max(logprob) / penalty(step + 1, alpha)
                done = (n_finished >= width) & (best_score >= best_open)
                return step + 1, rows, logprob, n_finished, best_score, best_row, best_len, done

            zero = tf.constant(0, tf.int32)
            first_alive = tf.one_hot(0, width, on_value=0.0, off_value=NEG_INF, dtype=tf.float64)
            state = (
                zero,
                tf.tile(buf[None], [width, 1]),
                first_alive,
                zero,
                tf.constant(NEG_INF, tf.float64),
                buf,
                zero,
                tf.constant(False),
            )
            step, rows, _, n_finished, _, best_row, best_len, _ = tf.while_loop(cond, body, state)
            # No finished hypothesis: the best open beam, which the ranking put first.
            found = n_finished > 0
            return tf.where(found, best_row, rows[0]), tf.where(found, best_len, step)

        return run


def _put(rows: tf.Tensor, col: tf.Tensor, toks: tf.Tensor) -> tf.Tensor:
    """`rows` with column `col` set to `toks` (one per row), without a scatter."""
    at = tf.equal(tf.range(tf.shape(rows)[1]), col)[None, :]
    return tf.where(at, toks[:, None], rows)


def _sample(
    logp: tf.Tensor,
    temperature: tf.Tensor,
    top_k: tf.Tensor,
    top_p: tf.Tensor,
    seed: tf.Tensor,
) -> tf.Tensor:
    """One token from `logp` [V] reshaped as the reference's `_sample`: temperature (at least
    1e-6), then top-k (ties with the k-th kept), then nucleus top-p over what is left."""
    logits = logp / tf.maximum(temperature, 1e-6)
    vocab = tf.size(logits)
    cut = tf.sort(logits, direction="DESCENDING")[tf.clip_by_value(top_k, 1, vocab) - 1]
    logits = tf.where((top_k > 0) & (logits < cut), tf.constant(NEG_INF, tf.float64), logits)
    probs = tf.exp(logits - tf.reduce_max(logits))
    probs /= tf.reduce_sum(probs)
    order = tf.argsort(probs, direction="DESCENDING", stable=True)
    ranked = tf.gather(probs, order)
    keep_ranked = (tf.cumsum(ranked) - ranked < top_p) | (top_p >= 1.0)
    keep = tf.scatter_nd(order[:, None], keep_ranked, [vocab])
    probs = tf.where(keep, probs, 0.0)
    probs /= tf.reduce_sum(probs)
    draw = tf.random.stateless_categorical(tf.math.log(probs)[None], 1, seed=seed, dtype=tf.int32)
    return draw[0, 0]
