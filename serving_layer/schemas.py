"""Models of the serving API's error answers, for its OpenAPI description."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.responses import JSONResponse

from serving_layer.errors import StoreUnavailable


class FieldError(BaseModel):
    """A refused parameter or an unavailable store: its name, the reason, the value given."""

    field: str
    reason: str
    value: Any = None


class ErrorAnswer(BaseModel):
    errors: list[FieldError]


ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorAnswer, "description": "missing or wrong admin key"},
    422: {"model": ErrorAnswer, "description": "a parameter is refused: its field and the reason"},
    503: {"model": ErrorAnswer, "description": "no store can answer (Redis down and no baseline)"},
}


def error_answer(status: int, field: str, reason: str) -> JSONResponse:
    """An error answer: the refused field (or the store) and the reason."""
    return JSONResponse(status_code=status, content={"errors": [{"field": field, "reason": reason}]})


def unavailable(exc: StoreUnavailable) -> JSONResponse:
    """The 503 answer when no store can answer."""
    return error_answer(503, "redis", str(exc))
