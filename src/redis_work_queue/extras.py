"""Optional dependencies: which extra brings which package, and the error that names it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .errors import MissingExtraError

#: Each extra's packages: (top-level import name, pip requirement with the lowest version).
_REQUIRES: dict[str, tuple[tuple[str, str], ...]] = {
    "spark": (("pyspark", "'pyspark>=4,<5'"), ("pyarrow", "'pyarrow>=15'")),
    "prometheus": (("prometheus_client", "'prometheus-client>=0.17'"),),
    "dashboard": (
        ("starlette", "'starlette>=0.37'"),
        ("uvicorn", "'uvicorn>=0.29'"),
        ("jinja2", "'jinja2>=3.1'"),
    ),
    "embedded": (("fakeredis", "'fakeredis>=2.26'"), ("lupa", "'lupa>=2.0'")),
    "schedules": (("cronsim", "'cronsim>=2.6'"),),
}

#: The packages each extra brings (their top-level import names).
EXTRAS: dict[str, tuple[str, ...]] = {
    extra: tuple(module for module, _ in needs) for extra, needs in _REQUIRES.items()
}

#: The packages each extra brings, as pip names them (with the extra's lowest versions).
PACKAGES: dict[str, tuple[str, ...]] = {
    extra: tuple(pip for _, pip in needs) for extra, needs in _REQUIRES.items()
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
