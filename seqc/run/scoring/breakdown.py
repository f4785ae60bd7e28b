"""Error rates per group of a manifest field (`seqc eval --by voice`): how a recogniser does on
each voice, engine or any other field its manifest lines carry, beside the overall figure.

Why: a recogniser's overall WER hides the speaker it fails on. The spoken-numbers recogniser
scored dev WER 1.10 on the voices it trained on and 16.18 on flite's `slt`, a voice it never
heard; a per-voice table is how that shows up before anyone deploys it. Each group's rate is
corpus-level within the group (its edits over its reference words, `seqc.run.scoring.wer`), so
the groups' counts add up to the overall figure's.

The field is checked before anything is decoded: a field no line of the split has is an error
naming the manifest and the fields it does have; lines without it are grouped as `(none)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from seqc.data.errors import DataError
from seqc.data.readers import Example
from seqc.run.scoring.wer import error_rates
from seqc.spec.errors import UsageError, did_you_mean

MISSING = "(none)"
"""The group of the lines that lack the field."""


def check_by(
    by: Sequence[str], kind: str, task: str, examples: Sequence[Example], split: str
) -> None:
    """`seqc eval --by FIELD...`, before any scoring (of a checkpoint or an artifact): a speech
    task's (`kind` asr), each field on the split's lines (`check_field`)."""
    if not by:
        return
    if kind != "asr":
        raise UsageError(
            f"--by groups a speech task's WER and CER; task `{task}` is not one",
            code="by-needs-speech",
            hint="leave out --by",
        )
    for field in by:
        check_field(examples, field, split)


def check_field(examples: Sequence[Example], field: str, split: str) -> None:
    """`field` is on at least one of the split's lines, else a `DataError` at its manifest."""
    have: set[str] = set()
    for ex in examples:
        if ex.fields and field in ex.fields:
            return
        have.update(ex.fields or ())
    where = examples[0].file if examples else f"the {split} split"
    raise DataError(
        f"no line of the {split} split has a field `{field}` to group scores by",
        code="unknown-field",
        path=where,
        expected=f"a field `{field}` on the manifest's lines",
        found=(
            f"the fields {', '.join(sorted(have))}"
            if have
            else "no fields beyond the audio path and transcript"
        ),
        suggestion=did_you_mean(field, sorted(have)),
        hint="--by takes any field of the manifest's JSON lines (voice, engine, rate, ...)",
    )


def group_of(example: Example, field: str) -> str:
    """The example's group: its field's value as text (`MISSING` if it has none)."""
    value = (example.fields or {}).get(field)
    return MISSING if value is None else str(value)


def rates_by(
    groups: Sequence[str], hyps: Sequence[str], refs: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Each group's WER, CER and counts (`error_rates`), plus its `utterances`, largest group
    first (ties by name)."""
    members: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    out: dict[str, dict[str, Any]] = {}
    for g, rows in sorted(members.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        rates = error_rates([hyps[i] for i in rows], [refs[i] for i in rows])
        out[g] = {**rates, "utterances": len(rows)}
    return out


def table(field: str, rates: dict[str, dict[str, Any]]) -> list[str]:
    """The per-group figures as aligned text lines, a header first."""
    width = max([len(field), *(len(g) for g in rates)])
    lines = [f"  {field:<{width}}  {'utterances':>10}  {'words':>7}  {'wer':>7}  {'cer':>7}"]
    for g, r in rates.items():
        lines.append(
            f"  {g:<{width}}  {r['utterances']:>10}  {r['words']:>7}"
            f"  {r['wer']:>7.2f}  {r['cer']:>7.2f}"
        )
    return lines
