"""The one retry policy of zoorank, on ``tenacity``, keyed on exception types.

Below zoorank the libraries already try again where they can: pyarrow's S3 filesystem per request
(:func:`zoorank.store.uris.s3_retry_settings`), delta-rs per object-store request (never the conditional
PUT of a commit). What is left to zoorank is what those layers hand up:

- **a lost commit race** (:class:`deltalake.exceptions.CommitFailedError`): another writer
  committed first; the action re-reads the table and commits again (:func:`call` with
  ``on=COMMIT``);
- **a transient I/O failure** (:func:`transient_io`): an ``OSError`` that is not a statement about
  the path (missing, not a directory, no permission); such errors are permanent and raise at once;
- **a local Ray that missed its start-up deadline** (:func:`ray_start_timeout`).

Nothing here looks at a message. Every wait is exponential with full jitter
(``wait_random_exponential``), so writers that lost one race do not collide again in step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import tenacity

T = TypeVar("T")

#: ``OSError`` subclasses that state a fact about a path: another attempt gives the same answer.
PERMANENT_IO: tuple[type[OSError], ...] = (
    FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError,
)


def transient_io(err: BaseException) -> bool:
    """An ``OSError`` worth another attempt: any but :data:`PERMANENT_IO` (pyarrow raises a plain
    ``OSError`` for an S3 500, a reset or a timeout it could not absorb)."""
    return isinstance(err, OSError) and not isinstance(err, PERMANENT_IO)


def commit_conflict(err: BaseException) -> bool:
    """A Delta commit that lost a race to another writer (delta-rs ``CommitFailedError``)."""
    from deltalake.exceptions import CommitFailedError

    return isinstance(err, CommitFailedError)


def ray_start_timeout(err: BaseException) -> bool:
    """Ray's "node timed out during startup": the only bare ``Exception`` ``ray.init`` raises
    (its typed errors, e.g. ``ValueError`` for bad arguments, are permanent)."""
    return type(err) is Exception


def any_of(*predicates: Callable[[BaseException], bool]) -> Callable[[BaseException], bool]:
    return lambda err: any(p(err) for p in predicates)


#: what a store commit tries again on: a lost race or a transient I/O failure (every commit action
#: re-reads the table and is idempotent, so running it again is safe).
COMMIT = any_of(commit_conflict, transient_io)


class Policy:
    """How often and how patiently to try: ``attempts`` in all, waits of ``first_wait_s`` ×
    2^k with full jitter, each at most ``max_wait_s``."""

    def __init__(self, attempts: int, first_wait_s: float, max_wait_s: float) -> None:
        self.attempts, self.first_wait_s, self.max_wait_s = attempts, first_wait_s, max_wait_s

    def retrying(self, on: Callable[[BaseException], bool],
                 before_sleep: Callable[[tenacity.RetryCallState], None] | None = None
                 ) -> tenacity.Retrying:
        """A ``tenacity.Retrying`` that tries again on errors ``on`` accepts, re-raising the last."""
        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=tenacity.wait_random_exponential(multiplier=self.first_wait_s,
                                                  max=self.max_wait_s),
            retry=tenacity.retry_if_exception(on), reraise=True, before_sleep=before_sleep)


#: a Delta commit: races resolve in milliseconds locally, in tens of ms on S3; 8 attempts cover
#: 8 writers committing at once (each round at least one of them wins).
COMMITS = Policy(attempts=8, first_wait_s=0.05, max_wait_s=2.0)
#: a read of dataset bytes (after pyarrow's own per-request attempts).
READS = Policy(attempts=4, first_wait_s=0.2, max_wait_s=2.0)
#: starting a local Ray on a busy machine.
RAY_START = Policy(attempts=3, first_wait_s=1.0, max_wait_s=5.0)


def call(fn: Callable[..., T], *args: Any, policy: Policy = COMMITS,
         on: Callable[[BaseException], bool] = COMMIT,
         before_sleep: Callable[[tenacity.RetryCallState], None] | None = None,
         **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` under ``policy``, trying again on the errors ``on`` accepts; the
    last error is raised as it is."""
    return policy.retrying(on, before_sleep)(fn, *args, **kwargs)
