"""Records the ledger lost, summed into RecordsLost rows: each row keeps who its records were for."""

from __future__ import annotations

from provmw.stores.usage.lost import LostRecords
from tests.stores.test_usage_store import record


def test_lost_records_of_two_keys_are_booked_as_two_rows_with_their_key_and_team() -> None:
    lost = LostRecords()
    lost.add(record("a", key_id="0123456789ab", team="acme/search", input_tokens=3, cost_usd=0.25))
    lost.add(record("b", key_id="0123456789ab", team="acme/search", input_tokens=4, cost_usd=0.5))
    lost.add(record("c", key_id="ba9876543210", team="acme/ads", input_tokens=5))
    rows = {row.key_id: row for row in lost.take()}
    assert {k: (r.team, r.input_tokens, r.cost_usd) for k, r in rows.items()} == {
        "0123456789ab": ("acme/search", 7, 0.75), "ba9876543210": ("acme/ads", 5, None)}


def test_a_direct_calls_lost_records_are_booked_without_key_or_team() -> None:
    lost = LostRecords()
    lost.add(record("a", user="ada"))
    [row] = lost.take()
    assert (row.user, row.key_id, row.team, row.error_type) == ("ada", None, None, "RecordsLost")
