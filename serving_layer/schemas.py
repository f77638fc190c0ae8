"""Models of the serving API's error answers, for its OpenAPI description."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


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
