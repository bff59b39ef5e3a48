"""The attempt-end log record is built without ``Logger.log`` (issue 15): it must still
be a record handlers, formatters and filters treat like any other."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from queue_core.worker.log import fast_record


@pytest.fixture
def logger() -> logging.Logger:
    return logging.getLogger("queue_core.worker.test_fast_record")


def test_formats_like_a_record_from_makeRecord(logger: logging.Logger) -> None:
    fmt = logging.Formatter(
        "%(name)s|%(levelname)s|%(levelno)d|%(message)s|%(process)d|%(pathname)s|%(lineno)d"
    )
    made = logger.makeRecord(logger.name, logging.WARNING, "(unknown file)", 0, "hello", (), None)
    fast = fast_record(logger, logging.WARNING, "hello", {"event": "x"})
    assert fmt.format(fast) == fmt.format(made)
    assert fast.event == {"event": "x"}  # type: ignore[attr-defined]
    assert fast.getMessage() == "hello" and fast.args == ()


def test_time_and_thread_are_those_of_the_call(logger: logging.Logger) -> None:
    before = time.time()
    rec = fast_record(logger, logging.INFO, "m", {})
    after = time.time()
    assert before <= rec.created <= after
    assert rec.msecs == int((rec.created - int(rec.created)) * 1000)
    seen: list[logging.LogRecord] = []
    t = threading.Thread(
        target=lambda: seen.append(fast_record(logger, logging.INFO, "m", {})), name="other-t"
    )
    t.start()
    t.join()
    assert seen[0].threadName == "other-t" and seen[0].thread == t.ident
    assert rec.threadName == threading.current_thread().name


def test_handled_through_the_loggers_filters(logger: logging.Logger) -> None:
    got: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    logger.addFilter(lambda r: r.getMessage() != "drop")
    try:
        logger.handle(fast_record(logger, logging.INFO, "keep", {}))
        logger.handle(fast_record(logger, logging.INFO, "drop", {}))
    finally:
        logger.removeHandler(handler)
        logger.filters.clear()
    assert got == ["keep"]
