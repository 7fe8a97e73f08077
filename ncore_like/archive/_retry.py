"""Retries of remote reads: :class:`RetryPolicy` and the one retry loop.

Every remote read (a record, a span, the tail, an object's details) is one coroutine that
:meth:`RetryPolicy.run` repeats after transient failures; blocking reads run that coroutine
on the filesystem's event loop (see :mod:`._sources`), so there is no second loop to drift.

The filesystem's own retries would multiply ours (s3fs tries 5 times, each a botocore call
that tries up to 5 times: 125 attempts behind our 5), so a policy also sets them to a single
attempt (:meth:`RetryPolicy.storage_options`, :meth:`RetryPolicy.configure`): the worst-case
time of a failing read is the policy's, and it is written down
(:meth:`RetryPolicy.worst_case_seconds`, the remote page).

Each retry is logged on the ``ncore_like.archive.retry`` logger (attempt, cause, wait), at
WARNING; a read given up, too.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from .._defaults import RETRY_ATTEMPTS, RETRY_BASE_DELAY, RETRY_DEADLINE, RETRY_MAX_DELAY
from .._log import library_logger
from ..errors import NcoreLikeError, RemoteStorageError

__all__ = ["S3_PROTOCOLS", "RetryPolicy", "ShortBody", "http_status", "is_transient"]

T = TypeVar("T")

logger = library_logger("ncore_like.archive.retry")


class ShortBody(OSError):
    """A response body shorter than the bytes asked for, of a range the file holds."""


# Failures worth another attempt, by class name anywhere in the error's hierarchy (HTTP
# libraries' own classes are not imported to name them): dropped or reset connections,
# bodies cut short, timeouts.
_TRANSIENT = frozenset(
    {"ShortBody", "ClientPayloadError", "ServerDisconnectedError", "ClientOSError", "ConnectionResetError",
     "ConnectionAbortedError", "BrokenPipeError", "IncompleteRead", "ReadTimeoutError", "ServerTimeoutError",
     "TimeoutError", "ResponseStreamingError"}
)  # fmt: skip
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


def http_status(error: BaseException) -> int | None:
    """The HTTP status a failure answered with, if it says: aiohttp's ``status``, or the
    response of a botocore error, also behind the errors s3fs translates them into (a
    ``503 SlowDown`` becomes an ``OSError`` whose cause is botocore's)."""
    seen: BaseException | None = error
    for _ in range(4):  # the error and the few causes behind it
        if seen is None:
            return None
        status = getattr(seen, "status", None)
        if isinstance(status, int):
            return status
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(code, int):
                return code
        seen = seen.__cause__
    return None


def is_transient(error: BaseException) -> bool:
    """True for failures of remote storage that another attempt may not meet: a dropped or
    reset connection, a body cut short, a timeout, HTTP 429 or 5xx. Missing objects (404),
    denied access (403) and bad requests are permanent."""
    if isinstance(error, FileNotFoundError | PermissionError | NcoreLikeError):
        return False
    status = http_status(error)
    if status is not None:
        return status in _TRANSIENT_STATUS
    return bool({cls.__name__ for cls in type(error).__mro__} & _TRANSIENT)


_FIELDS = ("attempts", "base_delay", "max_delay", "deadline", "transient")


class RetryPolicy:
    """How remote reads meet transient failures (``retry=`` of
    :class:`~ncore_like.IndexedTarArchive` and the classes that open archives).

    A read that fails transiently (:attr:`transient`) is tried again, at most
    :attr:`attempts` times in all, with no attempt started later than :attr:`deadline`
    seconds after the first; waits grow from :attr:`base_delay` (doubling, with jitter of
    ±50 %, at most :attr:`max_delay`), except before the first retry of a failed connection
    (no answer, so no sign of overload), which doesn't wait. Other failures raise at once;
    when the attempts or the time are used up, a :class:`~ncore_like.RemoteStorageError`
    names the attempts and the last failure.

    The policy also sets the filesystem's own retries to one attempt, so that they don't
    multiply its attempts: on S3, s3fs's retries and botocore's (unless the storage options
    set botocore's ``retries`` themselves). fsspec's HTTP filesystem has none of its own.
    A failing read then takes at most :meth:`worst_case_seconds`.

    Policies pickle with the archives that use them (a custom :attr:`transient` must be a
    module-level function to pickle).
    """

    attempts: int
    """Attempts in all (1: no retries)."""
    base_delay: float
    """Seconds before the first retry after an answer (HTTP 429 or 5xx); then doubling."""
    max_delay: float
    """Longest wait between two attempts (before jitter)."""
    deadline: float
    """No attempt starts later than this many seconds after the first."""
    transient: Callable[[BaseException], bool]
    """Which failures are worth another attempt (default: :func:`is_transient`)."""

    def __init__(
        self,
        attempts: int = RETRY_ATTEMPTS,
        base_delay: float = RETRY_BASE_DELAY,
        max_delay: float = RETRY_MAX_DELAY,
        deadline: float = RETRY_DEADLINE,
        transient: Callable[[BaseException], bool] = is_transient,
    ) -> None:
        # Written out (a dataclass's own __init__ would show the defaults' names, not their
        # values, in the API reference).
        if not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"retry policy: attempts must be a positive integer, got {attempts!r}")
        for name, value in (("base_delay", base_delay), ("max_delay", max_delay), ("deadline", deadline)):
            if not value >= 0:  # also refuses NaN
                raise ValueError(f"retry policy: {name} must be seconds >= 0, got {value!r}")
        object.__setattr__(self, "attempts", attempts)
        object.__setattr__(self, "base_delay", float(base_delay))
        object.__setattr__(self, "max_delay", float(max_delay))
        object.__setattr__(self, "deadline", float(deadline))
        object.__setattr__(self, "transient", transient)

    # A value, as a frozen dataclass would be, written out: the dataclasses module (and the
    # inspect module it imports) cost every command and fresh process ~15 ms to import.
    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _FIELDS)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, RetryPolicy)
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(_FIELDS, self._fields(), strict=True))
        return f"{type(self).__name__}({fields})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: a RetryPolicy can't be changed, make another")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: a RetryPolicy can't be changed, make another")

    def delay(self, error: BaseException, attempt: int) -> float:
        """Seconds to wait after attempt ``attempt`` (from 1) failed with ``error``."""
        if attempt == 1 and http_status(error) is None:
            return 0.0  # a connection failure, not an answer saying the service is overloaded
        import random  # here: only a failing read waits

        return float(min(self.max_delay, self.base_delay * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5))

    def worst_case_seconds(self, attempt_timeout: float) -> float:
        """The longest a failing read takes when each attempt may take ``attempt_timeout``
        seconds (the filesystem's timeouts): every attempt times out and waits the longest,
        or the deadline passes and one last attempt times out."""
        waits = sum(
            1.5 * min(self.max_delay, self.base_delay * 2 ** (attempt - 1)) for attempt in range(1, self.attempts)
        )
        return float(min(self.attempts * attempt_timeout + waits, self.deadline + attempt_timeout))

    async def run(self, call: Callable[[], Awaitable[T]], name: str, what: str) -> T:
        """``await call()``, again after transient failures (see the class); ``name`` (the
        archive) and ``what`` (e.g. ``bytes [0, 512)``) name the read in errors and logs."""
        import asyncio

        deadline = time.monotonic() + self.deadline
        attempt = 1
        while True:
            try:
                return await call()
            except Exception as error:
                if not self.transient(error):
                    raise
                wait = self.delay(error, attempt)
                cause = str(error).split("\n", 1)[0] or type(error).__name__
                if attempt >= self.attempts or time.monotonic() + wait > deadline:
                    logger.warning("%s: reading %s failed %d times, giving up: %s", name, what, attempt, cause)
                    raise RemoteStorageError(
                        f"reading {what} failed {attempt} times, the last with: {cause}", archive=name
                    ) from error
                logger.warning(
                    "%s: reading %s failed (attempt %d of %d: %s), retrying in %.2f s",
                    name, what, attempt, self.attempts, cause, wait,
                )  # fmt: skip
            await asyncio.sleep(wait)
            attempt += 1

    # -- the filesystem's own retries -------------------------------------------------------

    def storage_options(self, protocol: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` of a filesystem of ``protocol`` for reads under this policy: on S3,
        botocore's retries set to one attempt, unless ``options`` set them."""
        if protocol not in S3_PROTOCOLS:
            return dict(options)
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("retries", dict(_ONE_ATTEMPT))
        return {**options, "config_kwargs": config}

    def configure(self, filesystem: Any) -> None:
        """Sets s3fs's own retry count (an attribute, not an option) to one attempt on a
        filesystem object made with :meth:`storage_options`, where botocore's retries are
        ours too: the storage options differ from any the user's own code opens S3 with, so
        the object (fsspec shares them by options) is ours."""
        config = getattr(filesystem, "config_kwargs", None)
        if isinstance(config, dict) and config.get("retries") == _ONE_ATTEMPT and hasattr(filesystem, "retries"):
            filesystem.retries = 1


#: The protocols of S3 URLs (s3fs takes both).
S3_PROTOCOLS = frozenset({"s3", "s3a"})
_ONE_ATTEMPT = {"total_max_attempts": 1}
