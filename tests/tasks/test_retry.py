"""The one retry policy (zoorank.tasks.retry): keyed on exception types, never on messages."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake.exceptions import CommitFailedError, DeltaError

from zoorank.tasks import retry

FAST = retry.Policy(attempts=4, first_wait_s=0.001, max_wait_s=0.002)


def failing(errors: list[BaseException], result: str = "ok"):
    """A callable that raises ``errors`` one per call, then returns ``result``; counts calls."""
    calls = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    return fn, calls


def test_a_transient_io_error_is_tried_again_until_it_succeeds():
    fn, calls = failing([OSError("reset"), ConnectionResetError(), TimeoutError()])
    assert retry.call(fn, policy=FAST, on=retry.transient_io) == "ok" and len(calls) == 4


@pytest.mark.parametrize("err", [FileNotFoundError("gone"), PermissionError("denied"),
                                 IsADirectoryError("dir"), NotADirectoryError("file")])
def test_a_statement_about_the_path_is_final_at_once(err):
    fn, calls = failing([err])
    with pytest.raises(type(err)):
        retry.call(fn, policy=FAST, on=retry.transient_io)
    assert len(calls) == 1


def test_the_last_error_is_raised_as_it_is_after_the_policy_s_attempts():
    errors = [OSError(f"500 #{i}") for i in range(10)]
    fn, calls = failing(errors)
    with pytest.raises(OSError, match="500 #3"):
        retry.call(fn, policy=FAST, on=retry.transient_io)
    assert len(calls) == FAST.attempts


def test_a_commit_retries_a_lost_race_and_no_other_delta_error_whatever_its_message():
    fn, calls = failing([CommitFailedError("x"), CommitFailedError("y")])
    assert retry.call(fn, policy=FAST, on=retry.COMMIT) == "ok" and len(calls) == 3
    # a DeltaError whose text reads like a conflict is not a lost race: the type decides
    fn, calls = failing([DeltaError("concurrent version conflict: already exists")])
    with pytest.raises(DeltaError):
        retry.call(fn, policy=FAST, on=retry.COMMIT)
    assert len(calls) == 1
    fn, calls = failing([pa.ArrowInvalid("bad schema")])
    with pytest.raises(pa.ArrowInvalid):
        retry.call(fn, policy=FAST, on=retry.COMMIT)
    assert len(calls) == 1


def test_only_ray_s_bare_start_up_exception_starts_ray_again():
    assert retry.ray_start_timeout(Exception("The current node timed out during startup."))
    assert not retry.ray_start_timeout(ValueError("bad num_cpus"))
    assert not retry.ray_start_timeout(RuntimeError("timed out during startup"))


def test_waits_grow_exponentially_within_their_cap():
    waits = []
    policy = retry.Policy(attempts=6, first_wait_s=0.001, max_wait_s=0.004)
    fn, _ = failing([OSError()] * 5)
    retry.call(fn, policy=policy, on=retry.transient_io,
               before_sleep=lambda state: waits.append(state.upcoming_sleep))
    # full jitter: each wait in [0, min(cap, first · 2^k)]
    assert len(waits) == 5
    assert all(0 <= w <= min(0.004, 0.001 * 2 ** k) + 1e-12 for k, w in enumerate(waits))
