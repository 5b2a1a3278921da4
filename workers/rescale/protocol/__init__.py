"""The rescale protocol's vocabulary: one name and one type per concept, for every layer.

Everything that crosses a layer boundary (API ↔ control plane ↔ orchestrator ↔ runner) is defined
here once: the phases and statuses as ``StrEnum`` s (so a typo is an ``AttributeError``, not a
silently wrong comparison), and the messages as frozen records with ``to_json``/``from_json`` (so
a renamed key breaks at the one place that builds it, not in a consumer three layers away). The
data plane, the orchestrator, the control plane's ingestion, the API and the events all import
from here; Django models take their ``choices`` from these enums. No Django import (DESIGN §4).

Names follow DESIGN §1 and ``docs/glossary.md``: a step's number is ``step``; a PU end of a move
is ``source_pu``/``target_pu``; the PU sets are ``parallel_units*``; the vnode → PU list is
``mapping``; an operation is named by ``operation_id`` everywhere.

The package is split by concern, and every name is also importable from the package itself:

* :mod:`.phases` — where a step and an operation are (phases, statuses, strategies, routing);
* :mod:`.operation_request` — an operation as a client asks for it, and the parser's limits;
* :mod:`.moves` — a vnode's move and a step, the units of a plan;
* :mod:`.plan` — each fragment's plan and the whole plan;
* :mod:`.commands` — runner commands and their payloads;
* :mod:`.progress` — what the runner reports at each barrier;
* :mod:`.events` — websocket events and audit object types.

"""

from __future__ import annotations

from workers.rescale.protocol.commands import (
    OPERATION_COMMANDS,
    BeginPayload,
    CommandKind,
    FragmentBegin,
    OperationRef,
    StepPayload,
)
from workers.rescale.protocol.events import (
    AuditObject,
    Event,
)
from workers.rescale.protocol.moves import (
    Move,
    StepSpec,
)
from workers.rescale.protocol.operation_request import (
    FRAGMENT_NAME_MAX_CHARS,
    FRAGMENT_NAME_PATTERN,
    GRANULARITY_CHOSEN,
    GRANULARITY_MAXIMUMS,
    GRANULARITY_MINIMUMS,
    GRANULARITY_OPTIONAL,
    GRANULARITY_TYPES,
    HOT_VNODES_ORDERS,
    PARALLEL_UNIT_MAX,
    PRESETS,
    REASON_MAX_CHARS,
    REQUEST_FIELDS,
    ChangeKind,
    FragmentChange,
    Granularity,
    OperationRequest,
)
from workers.rescale.protocol.phases import (
    FINAL,
    ROUTING_BY_PHASE,
    STEP_ENDED,
    STEP_HOLDING,
    STEP_IN_FLIGHT,
    OperationStatus,
    Routing,
    StepPhase,
    StopStartPhase,
    Strategy,
    TickStatus,
)
from workers.rescale.protocol.plan import (
    FragmentPlan,
    Plan,
)
from workers.rescale.protocol.progress import (
    OperationProgress,
    OperationSummary,
    ProgressAck,
    ReportFit,
    StepProgress,
    Tick,
)
from workers.rescale.protocol.records import (
    shallow_fields,
)

__all__ = [
    "FINAL",
    "FRAGMENT_NAME_MAX_CHARS",
    "FRAGMENT_NAME_PATTERN",
    "GRANULARITY_CHOSEN",
    "GRANULARITY_MAXIMUMS",
    "GRANULARITY_MINIMUMS",
    "GRANULARITY_OPTIONAL",
    "GRANULARITY_TYPES",
    "HOT_VNODES_ORDERS",
    "OPERATION_COMMANDS",
    "PARALLEL_UNIT_MAX",
    "PRESETS",
    "REASON_MAX_CHARS",
    "REQUEST_FIELDS",
    "ROUTING_BY_PHASE",
    "STEP_ENDED",
    "STEP_HOLDING",
    "STEP_IN_FLIGHT",
    "AuditObject",
    "BeginPayload",
    "ChangeKind",
    "CommandKind",
    "Event",
    "FragmentBegin",
    "FragmentChange",
    "FragmentPlan",
    "Granularity",
    "Move",
    "OperationProgress",
    "OperationRef",
    "OperationRequest",
    "OperationStatus",
    "OperationSummary",
    "Plan",
    "ProgressAck",
    "ReportFit",
    "Routing",
    "StepPayload",
    "StepPhase",
    "StepProgress",
    "StepSpec",
    "StopStartPhase",
    "Strategy",
    "Tick",
    "TickStatus",
    "shallow_fields",
]
