"""The `sinusoid` primitive's values: the sine/cosine position signal (Vaswani et al.).

Why a primitive, and not sin and cos ops in the lowering: the backends want it computed
differently. Training backends gather rows of a float64 table rounded once to float32, so the
signal is exact whatever the compute dtype (in bfloat16, positions above 256 would round to even
numbers and the angles lose all precision). A deployed file is better off computing it from the
positions with a few float32 ops than storing `max_length` x d floats, which outweigh a small
model's weights; `split_frequencies` keeps that computation within float32 rounding of the table.

`attrs` are the op's: `d` (even), `min_timescale`, `max_timescale`, `max_length` (positions the
table covers).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy loads when a function needs it: `seqc check` lowers without it
    import numpy as np


def frequencies(attrs: Mapping[str, Any]) -> np.ndarray:
    """float64[d/2]: 1 / timescale, geometric from 1 / min_timescale to 1 / max_timescale."""
    import numpy as np

    half = int(attrs["d"]) // 2
    lo, hi = float(attrs["min_timescale"]), float(attrs["max_timescale"])
    log_step = math.log(hi / lo) / max(half - 1, 1)
    return (1.0 / lo) * np.exp(-log_step * np.arange(half, dtype=np.float64))


def table(attrs: Mapping[str, Any]) -> np.ndarray:
    """float32[max_length, d]: [sin(t * f), cos(t * f)] for t = 0 .. max_length - 1, computed in
    float64 (cached: every trace of a model asks for the same table; do not write to it)."""
    key = tuple(attrs[k] for k in ("d", "min_timescale", "max_timescale", "max_length"))
    return _table(*key)


@functools.lru_cache(maxsize=16)
def _table(d: int, lo: float, hi: float, length: int) -> np.ndarray:
    import numpy as np

    attrs = {"d": d, "min_timescale": lo, "max_timescale": hi}
    angles = np.arange(length, dtype=np.float64)[:, None] * frequencies(attrs)[None, :]
    out = np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)
    out.flags.writeable = False
    return out


def split_frequencies(attrs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """float32 `hi`, `lo` with hi + lo = the frequencies, `hi` so short that t * hi is exact in
    float32 for every position t < max_length.

    Why: t * f rounded to float32 is off by up to t * f * 2^-24 (5e-4 radians at t = 4095); as
    A + B with A = t * hi exact and B = t * lo tiny, sin(A + B) = sin A cos B + cos A sin B is as
    close to the float64 table as float32 sin and cos of A are to the truth (about 1e-7).
    """
    import numpy as np

    f = frequencies(attrs)
    position_bits = max(int(attrs["max_length"]) - 1, 1).bit_length()
    bits = max(24 - position_bits, 1)  # significant bits of hi: t * hi fits float32's 24
    mantissa, exponent = np.frexp(f)
    hi = np.ldexp(np.round(np.ldexp(mantissa, bits)), exponent - bits)
    return hi.astype(np.float32), (f - hi).astype(np.float32)
