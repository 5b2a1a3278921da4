"""Recovery partitions that last: snapshots of every fragment's state, restore at any size.

A snapshot is taken at a barrier: each PU task copies its store as of the epoch (a point-in-time
checkpoint, :meth:`workers.state.base.StateStore.checkpoint`) and the stream goes on; a Spark job
then writes the copies out into the pipeline's fixed number of recovery partitions, one task per
source PU, beside the following epochs. The snapshot exists once its manifest is written, last.
Restoring routes every vnode, by key range, to its owner under whatever mapping the job restarts
with, one task per target PU: resuming is rescaling (seed 004).

* :mod:`workers.recovery.format`: the manifest, typed; checksums.
* :mod:`workers.recovery.location`: where snapshots live (a directory, or any ``pyarrow.fs`` URI).
* :mod:`workers.recovery.tasks`: what a snapshot or restore task does on an executor.
* :mod:`workers.recovery.snapshots`: the driver's side of a snapshot: schedule, write job.
* :mod:`workers.recovery.restore`: the driver's side of a restore: checks, placements, job.
* :mod:`workers.recovery.rebuild`: lost stores found at a start, refilled from a snapshot.
* :mod:`workers.recovery.startup`: what the runner does of it before its first epoch (restore,
  or check and rebuild) and after a clean stop (the stores' checksums).
"""
