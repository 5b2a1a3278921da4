"""Each PU's epoch task on its home executor: the shuffle partition of PU i prefers the
executor of PU i's worker.

Spark places a task by its partition's preferred locations, and a location
``executor_<host>_<id>`` names one executor. PySpark's DataFrame API has no say in a shuffle
partition's preferences, so the partitions of an epoch's routed records are handed to a small
JVM class, ``rescaler.spark.PinnedRDD`` (``workers/jvm/PinnedRDD.java``): the same partitions,
each with its PU's location. The DataFrame made from it is what the PU tasks' ``mapInArrow``
runs over; nothing is copied, and the routing and the shuffle stay Spark SQL's.

The class is compiled once per Spark version with the JDK's ``javac`` into ``var/jvm`` (or
``RESCALER_JVM_DIR``), or taken prebuilt from ``RESCALER_SPARK_JAR``; the runner adds it to
``spark.jars``, which gives it to every executor. In local mode there is one executor and no
pinning.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).parent / "jvm" / "PinnedRDD.java"
CLASS = "rescaler.spark.PinnedRDD"


class PinningError(Exception):
    """The JVM class that pins PU tasks cannot be found or built; the message says what to do."""


def location(host: str, executor_id: str) -> str:
    """Spark's name of one executor as a preferred location (``ExecutorCacheTaskLocation``)."""
    return f"executor_{host}_{executor_id}"


def executor_of(where: str) -> str:
    """The executor id a :func:`location` names ("" for none)."""
    return where.rsplit("_", 1)[1] if where.startswith("executor_") else ""


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def jar_path() -> Path:
    """The jar holding ``rescaler.spark.PinnedRDD``: ``RESCALER_SPARK_JAR`` when set, else one
    built from the source for this Spark (see :func:`build_jar`)."""
    given = os.environ.get("RESCALER_SPARK_JAR")
    if given:
        path = Path(given)
        if not path.is_file():
            raise PinningError(f"RESCALER_SPARK_JAR={given} is not a file; unset it to build one")
        return path
    default = Path(__file__).resolve().parents[1] / "var" / "jvm"
    return build_jar(Path(os.environ.get("RESCALER_JVM_DIR") or default))


def build_jar(directory: Path) -> Path:
    """Compile the class against this Spark's jars into ``directory`` once (the jar's name holds
    a digest of the source and of the jars' names, so another Spark builds another)."""
    jars = _spark_jars()
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update("\n".join(sorted(p.name for p in jars.glob("*.jar"))).encode())
    jar = Path(directory) / f"rescaler-spark-{digest.hexdigest()[:12]}.jar"
    if jar.is_file():
        return jar
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    java_home = os.environ.get("JAVA_HOME")
    if java_home and not (javac and jar_tool):
        javac = javac or shutil.which("javac", path=str(Path(java_home) / "bin"))
        jar_tool = jar_tool or shutil.which("jar", path=str(Path(java_home) / "bin"))
    if not javac or not jar_tool:
        raise PinningError(
            "pinning PU tasks to their executors needs rescaler.spark.PinnedRDD, built with a "
            "JDK's javac and jar (found no JDK: install openjdk-17-jdk-headless), or a prebuilt "
            "jar in RESCALER_SPARK_JAR (python -m workers.pinning DIR builds one)"
        )
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as work:
        classes = Path(work) / "classes"
        for argv in (
            [javac, "-nowarn", "-d", str(classes), "-cp", f"{jars}/*", str(SOURCE)],
            [jar_tool, "cf", str(Path(work) / jar.name), "-C", str(classes), "."],
        ):
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise PinningError(f"building {jar.name} failed: {done.stderr.strip()[-2000:]}")
        os.replace(Path(work) / jar.name, jar)  # atomic: a concurrent start finds a whole jar
    return jar


def with_jar(conf: dict[str, str], jar: Path) -> dict[str, str]:
    """``conf`` with the jar added to ``spark.jars`` (after any the user gave)."""
    jars = [j for j in conf.get("spark.jars", "").split(",") if j]
    return {**conf, "spark.jars": ",".join([*jars, str(jar)])}


def pin(df: Any, locations: list[str | None]) -> Any:
    """``df``'s partitions as a DataFrame whose partition i prefers ``locations[i]`` (None: no
    preference of its own). ``df`` must have exactly ``len(locations)`` partitions: an epoch's
    routed records, one partition per PU."""
    from pyspark.sql import DataFrame

    spark = df.sparkSession
    jvm = spark.sparkContext._jvm
    jdf = df._jdf
    # one string, not a Java array filled element by element: a py4j round trip per PU, at
    # every epoch, for every fragment
    names = ",".join(where or "" for where in locations)
    pinned = jvm.rescaler.spark.PinnedRDD(jdf.queryExecution().toRdd(), names)
    return DataFrame(
        spark._jsparkSession.internalCreateDataFrame(pinned, jdf.schema(), False), spark
    )


if __name__ == "__main__":  # python -m workers.pinning DIR: build the jar into DIR (an image)
    print(build_jar(Path(sys.argv[1] if len(sys.argv) > 1 else "var/jvm")))
