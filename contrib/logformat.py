"""Log formats of ``queue-core worker --log-format text|json`` (SPEC §9).

:func:`configure_logging` is what the worker command calls; the formatters can be used
on their own handlers too::

    import logging
    from contrib.logformat import JsonFormatter

    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.getLogger("queue_core").addHandler(handler)

``text`` (the default) prints ``%(asctime)s %(levelname)s %(name)s: %(message)s``.
``json`` prints one JSON object per line: ``ts`` (ISO 8601 UTC), ``level``, ``logger``,
``message``, then the fields the worker attaches to the record (``extra={"event":
{...}}``): for an attempt end ``event``, ``job_id``, ``task``, ``attempt``, ``outcome``,
``reason``, ``action``, ``duration_ms``, ``queue``, ``worker_id`` and, when they apply,
``error_class``, ``error``, ``retry_in_s``, ``dead_reason``; ``exc`` holds a traceback.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, TextIO

from contrib.textsafe import printable
from queue_core import ConfigError
from queue_core.storage.urls import redactions

__all__ = [
    "LOG_FORMATS",
    "JsonFormatter",
    "RedactingFormatter",
    "TextFormatter",
    "configure_logging",
]

LOG_FORMATS = ("text", "json")
"""The values of ``--log-format``."""


class TextFormatter(logging.Formatter):
    """``%(asctime)s %(levelname)s %(name)s: %(message)s``, the date part computed once
    per second instead of once per record (same output as ``logging.Formatter``), control
    characters but newlines and tabs written as escapes (:func:`contrib.textsafe.printable`)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._second = -1
        self._date = ""

    def format(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:
            self._date = time.strftime("%Y-%m-%d %H:%M:%S", self.converter(record.created))
            self._second = second
        text = (
            f"{self._date},{int(record.msecs):03d} {record.levelname} {record.name}: "
            f"{record.getMessage()}"
        )
        # a job's error text is the job's: no escape sequence of it reaches the terminal
        return printable(self._with_exception(record, text))

    def _with_exception(self, record: logging.LogRecord, text: str) -> str:
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            text = f"{text}\n{record.exc_text}"
        if record.stack_info:
            text = f"{text}\n{self.formatStack(record.stack_info)}"
        return text


_DROP = frozenset({"duration_s"})
"""Event fields left out of the JSON line (``duration_ms`` carries the same value)."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record; see the module docstring for the keys."""

    def format(self, record: logging.LogRecord) -> str:
        created = record.created
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        event = getattr(record, "event", None)
        if isinstance(event, dict):
            for key, value in event.items():
                if key not in _DROP and key not in data:
                    data[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            data["exc"] = record.exc_text
        return json.dumps(data, default=str, separators=(",", ":"))


class RedactingFormatter(logging.Formatter):
    """Another formatter's lines with the credentials of storage URLs scrubbed
    (:func:`queue_core.storage.urls.redact`): a driver's own debug lines may quote a URL or an
    endpoint with its password."""

    def __init__(self, inner: logging.Formatter, urls: Sequence[str]) -> None:
        super().__init__()
        self.inner = inner
        self._pairs = [pair for url in urls for pair in redactions(url)]

    def format(self, record: logging.LogRecord) -> str:
        text = self.inner.format(record)
        for old, new in self._pairs:
            if old in text:
                text = text.replace(old, new)
        return text


def configure_logging(
    level: str,
    log_format: str = "text",
    stream: TextIO | None = None,
    *,
    redact_urls: Sequence[str] = (),
) -> None:
    """Log to ``stream`` (default stderr) at ``level`` in ``log_format``, cheaply.

    Like :func:`logging.basicConfig`, it does nothing when the root logger already has
    handlers. It turns off what neither format prints and every record would pay for:
    the caller lookup (``logging._srcfile``), thread, process and multiprocessing names.
    Every line is scrubbed of the credentials of ``redact_urls`` (the worker passes its
    storage URL), whichever library logged it.

    Raises:
        ConfigError: ``log_format`` is not ``text`` or ``json`` (code ``invalid_log_format``),
            or ``level`` is not a logging level name (code ``invalid_log_level``).
    """
    if log_format not in LOG_FORMATS:
        raise ConfigError(
            f"invalid log format {log_format!r}: expected one of {', '.join(LOG_FORMATS)}",
            code="invalid_log_format",
            field="log_format",
            value=log_format,
        )
    number = logging.getLevelName(level.upper())
    if not isinstance(number, int):
        raise ConfigError(
            f"invalid log level {level!r}: expected DEBUG, INFO, WARNING or ERROR",
            code="invalid_log_level",
            field="log_level",
            value=level,
        )
    root = logging.getLogger()
    if root.handlers:
        return
    logging._srcfile = None  # no format prints file/line
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(stream)
    formatter: logging.Formatter = TextFormatter() if log_format == "text" else JsonFormatter()
    if any(redactions(url) for url in redact_urls):
        formatter = RedactingFormatter(formatter, redact_urls)
    handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel(number)
