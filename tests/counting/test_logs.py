"""The one logging set-up: every record, Tally's or a library's, is one key=value line."""

from __future__ import annotations

import io
import logging

import pytest

from counting import logs


@pytest.fixture
def lines() -> io.StringIO:
    stream = io.StringIO()
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    logs.configure("ingest", "INFO", stream)
    yield stream
    root.handlers[:] = saved
    root.setLevel(level)


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
