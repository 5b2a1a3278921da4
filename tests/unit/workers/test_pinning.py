"""The jar that pins PU tasks to their home executors (workers/pinning.py): built once per
source and Spark, taken prebuilt when given, refused with what to do when it can be neither."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers import pinning


def test_the_jar_is_built_once_and_holds_the_class(tmp_path: Path) -> None:
    import zipfile

    jar = pinning.build_jar(tmp_path)
    assert jar.parent == tmp_path and jar.name.startswith("rescaler-spark-")
    assert "rescaler/spark/PinnedRDD.class" in zipfile.ZipFile(jar).namelist()
    built_at = jar.stat().st_mtime_ns
    assert pinning.build_jar(tmp_path) == jar and jar.stat().st_mtime_ns == built_at
    assert [p.name for p in tmp_path.iterdir()] == [jar.name]  # no build directory left


def test_a_prebuilt_jar_is_taken_and_a_missing_one_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = tmp_path / "given.jar"
    given.write_bytes(b"PK")
    monkeypatch.setenv("RESCALER_SPARK_JAR", str(given))
    assert pinning.jar_path() == given
    monkeypatch.setenv("RESCALER_SPARK_JAR", str(tmp_path / "nowhere.jar"))
    with pytest.raises(pinning.PinningError, match="is not a file"):
        pinning.jar_path()


def test_without_a_jdk_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pinning.shutil, "which", lambda *_a, **_k: None)
    with pytest.raises(pinning.PinningError, match="openjdk-17-jdk-headless"):
        pinning.build_jar(tmp_path)


def test_the_jar_joins_the_users_spark_jars() -> None:
    assert pinning.with_jar({}, Path("/j/r.jar")) == {"spark.jars": "/j/r.jar"}
    conf = pinning.with_jar({"spark.jars": "a.jar,b.jar", "x": "1"}, Path("/j/r.jar"))
    assert conf == {"spark.jars": "a.jar,b.jar,/j/r.jar", "x": "1"}
    assert pinning.location("10.0.0.7", "3") == "executor_10.0.0.7_3"
