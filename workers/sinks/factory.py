"""The sink a URI names (``sink_from_uri``: the runner's ``--sink`` and ``RESCALER_SINK``).

Each backend is imported only when its URI is read, so this module loads no client library a
pipeline does not use, and no sink module imports this one.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from workers.sinks.base import FanOut, Sink

SUPPORTED_URIS = (
    "files (Arrow files in the durable location, by default the state directory, for debugging)",
    "postgres://USER@HOST:PORT/DATABASE?table=NAME[&key=COL,...]",
    "delta:PATH_OR_URI (delta:/data/out, delta:s3://bucket/out)",
    "nats://HOST:PORT/SUBJECT[?stream=NAME&duplicate_window_s=SECONDS&create_stream=false]",
)


def _split_query(query: str) -> dict[str, str]:
    return dict(parse_qsl(query, keep_blank_values=True))


def _flag(value: str, name: str, uri: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"sink URI {uri!r}: {name} must be true or false, not {value!r}")


def _postgres(uri: str) -> Sink:
    from workers.sinks.postgres import PostgresSink

    parts = urlsplit(uri)
    params = _split_query(parts.query)
    table = params.pop("table", "").strip()
    if not table:
        raise ValueError(
            f"sink URI {uri!r} names no table: add ?table=NAME (e.g. {SUPPORTED_URIS[1]})"
        )
    keys = tuple(k.strip() for k in params.pop("key", "key").split(",") if k.strip())
    if not keys:
        raise ValueError(f"sink URI {uri!r}: key= names no column")
    if not parts.path.strip("/"):
        raise ValueError(f"sink URI {uri!r} names no database: postgres://HOST:PORT/DATABASE?...")
    dsn = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(params), ""))
    return PostgresSink(dsn, table, key_columns=keys)


def _delta(uri: str) -> Sink:
    from workers.sinks.delta import DeltaSink

    target = uri[len("delta:") :].strip()
    if not target:
        raise ValueError(f"sink URI {uri!r} names no table location: {SUPPORTED_URIS[2]}")
    return DeltaSink(target)


def _nats(uri: str) -> Sink:
    from workers.natsio import check_stream_name, check_subject
    from workers.sinks.nats import DEFAULT_DUPLICATE_WINDOW_S, NatsSink

    parts = urlsplit(uri)
    subject = parts.path.lstrip("/")
    if not subject:
        raise ValueError(f"sink URI {uri!r} names no subject: {SUPPORTED_URIS[3]}")
    check_subject(subject, wildcards=False)
    params = _split_query(parts.query)
    stream = params.pop("stream", None) or None
    if stream is not None:
        check_stream_name(stream)
    window = params.pop("duplicate_window_s", str(DEFAULT_DUPLICATE_WINDOW_S))
    try:
        duplicate_window_s = float(window)
    except ValueError:
        raise ValueError(
            f"sink URI {uri!r}: duplicate_window_s must be a number of seconds, not {window!r}"
        ) from None
    create = _flag(params.pop("create_stream", "true"), "create_stream", uri)
    if params:
        raise ValueError(
            f"sink URI {uri!r}: unknown option(s) {', '.join(sorted(params))} "
            f"(known: stream, duplicate_window_s, create_stream)"
        )
    url = urlunsplit(("nats", parts.netloc, "", "", ""))
    return NatsSink(
        url, subject, stream, duplicate_window_s=duplicate_window_s, create_stream=create
    )


def sink_from_uri(uri: str, state_root: str | None = None) -> Sink:
    """The sink a URI names (the runner's ``--sink`` and ``RESCALER_SINK``):

    * ``files``: the debugging sink, Arrow files under ``state_root`` (the durable location);

    * ``postgres://USER@HOST:PORT/DATABASE?table=NAME[&key=COL,...]`` (also ``postgresql://``):
      upsert by the key columns (default ``key``) into ``NAME`` (``schema.name`` allowed); other
      query parameters (``sslmode=...``) go to the connection;
    * ``delta:PATH_OR_URI``: append to the Delta table at a local path or an object-store URI
      (``delta:/data/clicks``, ``delta:s3://bucket/clicks``);
    * ``nats://HOST:PORT/SUBJECT[?stream=NAME&duplicate_window_s=120&create_stream=true]``: one
      JSON message per row on the JetStream subject ``SUBJECT``.

    Several URIs separated by spaces are a :class:`FanOut` to all of them.

    A URI that is none of these, or lacks a required part, is a ValueError saying what to write.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise ValueError("empty sink URI: use one of " + "; ".join(SUPPORTED_URIS))
    uri = uri.strip()
    if len(uri.split()) > 1:  # several URIs, separated by spaces: every sink gets every epoch
        return FanOut([sink_from_uri(part, state_root) for part in uri.split()])
    scheme = uri.split(":", 1)[0].lower() if ":" in uri else ""
    if uri == "files":
        from workers.sinks.files import FileSink

        return FileSink(state_root or "")
    if scheme in ("postgres", "postgresql"):
        return _postgres(uri)
    if scheme == "delta":
        return _delta(uri)
    if scheme == "nats":
        return _nats(uri)
    raise ValueError(
        f"unsupported sink URI {uri!r}: use one of " + "; ".join(SUPPORTED_URIS) + " (or "
        "FunctionSink(fn) in code)"
    )
