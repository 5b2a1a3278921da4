"""The runner's SparkSession: configured for epoch jobs (one task per PU, no partition
coalescing), and what the runner reports of it."""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

from workers.config import RunnerConfig
from workers.layout import LOCAL_DIR
from workers.pinning import jar_path, with_jar
from workers.spark_tasks import scheduler_conf

log = logging.getLogger("workers.runner")

CHECKPOINT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def build_spark(config: RunnerConfig, app_name: str) -> Any:
    """A SparkSession configured for epoch jobs (one task per PU, no partition coalescing)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app_name)
        .master(config.spark_master)
        # one task per PU: adaptive execution must not coalesce or split the PU partitions
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(max(config.pus_per_worker, 2)))
        .config("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_MANAGER)
        .config("spark.ui.enabled", "true" if config.spark_ui else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50000")
        .config("spark.sql.streaming.minBatchesToRetain", "20")
        # a decommissioning executor (its worker got SIGPWR, its pod an eviction) is the
        # worker's preemption notice (docs/elastic-workers.md, "Preemption")
        .config("spark.decommission.enabled", "true")
    )
    conf = {**scheduler_conf(config.pipeline_dir), **dict(config.spark_conf)}
    if config.executor_dir:  # where every executor keeps its PUs' stores (workers/layout.py)
        conf.setdefault(f"spark.executorEnv.{LOCAL_DIR}", config.executor_dir)
    if not config.is_local:  # each PU's task on its home executor (workers/pinning.py)
        conf = with_jar(conf, jar_path())
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # no Python data source is registered here: the first registration makes Spark look for
    # installed ones in a Python process of its own (a second or two of every start), which a
    # pipeline on a JVM source (Kafka, files) never needs; EpochJob registers the one it reads
    return spark


def spark_info(spark: Any) -> dict[str, Any]:
    sc = spark.sparkContext
    try:
        alive = not sc._jsc.sc().isStopped()
        executors = max(sc._jsc.sc().getExecutorMemoryStatus().size() - 1, 1)
    except Exception:  # stopped, or the JVM is gone: report Spark as down, the heartbeat says so
        return {"alive": False, "master": sc.master, "app_id": ""}
    return {
        "alive": alive,
        "master": sc.master,
        "app_id": sc.applicationId,
        "ui_url": sc.uiWebUrl or "",
        "version": sc.version,
        "executors": executors,
    }


def stop_spark(spark: Any, timeout_s: float = 60.0) -> bool:
    """``spark.stop()``, waited for at most ``timeout_s``: a runner that is ending (refused,
    failed or done) must end, even if the JVM's stop hangs; the JVM then goes with the runner's
    process (it exits when its standard input closes). Whether it stopped in time."""
    stopper = threading.Thread(target=spark.stop, name="spark-stop", daemon=True)
    stopper.start()
    stopper.join(timeout_s)
    if stopper.is_alive():
        log.warning(
            "Spark did not stop within %.0f s; the runner ends anyway and its JVM with it",
            timeout_s,
        )
        return False
    return True
