"""The runner's configuration: one frozen, validated object, read from arguments and environment."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from workers.state import BACKENDS, DEFAULT_BACKEND


class ConfigError(ValueError):
    """A configuration value is invalid; the message says which and what is allowed."""


def default_state_dir() -> Path:
    return Path(os.environ.get("STATE_DIR") or Path.cwd() / "var" / "state")


def _local_cores(master: str) -> int | None:
    match = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if master == "local":
        return 1
    if not match:
        return None
    return os.cpu_count() or 1 if match.group(1) == "*" else int(match.group(1))


#: what turns a boolean RESCALER_* variable off
FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class RunnerConfig:
    pipeline: str = "wordcount"  # the pipeline's name: its state is under state_dir / pipeline
    # what defines it: a built-in's name or package.module:function ("": the name, a built-in)
    pipeline_ref: str = ""
    # "": the pipeline's own source (Pipeline.source), else the generator; "generator";
    # "dir:PATH" (JSON-lines files); "nats:STREAM" (a JetStream stream at nats_url)
    source: str = ""
    # a sink URI (workers.sinks.sink_from_uri) replacing the pipeline's own; "": Pipeline.sink,
    # else for a built-in the Arrow debugging files ("files")
    sink: str = ""
    nats_url: str = "nats://127.0.0.1:4222"  # the JetStream source's server (RESCALER_NATS_URL)
    epochs: int | None = None  # stop after this many committed epochs; None: run until stopped
    # the generator's records in all (then it is an idle stream); None: epochs x rows_per_epoch
    source_rows: int | None = None
    rows_per_epoch: int = 10_000
    key_space: int = 100_000
    zipf_s: float = 1.1
    seed: int = 7
    pages: int = 500
    words_per_line: int = 4
    vnodes: int | None = None  # vnodes per fragment (RESCALER_VNODES); None: the pipeline's own
    state_dir: Path = field(default_factory=default_state_dir)
    spark_master: str = "local[2]"
    trigger_interval_s: float = 1.0
    # seconds without an epoch after which waiting control work forces an empty one (idle.py)
    idle_barrier_s: float = 0.5
    backend: str = DEFAULT_BACKEND
    # fold the records of operators with aggregates per key in Spark, before they reach the PU's
    # Python task (workers.partials; RESCALER_PREAGGREGATE=1); off by default: it did not pay on
    # the steady-state benchmark (docs/data-plane.md, "Pre-aggregation")
    preaggregate: bool = False
    parallel_units: int | None = None  # PUs each worker offers; None: its cores
    initial_pus: int = 2  # PUs each stateful fragment starts on
    source_partitions: int = 2
    max_files_per_epoch: int = 64
    spark_ui: bool = True
    heartbeat_interval_s: float = 2.0
    max_query_restarts: int = 3  # consecutive failures of the streaming query before giving up
    # how long the runner waits out an unreachable control plane (its database restarting)
    # before it gives up; meanwhile epochs wait at the barrier (workers.control.PatientControl)
    control_patience_s: float = 600.0
    spark_conf: tuple[tuple[str, str], ...] = ()
    # bounded hold queues (docs/rescale.md, "Bounded hold queues"): once a collecting step's held
    # records reach hold_queue_step_bytes, or a target PU's reach hold_queue_pu_bytes, the next
    # epoch waits at its barrier until the step's export is verified and it is acquired
    # (RESCALER_HOLD_QUEUE_STEP_BYTES, RESCALER_HOLD_QUEUE_PU_BYTES)
    hold_queue_step_bytes: int = 256 * 1024**2
    hold_queue_pu_bytes: int = 1024**3
    # a cluster master (spark://…, k8s://…): how often the barrier reads Spark's executors, how
    # long the start waits for executors that give the pipeline its initial PUs, and how long a
    # restart waits for one executor per worker that was alive (its PUs go to the others after)
    executor_poll_s: float = 1.0
    executors_wait_s: float = 120.0
    rebind_wait_s: float = 20.0
    # snapshots into recovery partitions (workers/recovery): how often (RESCALER_SNAPSHOT_EVERY:
    # "20" epochs, "90s", "5m"; "" off), where (RESCALER_RECOVERY_DIR: a directory or a pyarrow.fs
    # URI; "": <state_dir>/../recovery), how many are kept, and P (fixed when the state is created)
    snapshot_every: str = ""
    recovery_dir: str = ""
    snapshots_kept: int = 3
    recovery_partitions: int = 16
    # start from a snapshot ("latest" or its id) into an empty state directory, at initial_pus
    restore_from: str | None = None
    # the pipeline's durable location, for what must outlive an executor and cross between
    # executors: a live rescale's exports and hold queues, a stop-start's snapshot
    # (RESCALER_DURABLE_LOCATION: a directory or a pyarrow.fs URI, the pipeline's files under
    # <it>/<pipeline>; "": the pipeline's state directory)
    durable_location: str = ""
    # every executor's own directory for its PUs' stores (RESCALER_LOCAL_DIR, given to the
    # executors as spark.executorEnv); "": on a cluster each executor's own RESCALER_LOCAL_DIR,
    # else under Spark's local directories; in local mode <state_dir>/../executors/driver
    local_dir: str = ""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {BACKENDS}, not {self.backend!r}")
        if not (
            self.source in ("", "generator")
            or (self.source.startswith("dir:") and len(self.source) > 4)
            or (self.source.startswith("nats:") and len(self.source) > 5)
        ):
            raise ConfigError(
                f"source must be 'generator', 'dir:PATH' or 'nats:STREAM' (or empty for the "
                f"pipeline's own), not {self.source!r}"
            )
        if self.source.startswith("nats:"):
            from workers.natsio import check_stream_name

            try:
                check_stream_name(self.source[5:])
            except ValueError as exc:
                raise ConfigError(f"source {self.source!r}: {exc}") from None
        if self.sink:
            from workers.sinks.factory import sink_from_uri

            try:
                sink_from_uri(self.sink)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        for name in ("rows_per_epoch", "key_space", "vnodes", "initial_pus", "source_partitions"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
        for name in ("hold_queue_step_bytes", "hold_queue_pu_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1 byte")
        if not 0 < self.idle_barrier_s <= 3600:
            raise ConfigError("idle_barrier_s must be above 0 and at most 3600 seconds")
        if not 0 < self.control_patience_s <= 86_400:
            raise ConfigError("control_patience_s must be above 0 and at most 86400 seconds")
        from workers.recovery.snapshots import SnapshotEvery

        try:
            SnapshotEvery.parse(self.snapshot_every)
        except ValueError as exc:
            raise ConfigError(f"RESCALER_SNAPSHOT_EVERY: {exc}") from None
        if not 1 <= self.recovery_partitions <= 4096:
            raise ConfigError("recovery_partitions must be between 1 and 4096")
        if self.snapshots_kept < 1:
            raise ConfigError("snapshots_kept must be at least 1")
        if self.epochs is not None and self.epochs < 1:
            raise ConfigError("epochs must be at least 1 when given")
        if self.is_local and self.initial_pus > self.pus_per_worker:
            raise ConfigError(
                f"initial_pus ({self.initial_pus}) exceeds the PUs the worker offers "
                f"({self.pus_per_worker}); set RESCALER_PARALLEL_UNITS higher"
            )

    @property
    def is_local(self) -> bool:
        """Spark's local mode: one JVM, the driver, is the one worker."""
        return self.spark_master.startswith("local")

    @property
    def pus_per_worker(self) -> int:
        if self.parallel_units is not None:
            return self.parallel_units
        return _local_cores(self.spark_master) or 2

    @property
    def ref(self) -> str:
        """The pipeline's definition, for ``workers.pipeline.loading.load_pipeline``."""
        return self.pipeline_ref or self.pipeline

    @property
    def pipeline_dir(self) -> Path:
        return Path(self.state_dir) / self.pipeline

    @property
    def recovery_location(self) -> str:
        """Where snapshots go: RESCALER_RECOVERY_DIR, else ``recovery`` beside the state
        directory (never inside it: losing the state must not lose its snapshots)."""
        return self.recovery_dir or str(Path(self.state_dir).absolute().parent / "recovery")

    @property
    def durable(self) -> str:
        """The root of the pipeline's durable location (:mod:`workers.storage`)."""
        if not self.durable_location:
            return str(self.pipeline_dir.absolute())
        base, _, query = self.durable_location.partition("?")
        if "://" not in base:
            base = str(Path(base).absolute())
        return f"{base.rstrip('/')}/{self.pipeline}" + (f"?{query}" if query else "")

    @property
    def executor_dir(self) -> str:
        """The directory the runner gives every executor for its stores ("": none, each
        executor keeps its own). In local mode the driver is the one executor: its directory is
        ``executors/driver`` beside the state directory, laid out as on a cluster."""
        if self.local_dir:
            return str(Path(self.local_dir).absolute())
        if self.is_local:
            return str(Path(self.state_dir).absolute().parent / "executors" / "driver")
        return ""

    @property
    def source_dir(self) -> Path | None:
        return Path(self.source[4:]) if self.source.startswith("dir:") else None

    @property
    def source_stream_name(self) -> str | None:
        """The JetStream stream of a ``nats:STREAM`` source."""
        return self.source[5:] if self.source.startswith("nats:") else None

    @classmethod
    def from_env(cls, **overrides: Any) -> RunnerConfig:
        """Defaults, then RESCALER_* / SPARK_MASTER / STATE_DIR, then explicit overrides."""
        env: dict[str, Any] = {}
        if os.environ.get("SPARK_MASTER"):
            env["spark_master"] = os.environ["SPARK_MASTER"]
        if os.environ.get("RESCALER_PARALLEL_UNITS"):
            env["parallel_units"] = int(os.environ["RESCALER_PARALLEL_UNITS"])
        if os.environ.get("RESCALER_INITIAL_PUS"):
            env["initial_pus"] = int(os.environ["RESCALER_INITIAL_PUS"])
        if os.environ.get("RESCALER_STATE_BACKEND"):
            env["backend"] = os.environ["RESCALER_STATE_BACKEND"]
        if os.environ.get("RESCALER_VNODES"):
            env["vnodes"] = int(os.environ["RESCALER_VNODES"])
        if os.environ.get("RESCALER_PREAGGREGATE"):
            env["preaggregate"] = os.environ["RESCALER_PREAGGREGATE"].lower() not in FALSE
        if os.environ.get("RESCALER_SINK"):
            env["sink"] = os.environ["RESCALER_SINK"]
        if os.environ.get("RESCALER_NATS_URL"):
            env["nats_url"] = os.environ["RESCALER_NATS_URL"]
        for name, var in (
            ("hold_queue_step_bytes", "RESCALER_HOLD_QUEUE_STEP_BYTES"),
            ("hold_queue_pu_bytes", "RESCALER_HOLD_QUEUE_PU_BYTES"),
        ):
            if os.environ.get(var):
                env[name] = int(os.environ[var])
        if os.environ.get("RESCALER_CONTROL_PATIENCE_S"):
            env["control_patience_s"] = float(os.environ["RESCALER_CONTROL_PATIENCE_S"])
        for name, var in (
            ("snapshot_every", "RESCALER_SNAPSHOT_EVERY"),
            ("recovery_dir", "RESCALER_RECOVERY_DIR"),
            ("durable_location", "RESCALER_DURABLE_LOCATION"),
            ("local_dir", "RESCALER_LOCAL_DIR"),
        ):
            if os.environ.get(var):
                env[name] = os.environ[var]
        for name, var in (
            ("snapshots_kept", "RESCALER_SNAPSHOTS_KEPT"),
            ("recovery_partitions", "RESCALER_RECOVERY_PARTITIONS"),
        ):
            if os.environ.get(var):
                env[name] = int(os.environ[var])
        env.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**env)

    def with_(self, **changes: Any) -> RunnerConfig:
        return replace(self, **changes)
