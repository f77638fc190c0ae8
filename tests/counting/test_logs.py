"""The one logging set-up: every record, Tally's or a library's, is one key=value line."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from counting import logs

# The loggers the tests write to. Another test's set-up in the same process may have given one a
# handler of its own and cut it off from the root: Airflow's logging sends `uvicorn.error` to its
# handler, not up, once Airflow is imported (the DAG tests, run before these on an xdist worker);
# a uvicorn server started in process (tests/servers.py) gives `uvicorn` a handler and stops it
# propagating.
LOGGERS = ("tally.test", "uvicorn", "uvicorn.error")


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """`logs.configure` on a stream, the loggers written to as in a process of their own (no
    handlers, propagating to the root); everything restored after."""
    stream = io.StringIO()
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    named = [logging.getLogger(name) for name in LOGGERS]
    states = [(logger.handlers[:], logger.propagate, logger.level, logger.disabled) for logger in named]
    for logger in named:
        logger.handlers.clear()
        logger.propagate = True
        logger.disabled = False
        logger.setLevel(logging.NOTSET)
    logs.configure("ingest", "INFO", stream)
    yield stream
    root.handlers[:] = saved
    root.setLevel(level)
    for logger, (handlers, propagate, own_level, disabled) in zip(named, states, strict=True):
        logger.handlers[:] = handlers
        logger.propagate = propagate
        logger.disabled = disabled
        logger.setLevel(own_level)


def test_a_fact_is_one_line_with_the_leading_fields_then_its_own(lines: io.StringIO) -> None:
    logs.Log("tally.test").warning("broker_unavailable", error='refused "127.0.0.1:9092"', retry_in_s=0.2)
    [line] = lines.getvalue().splitlines()
    fields = logs.parse(line)
    assert list(fields)[: len(logs.LEADING_FIELDS)] == list(logs.LEADING_FIELDS)
    assert fields["level"] == "warning" and fields["process"] == "ingest" and fields["logger"] == "tally.test"
    assert fields["event"] == "broker_unavailable"
    assert fields["error"] == 'refused "127.0.0.1:9092"' and fields["retry_in_s"] == "0.2"


def test_a_librarys_plain_message_and_its_traceback_stay_on_one_line(lines: io.StringIO) -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
    [line] = lines.getvalue().splitlines()
    fields = logs.parse(line)
    assert fields["event"] == "message" and fields["text"] == "Exception in ASGI application"
    assert "ValueError: bad\nvalue" in fields["exception"]


def test_records_below_the_level_are_left_out(lines: io.StringIO) -> None:
    logs.Log("tally.test").info("kept")
    logging.getLogger("tally.test").debug("dropped")
    assert [logs.parse(line)["event"] for line in lines.getvalue().splitlines()] == ["kept"]
