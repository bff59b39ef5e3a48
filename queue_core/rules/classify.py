"""Classification of a failed attempt's exception: retry it or not (SPEC §3, §5).

Classification uses the live exception in the worker, so ``isinstance`` applies and
subclasses count; ``non_retryable`` names match the reported ``error_class`` (simple
name) or ``error_type`` (fully qualified name) exactly.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from queue_core.records.errors import ConfigError, TaskError

__all__ = ["classify", "error_names", "validate_exception_classes"]


def error_names(exc: BaseException) -> tuple[str, str]:
    """The names an exception is recorded under.

    Returns:
        ``(error_class, error_type)``: the simple class name and the fully qualified
        name with its module, e.g. ``("ValueError", "builtins.ValueError")`` or
        ``("MyErr", "app.tasks.MyErr")``. Nested classes keep their qualified path
        (``"app.tasks.Outer.Inner"``).
    """
    cls = type(exc)
    return cls.__name__, f"{cls.__module__}.{cls.__qualname__}"


def classify(
    exc: BaseException,
    *,
    retry_on: tuple[type[BaseException], ...] = (),
    dont_retry_on: tuple[type[BaseException], ...] = (),
    non_retryable: Collection[str] = (),
) -> bool:
    """Whether the attempt that raised ``exc`` may be retried (budget permitting).

    Rules, first match wins:

    1. ``TaskError.retryable(...)`` -> retryable (forced, whatever the lists say);
    2. ``TaskError.fatal(...)`` / :class:`~queue_core.records.errors.NonRetryableError` -> not;
    3. an instance of a class in ``dont_retry_on`` -> not;
    4. ``retry_on`` given and ``exc`` an instance of none of its classes -> not;
    5. the class's ``error_class`` or ``error_type`` is a name in ``non_retryable`` -> not;
    6. otherwise retryable.

    Returns:
        ``True`` when the failure is retryable.
    """
    if isinstance(exc, TaskError):
        if exc.non_retryable is False:
            return True
        if exc.non_retryable is True:
            return False
    if dont_retry_on and isinstance(exc, dont_retry_on):
        return False
    if retry_on and not isinstance(exc, retry_on):
        return False
    if non_retryable:
        error_class, error_type = error_names(exc)
        if error_class in non_retryable or error_type in non_retryable:
            return False
    return True


def validate_exception_classes(value: object, *, field: str) -> tuple[type[BaseException], ...]:
    """Normalise a ``retry_on`` / ``dont_retry_on`` option to a tuple of classes.

    Args:
        value: one exception class, an iterable of them, or ``None`` (not given: ``()``).
        field: the option name, used in the error.

    Raises:
        ConfigError: ``code="invalid_option"`` naming the element that is not an
            exception class (names as strings belong in ``non_retryable``).
    """
    if value is None:
        return ()
    if isinstance(value, type):
        items: Iterable[object] = (value,)
    elif isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        items = (value,)
    else:
        items = value
    classes: list[type[BaseException]] = []
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            hint = ""
            if isinstance(item, str):
                hint = " (class names as strings go in 'non_retryable')"
            raise ConfigError(
                f"invalid {field}: {item!r} is not an exception class — expected an "
                f"exception class or a list of them{hint}",
                code="invalid_option",
                field=field,
                value=value,
            )
        if item not in classes:
            classes.append(item)
    return tuple(classes)
