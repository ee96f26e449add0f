"""Usage records the ledger lost (a full disk under ``fail_open``, past its bound), summed into the
``RecordsLost`` rows it writes once its store is back, so that totals still hold their tokens and cost."""

from __future__ import annotations

import time
import uuid

import attrs

from provmw.stores.usage import UsageRecord

__all__ = ["LostRecords"]

_GROUPS = 1_000  # rows kept per outage; past it, new groups merge into one without configuration or caller
_MERGED = ("(lost)", "", "", "", "", "", "", "")


class LostRecords:
    """How many records were lost, and their sums per configuration, model, operation, user, tenant, key and team."""

    def __init__(self) -> None:
        self.count = 0
        self._rows: dict[tuple[str, ...], UsageRecord] = {}

    def add(self, record: UsageRecord) -> None:
        self.count += 1
        group = (record.config_id, record.provider, record.model, record.operation, record.user or "",
                 record.tenant or "", record.key_id or "", record.team or "")
        if group not in self._rows and len(self._rows) >= _GROUPS:
            group, record = _MERGED, attrs.evolve(record, config_id="(lost)", user=None, tenant=None, key_id=None,
                                                  team=None)
        self._rows[group] = _summed(self._rows.get(group), record)

    def take(self) -> list[UsageRecord]:
        """The rows summed so far, for the ledger; afterwards there are none."""
        rows = list(self._rows.values())
        self._rows.clear()
        return rows


def _summed(row: UsageRecord | None, record: UsageRecord) -> UsageRecord:
    """The RecordsLost row of a group, with ``record`` added: its tokens and cost, billed unknown."""
    if row is None:
        return UsageRecord(call_id=f"lost-{uuid.uuid4().hex}", attempt=1, correlation_id="", timestamp=time.time(),
                           operation=record.operation, config_id=record.config_id, provider=record.provider,
                           model=record.model, user=record.user, tenant=record.tenant, key_id=record.key_id,
                           team=record.team,
                           input_tokens=record.input_tokens, output_tokens=record.output_tokens,
                           cost_usd=record.cost_usd, status="error", error_type="RecordsLost", billed="unknown")
    cost = None if row.cost_usd is None and record.cost_usd is None else (row.cost_usd or 0) + (record.cost_usd or 0)
    return attrs.evolve(row, input_tokens=row.input_tokens + record.input_tokens,
                        output_tokens=row.output_tokens + record.output_tokens, cost_usd=cost)
