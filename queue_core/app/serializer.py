"""Serializers of job arguments and results.

Payloads and results cross the :class:`~queue_core.storage.protocol.Storage` protocol as opaque
bytes. The default :class:`JsonSerializer` writes the payload envelope
``{"args":[...],"kwargs":{...}}`` (UTF-8), which dead-letter entries decode back into
``args``/``kwargs`` (:func:`queue_core.records.jobs.decode_json_payload`). It refuses what JSON
would silently change -- dicts with non-string keys (``{1: "a"}`` would arrive as
``{"1": "a"}``), NaN and infinities -- with a :class:`SerializationError` naming where
the value is. Tuples arrive as lists (``(1, 2)`` -> ``[1, 2]``); that is the one change
it makes. :class:`PickleSerializer` carries any picklable value but must be chosen
explicitly (``Queue(serializer="pickle")``): unpickling runs code, so only use it with
storage that only trusted producers can write to.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol, runtime_checkable

from queue_core.records.errors import ConfigError, SerializationError

__all__ = ["JsonSerializer", "PickleSerializer", "Serializer", "get_serializer"]


@runtime_checkable
class Serializer(Protocol):
    """Turns call arguments and return values into bytes and back."""

    name: str
    """Short name recorded for diagnostics, e.g. ``"json"``."""

    def dumps_payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        """Encode a call's arguments.

        Raises:
            SerializationError: naming the argument that cannot be encoded.
        """
        ...

    def loads_payload(self, data: bytes) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Decode what :meth:`dumps_payload` wrote.

        Raises:
            SerializationError: the bytes are not a payload of this serializer.
        """
        ...

    def dumps_result(self, value: Any) -> bytes:
        """Encode a task's return value.

        Raises:
            SerializationError: naming the type that cannot be encoded.
        """
        ...

    def loads_result(self, data: bytes) -> Any:
        """Decode what :meth:`dumps_result` wrote.

        Raises:
            SerializationError: the bytes are not a result of this serializer.
        """
        ...


# --------------------------------------------------------------------------- JSON

_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _make_encode() -> Callable[[Any], str]:
    """``_ENCODER.encode`` without building a new C encoder on every call.

    ``JSONEncoder.encode`` constructs the C iterencoder per call; building it once
    halves the cost of a small payload. No circular-reference markers: a circular value
    ends in ``RecursionError``, which the callers report like the encoder's
    ``ValueError`` (naming the circular argument). Falls back to ``_ENCODER.encode``
    where the C accelerator is missing.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has it
        return _ENCODER.encode
    c_encode = make(
        None,
        _ENCODER.default,
        json.encoder.encode_basestring,
        None,
        ":",
        ",",
        False,
        False,
        False,  # sort_keys, skipkeys, allow_nan: NaN/Infinity raise ValueError
    )
    join = "".join

    def encode(value: Any) -> str:
        return join(c_encode(value, 0))

    return encode


_ENCODE: Final = _make_encode()
_DECODE: Final = json.loads
_ONE_INT: Final = re.compile(rb'\{"args":\[(-?(?:0|[1-9][0-9]{0,17}))\],"kwargs":\{\}\}').fullmatch
"""The envelope ``dumps_payload`` writes for one plain int argument (its fast path)."""
_JSON_SCALARS: Final = (str, int, float, bool, type(None))
_JSON_HINT: Final = (
    "use str, int, float (finite), bool, None, lists and dicts with string keys, "
    "or choose serializer='pickle'"
)


def _changed_by_json(value: Any) -> bool:
    """Whether ``value`` holds a dict with a non-string key (JSON would stringify it).

    Only called when the encoded text has a dict beyond the envelope (a ``{``), so plain
    scalar and list arguments never pay for the walk.
    """
    kind = type(value)
    if kind in _PLAIN:
        return False
    if kind is list or kind is tuple or isinstance(value, (list, tuple)):
        for item in value:
            if _changed_by_json(item):
                return True
        return False
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str and not isinstance(key, str):
                return True
            if _changed_by_json(item):
                return True
    return False


_PLAIN: Final = frozenset({str, int, float, bool, type(None)})


def _walk(value: Any, path: str, seen: set[int]) -> Iterator[tuple[str, str]]:
    """Yield (path, problem) for the parts of ``value`` JSON cannot encode, or cannot
    encode without changing them (non-string dict keys, NaN, infinities)."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path, f"is {value!r}, which JSON cannot represent"
        return
    if isinstance(value, _JSON_SCALARS):
        return
    if isinstance(value, (list, tuple, dict)):
        if id(value) in seen:
            yield path, "contains a circular reference and is not JSON-serializable"
            return
        seen.add(id(value))
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, _JSON_SCALARS):
                    yield (
                        f"{path} key {key!r}",
                        f"of type {type(key).__name__!r} is not JSON-serializable "
                        "(dict keys must be strings)",
                    )
                    return
                if not isinstance(key, str):
                    yield (
                        f"{path} key {key!r}",
                        f"of type {type(key).__name__!r} is not a string: JSON would turn "
                        f"it into {json.dumps(str(key))}, so the dict would not arrive as sent",
                    )
                    return
                yield from _walk(item, f"{path}[{key!r}]", seen)
        else:
            for index, item in enumerate(value):
                yield from _walk(item, f"{path}[{index}]", seen)
        seen.discard(id(value))
        return
    yield path, f"of type {type(value).__name__!r} is not JSON-serializable"


def _json_error(
    label: str, value: Any, exc: Exception, *, what: str = "argument"
) -> SerializationError:
    for path, problem in _walk(value, label, set()):
        return SerializationError(f"{what} {path} {problem}; {_JSON_HINT}")
    return SerializationError(f"{what} {label} is not JSON-serializable ({exc}); {_JSON_HINT}")


class JsonSerializer:
    """The default serializer: compact UTF-8 JSON.

    The payload is exactly ``{"args":[...],"kwargs":{...}}``. Values must be JSON
    types that come back equal: ``str``, ``int``, finite ``float``, ``bool``, ``None``,
    lists and dicts with string keys. Dicts with other keys, NaN and infinities are
    refused (``SerializationError``) rather than changed; tuples come back as lists.
    """

    name: str = "json"

    def dumps_payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        """Encode arguments as the ``{"args":[...],"kwargs":{...}}`` envelope.

        Raises:
            SerializationError: naming the first argument (``args[1]``,
                ``kwargs['to']``, or a path inside one) that JSON cannot encode or would
                change (a non-string dict key, NaN, an infinity), and its type.
        """
        try:
            if not kwargs and len(args) == 1 and args[0].__class__ is int:
                # one plain int (an id, an index): the text _ENCODE gives, ~8x cheaper
                return b'{"args":[%d],"kwargs":{}}' % args[0]
            text = _ENCODE({"args": args, "kwargs": kwargs})
            # The envelope holds two "{"; a third means a dict (or a brace in a string).
            if text.count("{", 2) > 1 and _changed_by_json((args, kwargs)):
                raise ValueError("a dict key is not a string")
            return text.encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            try:
                error = self._payload_error(args, kwargs, exc)
            except RecursionError:
                error = SerializationError(f"arguments are nested too deeply for JSON: {exc}")
            raise error from None

    @staticmethod
    def _payload_error(
        args: tuple[Any, ...], kwargs: dict[str, Any], exc: Exception
    ) -> SerializationError:
        for index, arg in enumerate(args):
            if next(_walk(arg, "", set()), None) is not None:
                return _json_error(f"args[{index}]", arg, exc)
        for key, arg in kwargs.items():
            if not isinstance(key, str):
                return SerializationError(
                    f"keyword argument name {key!r} of type {type(key).__name__!r} is not a string"
                )
            if next(_walk(arg, "", set()), None) is not None:
                return _json_error(f"kwargs[{key!r}]", arg, exc)
        return SerializationError(f"arguments are not JSON-serializable ({exc}); {_JSON_HINT}")

    def loads_payload(self, data: bytes) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Decode the envelope back to ``(args, kwargs)``.

        Raises:
            SerializationError: the bytes are not valid UTF-8 JSON of that shape.
        """
        if data.__class__ is bytes:
            one = _ONE_INT(data)
            if one is not None:  # what dumps_payload writes for one int: ~4x cheaper
                return (int(one[1]),), {}
        obj = _loads(data, "payload")
        if isinstance(obj, dict) and len(obj) == 2:
            args = obj.get("args")
            kwargs = obj.get("kwargs")
            if isinstance(args, list) and isinstance(kwargs, dict):
                return tuple(args), kwargs
        raise SerializationError(
            f'corrupt JSON payload: expected {{"args":[...],"kwargs":{{...}}}}, got {_peek(data)}'
        )

    def dumps_result(self, value: Any) -> bytes:
        """Encode a return value.

        Raises:
            SerializationError: naming the type (and where inside the value) that JSON
                cannot encode.
        """
        if value is None:
            return b"null"
        if value.__class__ is int:  # the text _ENCODE gives, without the encoder
            return b"%d" % value
        try:
            text = _ENCODE(value)
            if "{" in text and _changed_by_json(value):
                raise ValueError("a dict key is not a string")
            return text.encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            try:
                error = _json_error("value", value, exc, what="result")
            except RecursionError:
                error = SerializationError(f"result is nested too deeply for JSON: {exc}")
            raise error from None

    def loads_result(self, data: bytes) -> Any:
        """Decode a return value.

        Raises:
            SerializationError: the bytes are not valid UTF-8 JSON.
        """
        return _loads(data, "result")

    def __repr__(self) -> str:
        return "JsonSerializer()"


def _peek(data: object) -> str:
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        return repr(raw[:40]) + ("…" if len(raw) > 40 else "")
    return f"a {type(data).__name__}"


def _loads(data: bytes, what: str) -> Any:
    if isinstance(data, memoryview):
        data = bytes(data)
    if not isinstance(data, (bytes, bytearray)):
        raise SerializationError(f"cannot decode {what}: expected bytes, got {_peek(data)}")
    try:
        return _DECODE(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise SerializationError(f"corrupt JSON {what} {_peek(data)}: {exc}") from None


# --------------------------------------------------------------------------- pickle

_PICKLE_ERRORS: Final = (TypeError, AttributeError, ValueError, RecursionError)
"""Besides ``pickle.PicklingError``: what ``pickle.dumps`` raises for a value it cannot
pickle."""


class PickleSerializer:
    """Pickle (highest protocol); carries any picklable value. Only when chosen explicitly.

    Unpickling can run arbitrary code: use it only when every producer that can write
    to the storage is trusted.
    """

    name: str = "pickle"

    def __init__(self) -> None:
        # Imported here, not with the module: JSON is the default, and a worker's
        # start-up time is its imports.
        import pickle

        self._dumps = functools.partial(pickle.dumps, protocol=pickle.HIGHEST_PROTOCOL)
        self._loads = pickle.loads
        self._errors = (pickle.PicklingError, *_PICKLE_ERRORS)

    def dumps_payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        """Pickle ``(args, kwargs)``.

        Raises:
            SerializationError: naming the first argument that cannot be pickled.
        """
        try:
            return self._dumps((tuple(args), dict(kwargs)))
        except self._errors as exc:
            labelled = [(f"args[{i}]", a) for i, a in enumerate(args)]
            labelled += [(f"kwargs[{k!r}]", a) for k, a in kwargs.items()]
            for label, arg in labelled:
                if not self._picklable(arg):
                    raise SerializationError(
                        f"argument {label} of type {type(arg).__name__!r} cannot be pickled: {exc}"
                    ) from None
            raise SerializationError(f"arguments cannot be pickled: {exc}") from None

    def loads_payload(self, data: bytes) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Unpickle ``(args, kwargs)``.

        Raises:
            SerializationError: the bytes are not a pickled ``(tuple, dict)``.
        """
        obj = self._unpickle(data, "payload")
        if (
            isinstance(obj, tuple)
            and len(obj) == 2
            and isinstance(obj[0], tuple)
            and isinstance(obj[1], dict)
        ):
            return obj[0], obj[1]
        raise SerializationError(
            f"corrupt pickle payload: expected (args, kwargs), got a {type(obj).__name__}"
        )

    def dumps_result(self, value: Any) -> bytes:
        """Pickle a return value.

        Raises:
            SerializationError: naming the type that cannot be pickled.
        """
        try:
            return self._dumps(value)
        except self._errors as exc:
            raise SerializationError(
                f"result of type {type(value).__name__!r} cannot be pickled: {exc}"
            ) from None

    def loads_result(self, data: bytes) -> Any:
        """Unpickle a return value.

        Raises:
            SerializationError: the bytes cannot be unpickled.
        """
        return self._unpickle(data, "result")

    def __repr__(self) -> str:
        return "PickleSerializer()"

    def _picklable(self, value: Any) -> bool:
        try:
            self._dumps(value)
        except self._errors:
            return False
        return True

    def _unpickle(self, data: bytes, what: str) -> Any:
        try:
            return self._loads(data)
        except Exception as exc:  # unpickling can raise nearly anything on bad input
            raise SerializationError(
                f"corrupt pickle {what} {_peek(data)}: {type(exc).__name__}: {exc}"
            ) from None


# --------------------------------------------------------------------------- lookup

_BY_NAME: Final[dict[str, Callable[[], Serializer]]] = {
    "json": JsonSerializer,
    "pickle": PickleSerializer,
}
_METHODS: Final = ("dumps_payload", "loads_payload", "dumps_result", "loads_result")


def get_serializer(spec: str | Serializer) -> Serializer:
    """Resolve the ``serializer`` option.

    Args:
        spec: ``"json"`` (the default), ``"pickle"``, or an object implementing
            :class:`Serializer` (a ``name`` and the four methods).

    Raises:
        ConfigError: ``code="invalid_option"`` naming the value and the accepted names.
    """
    if isinstance(spec, str):
        factory = _BY_NAME.get(spec.strip().lower())
        if factory is not None:
            return factory()
    elif (
        not isinstance(spec, type)  # a class, not an instance: methods would be unbound
        and isinstance(getattr(spec, "name", None), str)
        and all(callable(getattr(spec, m, None)) for m in _METHODS)
    ):
        return spec
    hint = " (pass an instance, not the class)" if isinstance(spec, type) else ""
    raise ConfigError(
        f"invalid serializer: {spec!r}{hint} — expected 'json', 'pickle', or an object "
        f"with a 'name' and methods {', '.join(_METHODS)}",
        code="invalid_option",
        field="serializer",
        value=spec,
    )
