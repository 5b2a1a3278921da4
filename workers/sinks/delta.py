"""An exactly-once Delta Lake sink on delta-rs (the ``deltalake`` package, no JVM connector).

Each (epoch, PU) is appended as one Delta commit that also records the app transaction
``Transaction(app_id=f"rescaler:{fragment}:{pu}", version=epoch)`` (Delta's ``txn`` action, the
mechanism Spark's own Delta sink uses for idempotent writes). Before appending, the sink reads the
version the table records for that app id and skips the write when it is already ``>= epoch``.

Why that is exactly-once: the data files and the ``txn`` action land in the same atomic commit, so
the table records the write exactly when the rows are visible. The check and the write use the
same snapshot (the write is made through the :class:`DeltaTable` the check read); if another
attempt of the same (fragment, epoch, PU) commits in between, delta-rs's conflict checker refuses
ours ("Concurrent transaction failed", it conflicts on the app id), the sink reloads, finds the
version and skips. Appends of other PUs do not conflict: the commit is retried on the new version.

The table is a changelog: every output row of every epoch, with the columns ``epoch`` and ``pu``
added. It gets one commit per PU per epoch, so compact it (``DeltaTable.optimize.compact()``) and
``vacuum`` it on a schedule; delta-rs writes a checkpoint every 100 commits (Delta's default).
"""

from __future__ import annotations

import re

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, SchemaMismatchError

from workers.sinks.base import EpochOutputs, Sink, SinkError

ADDED_COLUMNS = ("epoch", "pu")


def app_id(fragment: str, pu: int) -> str:
    """The Delta app id whose transaction version is the last epoch (fragment, pu) wrote."""
    return f"rescaler:{fragment}:{pu}"


class DeltaSink(Sink):
    """Appends each (epoch, PU)'s outputs to the Delta table at ``uri`` once.

    ``uri``: a local path or an object-store URI (``s3://``, ``gs://``, ``az://``, ``file://``);
    ``storage_options`` go to delta-rs (credentials, endpoints). With ``create`` (the default) a
    missing table is created from the first outputs' schema (plus ``epoch`` and ``pu``, int64);
    without it a missing table is a :class:`SinkError`. ``max_attempts`` bounds the retries of a
    commit that lost a race with other PUs' commits.
    """

    def __init__(
        self,
        uri: str,
        *,
        storage_options: dict[str, str] | None = None,
        create: bool = True,
        max_attempts: int = 20,
    ) -> None:
        if not uri:
            raise ValueError("DeltaSink needs a table location")
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        self.create = create
        self.max_attempts = max(1, max_attempts)
        self._table: DeltaTable | None = None

    def describe(self) -> str:
        return f"delta {self.uri}"

    def close(self) -> None:
        self._table = None

    def _load(self) -> DeltaTable | None:
        """The table at its latest version, None when there is none."""
        if self._table is not None:
            self._table.update_incremental()
            return self._table
        if not DeltaTable.is_deltatable(self.uri, self.storage_options or None):
            return None
        self._table = DeltaTable(self.uri, storage_options=self.storage_options or None)
        return self._table

    def _create(self, schema: pa.Schema) -> None:
        if not self.create:
            raise SinkError(
                f"Delta table at {self.uri} does not exist: create it (or let the sink create "
                f"it from the first outputs: DeltaSink(..., create=True))"
            )
        try:
            DeltaTable.create(
                self.uri, schema, mode="ignore", storage_options=self.storage_options or None
            )
        except CommitFailedError:
            pass  # another PU created it at the same moment: the caller reloads it

    def last_epoch(self, fragment: str) -> int | None:
        """From the table's recent commits (each records ``fragment epoch E PU P``)."""
        table = self._load()
        if table is None:
            return None
        epochs = []
        for commit in table.history(limit=200):
            found = re.fullmatch(
                rf"{re.escape(fragment)} epoch (\d+) PU \d+", str(commit.get("rescaler", ""))
            )
            if found:
                epochs.append(int(found.group(1)))
        return max(epochs, default=None)

    @staticmethod
    def _with_epoch(outputs: EpochOutputs) -> pa.Table:
        table = outputs.table
        clash = [c for c in ADDED_COLUMNS if c in table.column_names]
        if clash:
            raise SinkError(
                f"the outputs of {outputs.fragment} have column(s) {', '.join(clash)}, which the "
                f"Delta sink adds itself; rename them in the operator's output_fields"
            )
        n = table.num_rows
        table = table.append_column("epoch", pa.array([outputs.epoch] * n, pa.int64()))
        return table.append_column("pu", pa.array([outputs.pu] * n, pa.int64()))

    def write(self, outputs: EpochOutputs) -> bool:
        data = self._with_epoch(outputs)
        app = app_id(outputs.fragment, outputs.pu)
        properties = CommitProperties(
            app_transactions=[Transaction(app_id=app, version=outputs.epoch)],
            custom_metadata={
                "rescaler": f"{outputs.fragment} epoch {outputs.epoch} PU {outputs.pu}"
            },
        )
        last: Exception | None = None
        for _ in range(self.max_attempts):
            try:
                table = self._load()
                if table is None:
                    self._create(data.schema)
                    continue
                done = table.transaction_version(app)
                if done is not None and done >= outputs.epoch:
                    return False
                # through the checked snapshot: a concurrent commit of the same app id conflicts
                write_deltalake(table, data, mode="append", commit_properties=properties)
                return True
            except CommitFailedError as exc:
                last = exc  # lost a race: reload, re-check, retry
                self._table = None
            except SchemaMismatchError as exc:
                raise SinkError(
                    f"{self.describe()}: the outputs of {outputs.fragment} do not match the "
                    f"table's schema ({exc}); write to a new table or migrate this one"
                ) from exc
            except DeltaError as exc:
                raise SinkError(
                    f"{self.describe()}: writing {outputs.fragment} epoch {outputs.epoch} PU "
                    f"{outputs.pu} failed, nothing was committed: {exc}"
                ) from exc
            except OSError as exc:
                raise SinkError(
                    f"{self.describe()}: the table's storage is not reachable or writable: {exc}"
                ) from exc
        raise SinkError(
            f"{self.describe()}: {outputs.fragment} epoch {outputs.epoch} PU {outputs.pu} lost "
            f"{self.max_attempts} commit races in a row; nothing was committed ({last})"
        )
