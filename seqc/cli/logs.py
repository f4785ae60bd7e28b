"""Keeping the libraries' own log lines out of a command's output.

Unless `--debug` is given, the libraries the backends load (TensorFlow, XLA, absl, oneDNN,
LiteRT, gloo) are asked to keep their log lines to themselves, so the CLI shows only its own
messages: the environment for what reads it (`NATIVE_LOG_ENV`), a filter on file descriptor 2
for what writes there whatever the environment says (`quiet_native_logs`), and a handler on
Python's root logger for what logs through Python (`quiet_library_logs`). Errors always pass.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

NATIVE_LOG_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "GRPC_VERBOSITY": "ERROR", "GLOG_minloglevel": "2"}
"""Set (unless already set, or `--debug`) before any backend loads: TensorFlow's and XLA's C++
INFO and WARNING lines, gRPC's and glog's chatter stay out of the CLI's output."""

_NATIVE_NOISE = re.compile(
    rb"[IW]\d{4} \d+:\d+:\d+\.\d+ +\d+ [\w.+-]+:\d+\] "  # absl INFO/WARNING (oneDNN, XLA)
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|INFO: "  # LiteRT's own INFO lines ("Created TensorFlow Lite XNNPACK delegate")
    rb"|\[Gloo\] Rank \d+ is connected to"  # gloo's note as JAX's CPU collectives connect
    rb"|fully_quantize: \d+, inference_type"  # TFLite's MLIR quantizer says its settings
)
"""Lines that native libraries write to the process's stderr whatever the environment says:
TensorFlow logs oneDNN's notice while its library loads, before it reads TF_CPP_MIN_LOG_LEVEL,
and LiteRT logs at INFO with no setting to stop it. Errors (`E...`, `F...`) pass through."""


_quiet: dict[str, Any] = {"on": False, "undo": None}
"""Whether `quiet_native_logs` holds (no `--debug`), and the undo of `quiet_library_logs`, which
a heavy command adds (the light ones never import `logging`)."""


def quiet_native_logs() -> Callable[[], None]:
    """Keep native libraries' INFO and WARNING lines out of stderr; return the undo.

    The environment handles what reads it; for the rest, file descriptor 2 becomes a pipe whose
    lines a thread passes on to the real stderr unless they match `_NATIVE_NOISE`. Python's
    own `sys.stderr` writes to the real stderr directly (a terminal stays a terminal for the
    progress bar). A native crash may lose its last line on the way: `--debug` turns all of
    this off.
    """
    for key, value in NATIVE_LOG_ENV.items():
        os.environ.setdefault(key, value)
    try:
        sys.stderr.flush()
        real = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
    except OSError:  # no stderr to speak of (a closed descriptor): leave it alone
        return lambda: None
    python_stderr = sys.stderr
    sys.stderr = open(  # noqa: SIM115  (lives until the undo)
        os.dup(real), "w", encoding=python_stderr.encoding, errors="backslashreplace", buffering=1
    )

    def pump() -> None:
        pending, broken = b"", False
        while chunk := os.read(read_end, 1 << 16):
            *lines, pending = (pending + chunk).split(b"\n")
            kept = b"".join(line + b"\n" for line in lines if not _NATIVE_NOISE.match(line))
            if len(pending) > 1 << 16:  # no newline in sight: not a log line, pass it on
                kept, pending = kept + pending, b""
            try:
                if kept and not broken:
                    _write_all(real, kept)
            except OSError:  # the reader of stderr went away: keep draining, or writers block
                broken = True
        if pending and not broken:
            with contextlib.suppress(OSError):
                _write_all(real, pending)
        os.close(read_end)

    thread = threading.Thread(target=pump, name="seqc-native-stderr", daemon=True)
    thread.start()

    _quiet["on"] = True

    def undo() -> None:
        if _quiet["undo"] is not None:
            _quiet["undo"]()
        _quiet.update(on=False, undo=None)
        with contextlib.suppress(OSError, ValueError):  # a reader of stderr that went away
            sys.stderr.flush()
        os.dup2(real, 2)  # the pipe's last writer goes: the pump reads to its end and stops
        thread.join(timeout=5)
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.close()
        sys.stderr = python_stderr
        if not thread.is_alive():  # else a child still holds the pipe: the pump needs `real`
            os.close(real)

    return undo


def quiet_library_logs() -> Callable[[], None]:
    """Keep the Python log records of the libraries the backends load, and their Python
    warnings, out of stderr unless they are errors; return the undo.

    Why: `quiet_native_logs` filters what reaches file descriptor 2, but Python's `sys.stderr`
    goes to the real stderr directly, and with it every logging handler. absl adds one to the
    root logger at its first record (`logging.basicConfig`), and orbax and TensorFlow's
    SavedModel code log through absl: `WARNING:absl:...` lines; tensorboardX warns of each NaN
    scalar (`NaN or Inf found in input tensor.`). A handler of ours on the root logger, there
    first, stops that (absl and TensorFlow add none of their own when the root has one) and
    passes on errors, and seqc's own records, in the format absl's would have had."""
    import logging

    def shown(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or record.name.split(".")[0] == "seqc"

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
    handler.addFilter(shown)
    root = logging.getLogger()
    root.addHandler(handler)
    logging.captureWarnings(True)  # warnings.warn -> the `py.warnings` logger, filtered so

    def undo() -> None:
        logging.captureWarnings(False)
        root.removeHandler(handler)

    return undo


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def quiet_libraries_too() -> None:
    """Quiet the Python log records of the backends' libraries as well, while
    `quiet_native_logs` holds (no `--debug`): called as a heavy command loads (it imports the
    libraries that log; the light ones never import `logging`), undone with the native filter."""
    if _quiet["on"] and _quiet["undo"] is None:
        _quiet["undo"] = quiet_library_logs()
