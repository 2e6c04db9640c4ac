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

#: The packages each extra brings, as pip names them (with the extra's lowest versions).
PACKAGES: dict[str, tuple[str, ...]] = {
    "spark": ("'pyspark>=4,<5'", "'pyarrow>=15'"),
    "prometheus": ("'prometheus-client>=0.17'",),
    "dashboard": ("'starlette>=0.37'", "'uvicorn>=0.29'", "'jinja2>=3.1'"),
    "embedded": ("'fakeredis>=2.26'", "'lupa>=2.0'"),
    "schedules": ("'cronsim>=2.6'",),
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
        raise MissingExtraError(feature, extra, err.name, PACKAGES[extra]) from err
