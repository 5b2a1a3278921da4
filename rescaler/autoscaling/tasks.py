"""The autoscaler's Celery task: thin, ids only; the work is in ``evaluation``.

Queued by the receiver of the runner's epoch reports (``receivers.evaluation_queue``) at most
once per pipeline per ``RESCALER_AUTOSCALING_INTERVAL_S``: the project runs no Celery beat, and
a pipeline's epochs are what changes its signals.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from kombu.exceptions import OperationalError as BrokerUnavailable

from rescaler.autoscaling import evaluation
from rescaler.cluster.models import Pipeline
from rescaler.retries import database_retry

log = logging.getLogger(__name__)

EVALUATE = "rescaler.autoscaling.evaluate"


@shared_task(name=EVALUATE, **database_retry())
def autoscaling_evaluate(pipeline_pk: int) -> dict[str, Any] | None:
    """Evaluate the pipeline (``evaluation.autoscaling_evaluate``); safe to repeat: the same
    decision is recorded once and its plan starts once. Answers the decision and its outcome."""
    name = Pipeline.objects.filter(pk=pipeline_pk).values_list("name", flat=True).first()
    if name is None:
        return None
    row = evaluation.autoscaling_evaluate(pipeline=name)
    return None if row is None else {"decision": row.pk, "kind": row.kind, "outcome": row.outcome}


def evaluate_later(pipeline_pk: int) -> None:
    """Queue the evaluation. A broker that is down is logged and left: the next epochs after
    the interval queue it again. ``retry=False``: the runner, reporting its epoch, never waits
    on a broker that does not answer."""
    try:
        autoscaling_evaluate.apply_async((pipeline_pk,), retry=False)
    except BrokerUnavailable:
        log.warning("pipeline %s: the autoscaler's evaluation could not be queued", pipeline_pk)
