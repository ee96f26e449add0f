"""The usage journal: a record is durable before the call that made it returns.

``await journal.durable(record)`` resolves once the record is in the store or in the spill
file (:mod:`provmw.stores.usage.spill`), so a process killed after a call returned has left that
call's records behind. One background writer takes everything waiting as one batch (group
commit): concurrent calls share one transaction, so the wait stays near one commit.

- **Store down** (``UsageLedgerUnavailableError``, or any failure while an empty write also
  fails): the batch goes to the spill file and its callers return. Until a probe with capped
  backoff finds the store back, new records go straight to the spill file; then the spill is
  replayed into the store.
- **Poison record** (the batch fails but the store takes an empty write): the batch is
  bisected, the records the store refuses on their own are set aside in the spill file with
  an error naming the call, and the others are written.
- **Nowhere to go** (the store is down and the spill file cannot be written: a full disk, a
  read-only folder): the records are held in memory and offered to the store and the spill
  file again, with the store's probe, until one takes them. Under ``fail_closed`` their
  callers wait until then, and new calls are refused before they are sent; under
  ``fail_open`` callers go on, and past ``max_records`` held the oldest are lost: counted
  (``lost``), logged, and written to the ledger as one ``RecordsLost`` row per group
  (configuration, user, tenant, key, team) with their tokens and cost once the store is back.
- **Close**: what was never acknowledged goes to the spill file; what cannot go there is
  lost, counted and logged (and a ``fail_closed`` caller still waiting gets
  ``UsageLedgerUnavailableError`` instead of its answer).
- **Start**: the first use replays any spill file (also one left by a crashed process) into
  the store, and removes it only once the store acknowledged; writes are idempotent per key,
  so a record replayed twice counts once. A poison record stays in the spill file.

**Write-ahead** (``write_ahead=True`` and ``fail_open``, ADR 0027): ``durable`` appends the record to this
process's write-ahead file (:mod:`provmw.stores.usage.write_ahead`) and returns ``"journaled"``
at once; the writer takes it to the store with the next batch, and removes full segments
once their records are stored.
A record so journaled survives kill -9 without waiting for a commit or a thread.

``fail_open`` never refuses a call. ``fail_closed`` refuses new calls with
``UsageLedgerUnavailableError`` (before they reach a provider) once ``max_records`` records
wait outside the store, or once records have nowhere durable to go; records of calls
already running are still kept, and those calls return only once their records are durable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Literal

from provmw.errors import UsageLedgerUnavailableError
from provmw.stores.usage import UsageRecord, UsageStore
from provmw.stores.usage.lost import LostRecords
from provmw.stores.usage.spill import SpillClaim, SpillFile
from provmw.stores.usage.write_ahead import Segment, WriteAheadFile

__all__ = ["FailurePolicy", "Outcome", "UsageJournal"]

log = logging.getLogger(__name__)

FailurePolicy = Literal["fail_open", "fail_closed"]
Outcome = Literal["stored", "spilled", "set_aside", "lost", "journaled", "held"]


class _Entry:
    """A queued record, its key, the future of whoever waits for it (None: nobody, so far), and
    whether it is in a write-ahead segment already (durable there until the segment is replayed)."""

    __slots__ = ("future", "journaled", "key", "record")

    def __init__(self, record: UsageRecord, key: tuple[str, int], future: asyncio.Future[Outcome] | None) -> None:
        self.record, self.key, self.future = record, key, future
        self.journaled = False


def _spill_beside(store: UsageStore) -> SpillFile | None:
    """The spill file a store declares (``spill_path``); a memory store has none."""
    path: Path | None = getattr(store, "spill_path", None)
    return SpillFile(path, fsync=getattr(store, "synchronous", "") == "FULL") if path is not None else None


class UsageJournal:
    """Records on their way to ``store``; owned by the manager's state, shared by ``usage`` and
    ``usage_hits``."""

    def __init__(self, store: UsageStore, *, spill: SpillFile | None = None, max_records: int = 50_000,
                 policy: FailurePolicy = "fail_open", batch_size: int = 1_000, retry_s: float = 0.05,
                 max_retry_s: float = 5.0, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 write_ahead: bool = False, linger_s: float = 0.02) -> None:
        self.store = store
        self.spill = spill if spill is not None else _spill_beside(store)
        # fail_closed refuses calls on what the store has not taken: its calls wait for the store.
        ahead = write_ahead and self.spill is not None and policy == "fail_open"
        self._ahead = WriteAheadFile(self.spill) if ahead and self.spill is not None else None
        # Records in the write-ahead file are safe already: the writer waits this long for more
        # to join a batch, so sequential calls share a commit and a thread hop too.
        self._linger_s = linger_s if self._ahead is not None else 0.0
        self._segments: list[Segment] = []  # sealed, their batch not yet in the store or the spill file
        self.max_records = max_records
        self.policy = policy
        self.spilled = 0  # records this journal put in the spill file
        self.commits = 0  # batches the store acknowledged
        self._batch_size = batch_size
        self._retry_s = retry_s
        self._max_retry_s = max_retry_s
        self._sleep = sleep
        self._queued: dict[tuple[str, int], _Entry] = {}
        self._inflight: dict[tuple[str, int], _Entry] = {}
        self._writer: asyncio.Task[None] | None = None
        self._taken: asyncio.Future[None] | None = None  # what ``room`` waits for: the writer's next take
        self._recovery: asyncio.Task[None] | None = None
        self._outside = 0  # spilled because the store was down, not yet replayed
        self._failing = False
        self._replayed = False
        self._held: dict[tuple[str, int], _Entry] = {}  # went nowhere: neither store nor spill file took them
        self._lost = LostRecords()

    @property
    def pending(self) -> int:
        """Records neither in the store nor in the spill file yet."""
        return len(self._queued) + len(self._inflight) + len(self._held)

    @property
    def lost(self) -> int:
        """Records lost: past ``max_records`` held under fail_open, or with nowhere to go at close."""
        return self._lost.count

    @property
    def held(self) -> int:
        """Records held in memory: neither the store nor the spill file could take them."""
        return len(self._held)

    @property
    def failing(self) -> bool:
        """Whether the store was found down and not yet found back."""
        return self._failing

    def admit(self) -> None:
        """Refuse a new call when a fail-closed journal holds too much outside the store."""
        if self.policy != "fail_closed":
            return
        if self._held:
            raise UsageLedgerUnavailableError(
                f"usage ledger: neither the store nor the spill file takes records ({len(self._held)} "
                "held in memory); refusing new calls (failure_policy=fail_closed)")
        outside = self.pending + self._outside
        if self.failing and outside >= self.max_records:
            raise UsageLedgerUnavailableError(
                f"usage ledger: the store is failing and {outside} records wait outside it "
                f"(max_journal_records={self.max_records}); refusing new calls (failure_policy=fail_closed)")

    def record(self, record: UsageRecord) -> None:
        """Queue ``record``, to be written or spilled without anyone waiting (a hit, a cancelled
        attempt). Never raises."""
        self._queue(record, None)

    async def room(self) -> None:
        """Return at once unless a whole batch waits for the writer; then wait until the writer
        takes it. A caller whose calls never give the loop a turn (a loop of cache hits: no
        socket to wait for) would otherwise queue records for as long as it runs."""
        if len(self._queued) < self._batch_size:
            return
        if self._taken is None:
            self._taken = asyncio.get_running_loop().create_future()
        # Shielded: one waiter cancelled must not cancel the others' future.
        await asyncio.shield(self._taken)

    async def durable(self, record: UsageRecord) -> Outcome:
        """Queue ``record`` and wait until it is in the store or the spill file, or only until it is
        in the write-ahead file when the journal keeps one."""
        # While the store fails, records go to the shared spill file anyway: calls wait for it, as
        # without a write-ahead file, so a failing store slows callers instead of growing the queue.
        if self._ahead is not None and not self._failing:
            try:
                self._ahead.append(record)
            except OSError as exc:  # the store's commit is still a durable point: wait for it
                log.warning("usage ledger: the write-ahead file failed (%s); waiting for the store", exc)
            else:
                self._queue(record, None)
                entry = self._queued.get(record.key)
                if entry is not None:
                    entry.journaled = True
                return "journaled"
        waited = self._queue(record, asyncio.get_running_loop().create_future())
        assert waited is not None
        # Shielded: a caller cancelled while waiting must not cancel the journal's future.
        return await asyncio.shield(waited)

    def _queue(self, record: UsageRecord, future: asyncio.Future[Outcome] | None) -> asyncio.Future[Outcome] | None:
        """Queue ``record`` once per key; return the future of its entry, ``future`` (None: nobody waits,
        and none is made) unless the key is queued already."""
        key = record.key
        entry = self._queued.get(key) or self._inflight.get(key) or self._held.get(key)
        if entry is not None:
            if entry.future is None:  # queued unwaited: whoever waits now gets its outcome
                entry.future = future
            return entry.future
        self._queued[key] = _Entry(record, key, future)
        self._queue_writer()
        return future

    async def flush(self) -> None:
        """Wait until every record so far is in the store or the spill file, and until a replay
        under way (the store came back) has finished."""
        while True:
            replaying = self._recovery if self._recovery is not None and not self._failing else None
            busy = [t for t in (self._writer, replaying) if t is not None and not t.done()]
            if not busy:
                return
            await asyncio.shield(asyncio.gather(*busy))

    async def recovered(self) -> None:
        """Wait until a failing store is found back and the spill file replayed into it."""
        if self._recovery is not None:
            await asyncio.shield(self._recovery)

    async def replay(self) -> None:
        """Write what the spill file holds into the store; keep it if the store fails."""
        self._replayed = True
        if self.spill is None or not await asyncio.to_thread(self.spill.exists):
            return
        outside, kept = self._outside, False
        for claim in await asyncio.to_thread(self.spill.claim):
            try:
                poison = [p for i in range(0, len(claim.records), self._batch_size)
                          for p in await self._commit(claim.records[i:i + self._batch_size])]
            except Exception as exc:  # still down: back to the spill file for the next start (or recovery)
                await self._put_back(claim)
                log.warning("usage ledger: replay of the spill file failed (%s); it stays for the next start", exc)
                kept = True
                continue
            except BaseException:  # cancelled (a close that could not wait): the claimed file stays, unlocked
                claim.release()
                raise
            await asyncio.to_thread(self.spill.append, poison)
            claim.done()
            log.warning("usage ledger: replayed %d records from the spill file", len(claim.records) - len(poison))
        if not kept:  # what was spilled during the replay is in a new file, not yet replayed
            self._outside -= outside

    async def _put_back(self, claim: SpillClaim) -> None:
        """Return a claim's records to the spill file; if that fails too (a full disk), the claim's own
        file keeps them for the next replay."""
        try:
            await asyncio.to_thread(self.spill.append, claim.records)  # type: ignore[union-attr]
        except OSError as exc:
            log.error("usage ledger: could not return %d records to the spill file (%s); they stay in %s",
                      len(claim.records), exc, claim.path.name)
            claim.release()
            return
        claim.done()

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """Write what is pending (for at most ``timeout_s``), spill the rest, then close the store."""
        try:
            await asyncio.wait_for(self.flush(), timeout_s)
        except TimeoutError:
            log.error("usage ledger: the store did not take %d records in %.1f s; spilling them",
                      self.pending, timeout_s)
        for task in (self._writer, self._recovery):
            if task is not None:
                task.cancel()
        left = [*self._held.values(), *self._inflight.values(), *self._queued.values()]
        self._held.clear()
        kept = await self._set_aside(left, "spilled", closing=True)
        self._inflight.clear()
        self._queued.clear()
        self._made_room()
        self._seal()
        self._close_segments(list(self._segments), kept)
        try:
            if self._outside:  # the store may be back: leave no spill file behind, if it answers in time
                await asyncio.wait_for(self.replay(), timeout_s)
        except TimeoutError:
            log.error("usage ledger: the store did not take the spilled records in %.1f s; they stay in the spill "
                      "file for the next start", timeout_s)
        finally:
            await self.store.aclose()

    async def _write_all(self) -> None:
        if not self._replayed:
            await self.replay()
        while self._queued:
            # Before every batch, records that came during the last one wait for more; a whole batch does not.
            if self._linger_s and len(self._queued) < self._batch_size:
                await self._sleep(self._linger_s)
            batch = self._take()  # everything queued: all that a segment sealed now holds
            sealed = self._seal() if self._ahead is not None and self._ahead.full else []
            kept = True
            for start in range(0, len(batch), self._batch_size):
                kept = await self._write(batch[start:start + self._batch_size]) and kept
            if not kept:  # the current segment holds some of what went nowhere: leave it to the next replay
                sealed += self._seal()
            self._close_segments(sealed, kept)

    async def _write(self, batch: list[_Entry]) -> bool:
        """Take ``batch`` to the store, or to the spill file; False when some of it went nowhere."""
        if self.failing:
            return await self._set_aside(batch, "spilled")
        try:
            poison = await self._commit([e.record for e in batch])
        except Exception as exc:  # the store is down: spill, and watch for its return
            self._start_recovery(exc)
            return await self._set_aside(batch, "spilled")
        if not poison:  # the usual: all of it stored
            self._settle(batch, "stored")
            return True
        keys = {record.key for record in poison}
        kept = await self._set_aside([e for e in batch if e.key in keys], "set_aside")
        self._settle([e for e in batch if e.key not in keys], "stored")
        return kept

    def _take(self) -> list[_Entry]:
        batch = list(self._queued.values())
        self._queued.clear()
        self._inflight.update((entry.key, entry) for entry in batch)
        self._made_room()
        return batch

    def _made_room(self) -> None:
        """The queue was emptied: whoever waits in ``room`` goes on."""
        if self._taken is not None:
            self._taken.set_result(None)
            self._taken = None

    def _seal(self) -> list[Segment]:
        sealed = self._ahead.seal() if self._ahead is not None else None
        if sealed is None:
            return []
        self._segments.append(sealed)
        return [sealed]

    def _close_segments(self, segments: list[Segment], kept: bool) -> None:
        """Remove segments whose records are all kept elsewhere; unlock the others for the next replay."""
        for segment in segments:
            self._segments.remove(segment)
            try:
                if kept:
                    segment.drop()
                else:
                    segment.keep()
            except OSError as exc:  # left behind: the next replay writes its records again, once
                log.warning("usage ledger: could not remove a write-ahead segment (%s)", exc)

    def _settle(self, entries: Sequence[_Entry], outcome: Outcome) -> None:
        for entry in entries:
            self._inflight.pop(entry.key, None)
            self._held.pop(entry.key, None)
            if entry.future is not None and not entry.future.done():
                entry.future.set_result(outcome)

    async def _set_aside(self, entries: Sequence[_Entry], outcome: Outcome, *, closing: bool = False) -> bool:
        """Put ``entries`` in the spill file; False when it failed (they are held, or lost at close)."""
        if not entries:
            return True
        records = [e.record for e in entries]
        try:
            if self.spill is None:
                raise OSError("this store declares no spill file")
            await asyncio.to_thread(self.spill.append, records)
        except OSError as exc:
            if closing or outcome == "set_aside":  # at close, or a record the store never takes
                self._lose(entries, f"the spill file failed ({exc})")
            else:
                self._hold(entries, exc)
            return False
        self.spilled += len(records)
        self._outside += len(records) if outcome == "spilled" else 0
        self._settle(entries, outcome)
        return True

    def _hold(self, entries: Sequence[_Entry], exc: OSError) -> None:
        """Keep ``entries`` in memory until the store or the spill file takes them (the probe offers
        them again); a fail_open journal lets their callers go on, and loses the oldest past its bound."""
        # One in a write-ahead segment is durable: the segment is kept for the next replay.
        self._settle([e for e in entries if e.journaled], "journaled")
        entries = [e for e in entries if not e.journaled]
        if not entries:
            return
        log.error("usage ledger: could not spill %d records (%s); holding them in memory until the store or the "
                  "spill file takes them", len(entries), exc)
        for entry in entries:
            self._inflight.pop(entry.key, None)
            self._held[entry.key] = entry
        self._start_recovery(exc)
        if self.policy == "fail_closed":
            return  # their callers wait: the answer goes back once its record is durable
        for entry in entries:
            if entry.future is not None and not entry.future.done():
                entry.future.set_result("held")
        over = len(self._held) - self.max_records
        if over > 0:
            oldest = list(self._held.values())[:over]
            for entry in oldest:
                del self._held[entry.key]
            self._lose(oldest, f"more than max_journal_records={self.max_records} held in memory")

    def _lose(self, entries: Sequence[_Entry], why: str) -> None:
        """Count ``entries`` as lost, and sum them per group for the ledger's RecordsLost rows."""
        for entry in entries:
            self._lost.add(entry.record)
        log.error("usage ledger: %d records lost (%s); %d lost so far in this process", len(entries), why, self.lost)
        for entry in entries:
            if entry.future is not None and not entry.future.done():
                entry.future.set_exception(UsageLedgerUnavailableError(
                    f"usage ledger: the record of call {entry.record.call_id} could not be made durable ({why})"))
                entry.future.exception()  # retrieved: a fail_open caller no longer waits for it

    async def _commit(self, records: Sequence[UsageRecord]) -> list[UsageRecord]:
        """Write ``records``; return those the store refuses on their own (poison)."""
        try:
            await self.store.write(records)
            self.commits += 1
            return []
        except UsageLedgerUnavailableError:
            raise
        except Exception as exc:
            if not await self._store_works():
                raise UsageLedgerUnavailableError(f"usage ledger: the store failed ({exc})") from exc
            return await self._isolate(records, exc)

    async def _isolate(self, records: Sequence[UsageRecord], error: Exception) -> list[UsageRecord]:
        if len(records) == 1:
            record = records[0]
            log.error("usage ledger: the store refuses the record of call %s attempt %d (correlation id %s): "
                      "%s: %s; set aside in the spill file", record.call_id, record.attempt,
                      record.correlation_id, type(error).__name__, error)
            return list(records)
        poison: list[UsageRecord] = []
        for part in (records[: len(records) // 2], records[len(records) // 2:]):
            try:
                await self.store.write(part)
            except UsageLedgerUnavailableError:
                raise
            except Exception as exc:
                poison += await self._isolate(part, exc)
        return poison

    async def _store_works(self) -> bool:
        try:
            await self.store.write([])  # takes the write lock, writes nothing
        except Exception:
            return False
        return True

    def _start_recovery(self, exc: Exception) -> None:
        if self._failing:
            return
        self._failing = True
        log.warning("usage ledger: store write failed (%s: %s); spilling records until it is back",
                    type(exc).__name__, exc)
        self._recovery = asyncio.get_running_loop().create_task(self._recover(), name="provmw-usage-recovery")

    async def _recover(self) -> None:
        delay = self._retry_s
        while True:
            await self._sleep(delay)
            if await self._store_works():
                break
            if self._held:  # the disk may have room again; they stay held until the spill file has them
                await self._set_aside(list(self._held.values()), "spilled")
            delay = min(delay * 2, self._max_retry_s)
        self._failing = False
        log.warning("usage ledger: store is back; replaying the spill file")
        for row in self._lost.take():
            self._queue(row, None)
        if self._held:  # what went nowhere goes to the store now, its waiters with it
            for key, entry in self._held.items():
                self._queued.setdefault(key, entry)
            self._held.clear()
            self._queue_writer()
        await self.replay()

    def _queue_writer(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_all(), name="provmw-usage-writer")

