"""The JetStream source's options, the JSON fields it parses, and the ways a stream fails it.

:class:`JetStreamOptions` is what ``spark.readStream.format("rescaler_jetstream").option(...)``
is given, checked when the source is made: the stream, the subject filters (disjoint, so no
message is read twice), the sequences per micro-batch, where a query without a checkpoint
starts, and the ``schema`` option, the flat JSON fields parsed into columns
(:func:`parse_schema`). The source itself is :mod:`workers.sources.jetstream`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from workers.natsio import DEFAULT_URL, check_stream_name, check_subject, redact

JETSTREAM = "rescaler_jetstream"
RESERVED = ("seq", "subject", "data", "_malformed")

# Spark DDL type -> (canonical DDL name, Arrow type)
FIELD_TYPES: dict[str, tuple[str, pa.DataType]] = {
    "string": ("string", pa.string()),
    "bigint": ("bigint", pa.int64()),
    "long": ("bigint", pa.int64()),
    "int": ("int", pa.int32()),
    "integer": ("int", pa.int32()),
    "double": ("double", pa.float64()),
    "float": ("float", pa.float32()),
    "boolean": ("boolean", pa.bool_()),
}


class StreamMissing(LookupError):
    """The JetStream stream does not exist; the message says how to create it."""


class DataLoss(RuntimeError):
    """Messages of the range to read are no longer in the stream (limits, purge)."""


@dataclass(frozen=True)
class JsonField:
    name: str
    ddl_type: str  # canonical: string, bigint, int, double, float, boolean

    @property
    def arrow_type(self) -> pa.DataType:
        return FIELD_TYPES[self.ddl_type][1]


def parse_schema(ddl: str) -> tuple[JsonField, ...]:
    """The JSON fields of a ``schema`` option: ``"user string, ts bigint"`` (flat Spark DDL of
    string, bigint/long, int/integer, double, float, boolean; names may be in backticks)."""
    fields: list[JsonField] = []
    for item in (part.strip() for part in ddl.split(",")):
        found = re.fullmatch(r"(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)\s+([A-Za-z]+)", item)
        if not found:
            raise ValueError(
                f"schema option: cannot read {item!r}; write `name type` pairs separated by "
                f"commas, types {', '.join(sorted(FIELD_TYPES))}"
            )
        name, typ = found.group(1).strip("`"), found.group(2).lower()
        if typ not in FIELD_TYPES:
            raise ValueError(
                f"schema option: field {name!r} has type {typ!r}; the JetStream source parses "
                f"{', '.join(sorted(FIELD_TYPES))}"
            )
        if name in RESERVED:
            raise ValueError(
                f"schema option: {name!r} is a column the source sets itself "
                f"({', '.join(RESERVED)}); rename the JSON field's column"
            )
        if any(f.name == name for f in fields):
            raise ValueError(f"schema option: field {name!r} appears twice")
        fields.append(JsonField(name, FIELD_TYPES[typ][0]))
    return tuple(fields)


def _tokens_overlap(a: list[str], b: list[str]) -> bool:
    for x, y in zip(a, b):
        if x == ">" or y == ">":
            return True
        if x != "*" and y != "*" and x != y:
            return False
    return len(a) == len(b)


def subjects_overlap(a: str, b: str) -> bool:
    """Whether one message subject can match both filters (then it would be read twice)."""
    return _tokens_overlap(a.split("."), b.split("."))


def _flag(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"option {name} must be true or false, not {value!r}")


@dataclass(frozen=True)
class JetStreamOptions:
    """The source's options (``spark.readStream.format("rescaler_jetstream").option(...)``)."""

    stream: str
    url: str = DEFAULT_URL
    subjects: tuple[str, ...] = ()  # subject filters; none: every subject of the stream
    max_records_per_epoch: int = 10_000  # sequences per micro-batch (fewer records with filters)
    partitions: int = 2  # shards of the range when there is at most one subject
    schema: tuple[JsonField, ...] = ()  # JSON fields parsed into columns
    start: str = "earliest"  # earliest | latest | the first sequence to read
    consumer: str | None = None  # a durable consumer commit() moves, for operators to watch
    fail_on_data_loss: bool = True
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        check_stream_name(self.stream)
        for subject in self.subjects:
            check_subject(subject, wildcards=True)
        for i, a in enumerate(self.subjects):
            for b in self.subjects[i + 1 :]:
                if subjects_overlap(a, b):
                    raise ValueError(
                        f"subjects {a!r} and {b!r} overlap: a message matching both would be "
                        f"read twice; list disjoint subject filters"
                    )
        if self.max_records_per_epoch < 1 or self.partitions < 1:
            raise ValueError("max_records_per_epoch and partitions must be at least 1")
        if self.start not in ("earliest", "latest") and not (
            self.start.isdigit() and int(self.start) >= 1
        ):
            raise ValueError(
                f"option start must be earliest, latest or a stream sequence >= 1, "
                f"not {self.start!r}"
            )
        if self.consumer is not None:
            check_stream_name(self.consumer)  # consumer names follow the same rules

    @classmethod
    def from_options(cls, options: dict[str, str]) -> JetStreamOptions:
        known = {k.lower(): v for k, v in options.items()}
        if not known.get("stream"):
            raise ValueError(f"the {JETSTREAM} source needs option stream (the JetStream stream)")
        subjects = tuple(s.strip() for s in known.get("subjects", "").split(",") if s.strip())
        return cls(
            stream=known["stream"],
            url=known.get("url") or DEFAULT_URL,
            subjects=subjects,
            max_records_per_epoch=int(known.get("max_records_per_epoch", 10_000)),
            partitions=int(known.get("partitions", 2)),
            schema=parse_schema(known["schema"]) if known.get("schema") else (),
            start=known.get("start", "earliest").strip().lower(),
            consumer=known.get("consumer") or None,
            fail_on_data_loss=_flag(known.get("fail_on_data_loss", "true"), "fail_on_data_loss"),
            timeout_s=float(known.get("timeout_s", 10.0)),
        )

    def ddl(self) -> str:
        """The Spark schema of the records: seq, subject, data, the JSON fields, _malformed."""
        parsed = "".join(f", `{f.name}` {f.ddl_type}" for f in self.schema)
        return f"`seq` bigint, `subject` string, `data` string{parsed}, `_malformed` string"

    def arrow_schema(self) -> pa.Schema:
        fields = [("seq", pa.int64()), ("subject", pa.string()), ("data", pa.string())]
        fields += [(f.name, f.arrow_type) for f in self.schema]
        return pa.schema([*fields, ("_malformed", pa.string())])

    def create_hint(self) -> str:
        subjects = ",".join(self.subjects) or f"{self.stream.lower()}.>"
        return (
            f"create it with `python -m workers.sources.jetstream_feed --url {redact(self.url)} "
            f"--stream {self.stream} --subject SUBJECT --rows 0` or `nats stream add "
            f"{self.stream} --subjects '{subjects}'`"
        )
