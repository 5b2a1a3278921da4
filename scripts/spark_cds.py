"""Build (once) a class-data-sharing archive of the classes a Spark driver loads, and print its path.

The test suite starts a Spark JVM a hundred times or more (every runner, restart and reference
job), and on two cores much of each start is the JVM loading and verifying the same ten thousand
classes from Spark's jars. JDK 17's dynamic CDS archive keeps them parsed and verified in
a file the JVM maps at start (``-XX:SharedArchiveFile``): about 10 s off a 34 s runner life here.

    python scripts/spark_cds.py JVM_OPTIONS...   # prints var/cds/spark-<key>.jsa, or exits 1

The archive is made by running the runner for a few epochs of the built-in word count with
``-XX:ArchiveClassesAtExit`` and waiting for its JVM to write it at exit. Its name keys on the
Java version, PySpark's jars and the JVM options, since an archive is only valid for those;
a JVM given an archive it cannot use says so and starts without it, so a stale one costs time,
never a result. Exit 1 (and a reason on stderr) if it cannot be made: the caller goes on
without.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CDS_DIR = REPO / "var" / "cds"
DUMP_TIMEOUT_S = 600


def archive_key(jvm_options: list[str]) -> str:
    """What an archive is valid for: this Java, these jars, these options."""
    import pyspark

    java = subprocess.run(
        ["java", "-version"], capture_output=True, text=True, check=True
    ).stderr.strip()
    jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    digest = hashlib.sha256("\n".join([java, *jars, *jvm_options]).encode())
    return digest.hexdigest()[:16]


def _jvms_writing(archive: Path) -> list[int]:
    """The pids of JVMs started with ``-XX:ArchiveClassesAtExit=<archive>`` still running."""
    needle = f"-XX:ArchiveClassesAtExit={archive}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile
            continue
    return pids


def dump(archive: Path, jvm_options: list[str]) -> None:
    """Run the runner a few epochs with the archive written at its JVM's exit, then wait for it."""
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    with tempfile.TemporaryDirectory(prefix="spark-cds-") as tmp:
        env = {
            **os.environ,
            "SPARK_MASTER": "local[2]",
            "SPARK_SUBMIT_OPTS": " ".join([*jvm_options, f"-XX:ArchiveClassesAtExit={partial}"]),
        }
        log = Path(tmp) / "runner.log"
        cmd = [sys.executable, "-m", "workers", "run", "--pipeline", "wordcount",
               "--state-dir", str(Path(tmp) / "state"), "--no-spark-ui", "--trigger-interval",
               "0", "--rows-per-epoch", "2000", "--key-space", "1000", "--epochs", "3"]  # fmt: skip
        with log.open("wb") as out:
            done = subprocess.run(
                cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                timeout=DUMP_TIMEOUT_S, check=False,
            )  # fmt: skip
        if done.returncode != 0:
            tail = log.read_text("utf-8", errors="replace")[-2000:]
            raise RuntimeError(f"the runner exited {done.returncode}:\n{tail}")
        # the JVM outlives its Python driver by the time it takes to write the archive
        deadline = time.monotonic() + DUMP_TIMEOUT_S
        while _jvms_writing(partial):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the JVM writing {partial} did not exit")
            time.sleep(0.5)
    if not partial.exists():
        raise RuntimeError(f"the JVM exited without writing {partial}")
    partial.replace(archive)


def main(jvm_options: list[str]) -> int:
    try:
        archive = CDS_DIR / f"spark-{archive_key(jvm_options)}.jsa"
        if not archive.exists():
            CDS_DIR.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            print(f"building {archive} (once)", file=sys.stderr)
            dump(archive, jvm_options)
            for stale in CDS_DIR.glob("spark-*.jsa"):  # 170 MB each, for another Java or Spark
                if stale != archive:
                    stale.unlink()
            took = time.monotonic() - started
            print(f"built it in {took:.0f} s", file=sys.stderr)
    except Exception as exc:  # the suite runs without the archive, only slower
        print(f"no class-data-sharing archive: {exc}", file=sys.stderr)
        return 1
    print(archive)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
