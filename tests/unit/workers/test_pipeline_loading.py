"""Pipelines from the user's module: loading by reference, and one clear message for each way a
definition can be wrong, before any Spark starts."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers import cli
from workers.pipeline.loading import load_pipeline, record, registered
from workers.pipeline.model import InvalidPipeline, PipelineError, UnknownPipeline

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

HEADER = """
from workers.operators import Count, UserActivity
from workers.pipeline import Fragment, Pipeline
from workers.processor import ProcessorOperator
from userpipe.sessions import Sessions, OUTPUT, COLUMNS, prepare

def events(*fragments, **kw):
    return Pipeline(name=kw.pop("name", "mine"), source_kind="events", fragments=fragments,
                    prepare=prepare, **kw)
"""


@pytest.fixture
def module(tmp_path: Path) -> Iterator[object]:
    """Write a module of build functions under a unique name; yield a writer of one."""
    sys.path.insert(0, str(tmp_path))
    sys.path.insert(0, str(FIXTURES))
    names: list[str] = []

    def write(body: str) -> str:
        name = f"userdef_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(HEADER + textwrap.dedent(body))
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)
    sys.path.remove(str(tmp_path))
    sys.path.remove(str(FIXTURES))


def test_builtins_are_references_like_any_other() -> None:
    assert load_pipeline("wordcount").name == "wordcount"
    assert load_pipeline("workers.pipeline.builtins:clickstream").name == "clickstream"
    assert {f.vnodes for f in load_pipeline("clickstream", 64).fragments} == {64}


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("nope", "give a built-in (clickstream, wordcount) or package.module:function"),
        ("no_such_module_here:build", "cannot import 'no_such_module_here'"),
        ("workers.pipeline.builtins:nothing", "has no function 'nothing'"),
        ("workers.pipeline.builtins:get_pipeline", "missing 1 required positional argument"),
    ],
)
def test_references_that_lead_nowhere(ref: str, message: str) -> None:
    with pytest.raises(
        (UnknownPipeline, TypeError), match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        load_pipeline(ref)


BAD = {
    "not a pipeline": (
        "def build():\n    return 42\n",
        "returned int, not a workers.pipeline.Pipeline",
    ),
    "duplicate": (
        """
        def build():
            return events(Fragment("a", Count(), key="user", region=1),
                          Fragment("a", Count(), key="key", region=2, upstream="a"))
        """,
        "two fragments are named 'a'",
    ),
    "unknown upstream": (
        """
        def build():
            return events(Fragment("a", Count(), key="user", region=1),
                          Fragment("b", Count(), key="key", region=2, upstream="zz"))
        """,
        "has upstream 'zz'.*no earlier fragment has that name",
    ),
    "vnodes": (
        """
        def build():
            return events(Fragment("a", Count(), key="user", region=1, vnodes=70000))
        """,
        "vnodes must be in 1..65536",
    ),
    "unpicklable": (
        """
        import threading
        class Locked(Count):
            def __init__(self):
                self.lock = threading.Lock()
        def build():
            return events(Fragment("a", Locked(), key="user", region=1))
        """,
        "cannot be pickled for Spark's executors",
    ),
    "not an operator": (
        """
        def build():
            return events(Fragment("a", Sessions(), key="user", region=1))
        """,
        "is not a KeyedOperator; wrap a StatefulProcessor",
    ),
    "event time": (
        """
        def build():
            op = ProcessorOperator(Sessions(), columns=COLUMNS, output_schema=OUTPUT,
                                   time_mode="EventTime")
            return events(Fragment("a", op, key="user", region=1))
        """,
        "runs in EventTime: give the pipeline event_time",
    ),
    "event time after another fragment": (
        """
        def build():
            first = ProcessorOperator(Sessions(), columns=COLUMNS, output_schema=OUTPUT)
            later = ProcessorOperator(Sessions(), columns=COLUMNS, output_schema=OUTPUT,
                                      time_mode="EventTime")
            return events(Fragment("a", first, key="user", region=1),
                          Fragment("b", later, key="user", region=1, upstream="a"),
                          event_time="event_time", watermark_delay_ms=0)
        """,
        "give the processor before it event_time_column",
    ),
    "bad output": (
        """
        def build():
            op = ProcessorOperator(Sessions(), columns=COLUMNS, output_schema="user string, gap interval day")
            return events(Fragment("a", op, key="user", region=1))
        """,
        "'interval' is not a Spark SQL type Rescaler reads",
    ),
    "bad name": (
        """
        def build():
            return events(Fragment("a", Count(), key="user", region=1), name="../x")
        """,
        "names the state directory",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_definition_stops_with_one_clear_message(module: object, case: str) -> None:
    body, message = BAD[case]
    name = module(body)  # type: ignore[operator]
    with pytest.raises(PipelineError, match=message):
        load_pipeline(f"{name}:build")


def test_the_prepared_schema_is_checked_against_what_fragments_read() -> None:
    sys.path.insert(0, str(FIXTURES))
    try:
        pipeline = load_pipeline("userpipe.sessions:build")
    finally:
        sys.path.remove(str(FIXTURES))
    good = {c: "string" for c in ("user", "page", "_malformed")}
    good.update(seq="bigint", ts="bigint", bytes="bigint", event_time="timestamp", src="int")
    pipeline.check_prepared(good)
    for missing, message in [
        ("user", "keyed by 'user', which the prepared records lack"),
        ("page", "reads column 'page', which the prepared records lack"),
        ("seq", "lack column 'seq'"),
    ]:
        with pytest.raises(InvalidPipeline, match=message):
            pipeline.check_prepared({k: v for k, v in good.items() if k != missing})
    with pytest.raises(InvalidPipeline, match="key column 'user' is bigint; cast it to string"):
        pipeline.check_prepared({**good, "user": "bigint"})


def test_the_user_topology_and_its_registration(tmp_path: Path) -> None:
    sys.path.insert(0, str(FIXTURES))
    try:
        pipeline = load_pipeline("userpipe.sessions:build")
        rows = {r["name"]: r for r in pipeline.topology_fragments()}
        assert rows["sessions"]["key"] == "user"
        described = rows["sessions"]["operator"]
        assert described.startswith("Sessions (row, time eventtime")
        assert "value session<struct<start:bigint" in described
        assert "list recent" in described and "map visits" in described
        record(tmp_path / "sessions", "userpipe.sessions:build", pipeline)
        assert registered(tmp_path, "sessions").fragments[0].name == "sessions"
    finally:
        sys.path.remove(str(FIXTURES))
    with pytest.raises(UnknownPipeline, match="start its runner first"):
        registered(tmp_path, "other")
    assert registered(tmp_path, "wordcount").name == "wordcount"  # built-ins need no record


def test_the_command_line_reports_a_bad_pipeline(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--pipeline", "no_such_module_here:build"])
    assert exit_info.value.code == 2
    assert "cannot import 'no_such_module_here'" in capsys.readouterr().err
