"""The server's settings: batching, limits and who may call it, read once from the command line.

Why a frozen dataclass: the app, the batchers and the routes read the same values, and a test
builds one directly (`ServeConfig(max_batch_size=1)`) without going through the command line.
The defaults are those `seqc serve --help` shows (`seqc.cli.serve`).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_BATCH_SIZE = 16
DEFAULT_MAX_DELAY_MS = 5.0
DEFAULT_MAX_QUEUE = 256
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_BODY_BYTES = 8 << 20
"""8 MiB: about four minutes of 16 kHz 16-bit audio, or many thousand sentences."""
DEFAULT_MAX_TEXT_CHARS = 2000
DEFAULT_MAX_DECODE_LENGTH = 256
DEFAULT_MAX_ITEMS = 256
"""Sentences (or utterances) in one request at most."""


@dataclass(frozen=True)
class ServeConfig:
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    """Sources decoded together at most (1: no batching)."""
    max_delay_ms: float = DEFAULT_MAX_DELAY_MS
    """How long a batch waits for more sources after its first arrived."""
    max_queue: int = DEFAULT_MAX_QUEUE
    """Sources waiting per model and route kind; past it, 503 with Retry-After."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    """A request not answered within this gets 504, and its waiting work is dropped."""
    threads: int = 1
    """Batches one model runs at once (each in a thread of its own)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    max_decode_length: int = DEFAULT_MAX_DECODE_LENGTH
    max_items: int = DEFAULT_MAX_ITEMS
    api_key: str | None = None
    """When set, every route but the health checks and the page needs `Authorization: Bearer`."""
    cors_origins: tuple[str, ...] = ()
