"""Optional dependencies: which extra brings which package, and the error that names it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .errors import MissingExtraError

#: The packages each extra brings (their top-level import names).
EXTRAS: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark", "pyarrow"),
    "prometheus": ("prometheus_client",),
    "dashboard": ("starlette", "uvicorn", "jinja2"),
    "embedded": ("fakeredis", "lupa"),
    "schedules": ("cronsim",),
}


@contextmanager
def extra_needed(feature: str, extra: str) -> Iterator[None]:
    """Turn a failed import of one of ``extra``'s packages into a :class:`MissingExtraError`.

    Args:
        feature: What needs the extra, as the message names it (``the Spark data source``).
        extra: The extra's name, a key of :data:`EXTRAS`.

    Raises:
        MissingExtraError: A package of the extra is not installed. Other import errors (a
            module of the extra that is installed but broken) pass through unchanged.
    """
    try:
        yield
    except ImportError as err:
        if isinstance(err, MissingExtraError):
            raise
        top = (err.name or "").partition(".")[0]
        if top not in EXTRAS[extra]:
            raise
        raise MissingExtraError(feature, extra, err.name) from err
