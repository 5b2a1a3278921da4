"""scripts/spark_cds.py, the suite's class-data-sharing archive, without building one: what the
archive's name keys on, how the JVM writing it is found, and that a failure leaves the suite to
run without it (exit 1 and the reason) rather than stopping it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts import spark_cds


def test_the_archive_is_named_for_the_jvm_options_it_was_made_with() -> None:
    c1 = spark_cds.archive_key(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
    assert c1 == spark_cds.archive_key(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
    assert c1 != spark_cds.archive_key(["-XX:+UseSerialGC"])


def test_the_jvm_still_writing_the_archive_is_found_by_its_command_line(tmp_path: Path) -> None:
    archive = tmp_path / "spark.partial"
    # any process whose command line names the archive stands in for the JVM
    writer = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"-XX:ArchiveClassesAtExit={archive}"]
    )
    try:
        # Popen may return while the child is still in exec, its command line empty
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{writer.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert spark_cds._jvms_writing(archive) == [writer.pid]
        assert spark_cds._jvms_writing(tmp_path / "other.partial") == []
    finally:
        writer.kill()
        writer.wait()
    assert spark_cds._jvms_writing(archive) == []


def test_an_archive_that_cannot_be_made_leaves_the_suite_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(spark_cds, "CDS_DIR", tmp_path / "cds")
    monkeypatch.setattr(spark_cds, "archive_key", lambda options: "k")

    def fails(archive: Path, options: list[str]) -> None:
        raise RuntimeError("the runner exited 1")

    monkeypatch.setattr(spark_cds, "dump", fails)
    assert spark_cds.main(["-XX:+UseSerialGC"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "no class-data-sharing archive: the runner exited 1" in err


def test_an_archive_already_made_is_printed_and_older_ones_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cds = tmp_path / "cds"
    cds.mkdir()
    (cds / "spark-k.jsa").write_bytes(b"")
    monkeypatch.setattr(spark_cds, "CDS_DIR", cds)
    monkeypatch.setattr(spark_cds, "archive_key", lambda options: "k")
    assert spark_cds.main([]) == 0
    assert capsys.readouterr().out.strip() == str(cds / "spark-k.jsa")

    monkeypatch.setattr(spark_cds, "archive_key", lambda options: "new")
    monkeypatch.setattr(spark_cds, "dump", lambda archive, options: archive.write_bytes(b"x"))
    assert spark_cds.main([]) == 0
    assert sorted(p.name for p in cds.iterdir()) == ["spark-new.jsa"]
