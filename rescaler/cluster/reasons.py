"""An operator's reason for an action (cordon, drain, snapshot), by the rule of an operation's
reason: every such reason may end up in one, and all are kept in the audit."""

from __future__ import annotations

from typing import Any

from workers.rescale import errors
from workers.rescale.protocol import REASON_MAX_CHARS


def clean_reason(reason: Any) -> str:
    """The operator's words, stripped; ``malformed_request`` (400) if they break the rule."""
    if not isinstance(reason, str) or len(reason) > REASON_MAX_CHARS:
        raise errors.MalformedRequest(
            f"'reason' must be a text of at most {REASON_MAX_CHARS} characters"
        )
    if any((ord(c) < 32 and c not in "\t\n") or "\ud800" <= c <= "\udfff" for c in reason):
        raise errors.MalformedRequest("'reason' may not hold control characters or lone surrogates")
    return reason.strip()
