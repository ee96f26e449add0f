"""The call facts and context behind cache keys, pinned where the mutation run found them unchecked
(docs/testing.md)."""

from __future__ import annotations

from provmw.context import _RandomBytes


def test_a_pool_of_random_bytes_hands_out_sixteen_fresh_bytes_before_and_after_a_fork() -> None:
    pool = _RandomBytes()
    before = pool.take()
    pool._forget()  # what os.register_at_fork runs in a child, called here so that the run can see it
    after = pool.take()
    assert (len(before), len(after)) == (16, 16) and before != after
