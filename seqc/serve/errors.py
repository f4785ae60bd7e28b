"""What a request did wrong, as an HTTP status and a JSON body that names the field.

Why one type: every route (the inference protocol's and the task routes) turns bad input into
the same `{"error": ..., "field": ..., "code": ...}` body with a 4xx status, so a client (and a
test) reads one shape, and the server never answers a client's mistake with a 500.
"""

from __future__ import annotations

from typing import Any


class ServeError(Exception):
    """A request the server refuses: `status` (4xx, or 503/504 for load), what is wrong, the
    field of the request it is about (`inputs[0].datatype`), a stable `code`."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        field: str | None = None,
        code: str = "bad-request",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.message, "code": self.code}
        if self.field is not None:
            out["field"] = self.field
        return out


def bad(message: str, field: str | None = None, code: str = "bad-request") -> ServeError:
    """A 400: the request is malformed or asks for something the model cannot do."""
    return ServeError(400, message, field=field, code=code)
