"""One retry policy, on tenacity, for everything that retries. As the Kubernetes e2e
framework's ``shouldRetry``: only what is transient is retried (429, with its
Retry-After; 5xx; an expired watch; a dropped connection or a client-side timeout);
anything else (a 403, a kind the server does not serve, a refused object) fails at once
with its own error, never as a timeout that says only "last state: absent"."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from kubernetes.client.rest import ApiException
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential
from urllib3.exceptions import HTTPError

T = TypeVar("T")

GONE = 410  # a watch's resource version expired: list again
TOO_MANY_REQUESTS = 429
MAX_BACKOFF_SECONDS = 3.0


def is_transient(err: BaseException) -> bool:
    """Whether trying again may succeed without anything else changing."""
    if isinstance(err, ApiException):
        status = err.status or 0
        return status in (GONE, TOO_MANY_REQUESTS) or status >= 500 or status == 0
    return isinstance(err, (HTTPError, ConnectionError, TimeoutError))


def describe(err: BaseException) -> str:
    """An error in one line: an API error by status and reason."""
    if isinstance(err, ApiException):
        return f"API error {err.status} {err.reason}".rstrip()
    first = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {first}".rstrip(": ")


def _retry_after(err: BaseException | None) -> float | None:
    if isinstance(err, ApiException) and err.status == TOO_MANY_REQUESTS and err.headers:
        try:
            return float(err.headers.get("Retry-After", ""))
        except ValueError:
            return None
    return None


class _Backoff:
    """0.1 s doubling to 3 s, or what a 429's Retry-After asks for, or nothing for an
    attempt that ``at_once`` accepts (a watch that ended: list again now)."""

    def __init__(self, at_once: Callable[[BaseException], bool]) -> None:
        self.exponential = wait_exponential(multiplier=0.1, max=MAX_BACKOFF_SECONDS)
        self.at_once = at_once

    def __call__(self, state: RetryCallState) -> float:
        err = state.outcome.exception() if state.outcome else None
        if err is not None and self.at_once(err):
            return 0.0
        asked = _retry_after(err)
        return asked if asked is not None else self.exponential(state)


def until(deadline: float, retry_on: Callable[[BaseException], bool] = is_transient,
          at_once: Callable[[BaseException], bool] = lambda err: False) -> Retrying:
    """Attempts, with backoff, while the attempt raises what ``retry_on`` accepts and
    ``deadline`` (``time.monotonic()``) has not passed; the last error is re-raised."""
    return Retrying(
        retry=retry_if_exception(retry_on),
        stop=lambda state: time.monotonic() >= deadline,
        wait=_Backoff(at_once),
        sleep=lambda seconds: time.sleep(max(0.0, min(seconds, deadline - time.monotonic()))),
        reraise=True,
    )


def transient_retried(call: Callable[[], T], seconds: float) -> T:
    """``call()``, retried on transient errors for up to ``seconds``."""
    return until(time.monotonic() + seconds)(call)
