"""The REST API's views: each validates its input, calls one service or selector, serializes.

Refusals are raised, never built here: ``dashboard.api.errors.exception_handler`` turns them into
``{"code", "detail"}`` with the right 4xx status.

By resource (``dashboard/api/urls.py`` mounts them): ``root`` (the index of the endpoints),
``cluster`` (``GET cluster``), ``operations`` (rescale operations and the audit log), ``keys``
(one key of a fragment), ``workers`` (elastic workers: list, add, cordon, notice, drain). The
pipelines' snapshots and autoscaling are ``dashboard/api/snapshots.py``, ``autoscaling.py`` and
``decisions.py``.
"""
