"""The API's one request-body parser: strict JSON that every later layer can store and compare.

Python's ``json`` accepts more than the rest of the stack can take, and each excess used to end
in a 500 far from the parser: a NUL character (Postgres text refuses it: ``DataError``), a lone
surrogate such as ``"\\ud800"`` (not encodable as UTF-8: ``UnicodeEncodeError`` in the database
driver), nesting deep enough to exhaust the interpreter's recursion (``RecursionError``), and
duplicate keys, which it silently resolves to the last one (so a client and a proxy that checks
the first one disagree on what was asked). This parser refuses all of them with a 400
``malformed_request``. (A body larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` never gets here:
Django refuses to read it, and ``dashboard.api.errors`` makes that a 413 ``request_too_large``.)
"""

from __future__ import annotations

import json
import re
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

# Containers inside containers. A rescale request needs four ({changes: {fragment: {added: []}}}
# and a granularity object); 32 leaves room for any JSON a future endpoint could want, and stays
# far below the interpreter's recursion limit, which the serializers' recursion also spends.
MAX_DEPTH = 32
_SURROGATE = re.compile("[\ud800-\udfff]")


def malformed(detail: str) -> ParseError:
    """DRF's ``parse_error``, which ``dashboard.api.errors`` answers as ``malformed_request``
    (this module cannot import that one: DRF's settings import the parser while it loads)."""
    return ParseError(detail)


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise malformed(f"JSON parse error - the key {key[:80]!r} appears twice in one object")
        seen.add(key)
    return dict(pairs)


def _refuse_constant(name: str) -> None:
    raise malformed(f"JSON parse error - {name} is not a JSON number")


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise malformed("JSON parse error - a string holds a NUL character (\\u0000)")
    if _SURROGATE.search(text):
        raise malformed(
            "JSON parse error - a string holds a lone surrogate (an unpaired \\ud800-\\udfff "
            "escape), which is not a character"
        )


def check_parsed(data: Any) -> None:
    """Walk the parsed document without recursion: refuse nesting deeper than ``MAX_DEPTH`` and
    strings (values and keys) that hold NUL or a lone surrogate."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _check_text(value)
        elif isinstance(value, dict | list):
            if depth >= MAX_DEPTH:
                raise malformed(
                    f"JSON parse error - objects and arrays nest more than {MAX_DEPTH} deep"
                )
            if isinstance(value, dict):
                for key in value:
                    _check_text(key)
                stack.extend((item, depth + 1) for item in value.values())
            else:
                stack.extend((item, depth + 1) for item in value)


class StrictJSONParser(JSONParser):
    """``application/json`` only (anything else: 415), parsed strictly (see the module)."""

    def parse(
        self, stream: IO[bytes] | None, media_type: str | None = None, parser_context: Any = None
    ) -> Any:
        raw = stream.read() if stream is not None else b""
        try:
            # RFC 8259: JSON exchanged between systems is UTF-8 (a charset parameter is ignored)
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise malformed(f"JSON parse error - the body is not UTF-8: {exc.reason}") from None
        try:
            data = json.loads(
                text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant
            )
        except RecursionError:
            raise malformed(
                f"JSON parse error - objects and arrays nest more than {MAX_DEPTH} deep"
            ) from None
        except ValueError as exc:
            raise malformed(f"JSON parse error - {exc}") from None
        check_parsed(data)
        return data
