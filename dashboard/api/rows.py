"""Serializers of rows that come by the thousand (a large operation's steps, vnodes and audit
events, in its document and in every delta event): the same output as DRF's field-by-field pass,
at a fraction of its cost.

``Serializer.to_representation`` asks each field for its attribute through a generic look-up
(dotted sources, callables, defaults, a ``SkipField`` per field) and then converts it. For the
flat, read-only fields of these rows the look-up is one ``getattr`` (or one key of a dict) and
the conversion is known in advance: ``RowSerializer`` works both out once per serializer, then
builds each row in one loop. A field it does not know is converted by its own
``to_representation``; a serializer whose fields are not all flat gets DRF's own pass.
``tests/unit/api/test_rows.py`` holds the two equal.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings
from django.utils import timezone
from rest_framework import ISO_8601, serializers
from rest_framework.settings import api_settings

Convert = Callable[[Any], Any]
_UNPLANNED: Any = object()


def _list_of(child: serializers.Field) -> Convert | None:
    item = _simple(child)
    if item is None:
        return None
    return lambda value: [None if v is None else item(v) for v in value]


def _dict_of(child: serializers.Field) -> Convert | None:
    item = _simple(child)
    if item is None:
        return None
    return lambda value: {str(k): None if v is None else item(v) for k, v in value.items()}


class _Time:
    """DRF's ``DateTimeField.to_representation`` for an ISO 8601 field in the current time zone,
    with the zone read once for a list of rows (``RowListSerializer``) rather than once per
    value (a thread- and task-local look-up, most of the conversion's cost)."""

    def __init__(self, field: serializers.DateTimeField) -> None:
        self.field = field
        self.zone: Any = _UNPLANNED  # unknown: read per value

    def __call__(self, value: Any) -> Any:
        zone = self.zone
        if zone is _UNPLANNED or zone is None or not isinstance(value, dt.datetime):
            return self.field.to_representation(value)
        if value.tzinfo is None:  # naive: DRF makes it aware (or fails), as it says
            return self.field.to_representation(value)
        text = value.astimezone(zone).isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text


def _time(field: serializers.DateTimeField) -> Convert | None:
    output = getattr(field, "format", api_settings.DATETIME_FORMAT)
    if hasattr(field, "timezone") or output is None or output.lower() != ISO_8601:
        return field.to_representation
    return _Time(field)


def _simple(field: serializers.Field) -> Convert | None:
    """The conversion of a flat field's value (not None), or None for a field that needs DRF."""
    kind = type(field)
    if kind is serializers.DateTimeField:
        return _time(field)  # type: ignore[arg-type]
    if kind is serializers.IntegerField:
        return int
    if kind is serializers.CharField:
        return str
    if kind is serializers.FloatField:
        return float
    if kind is serializers.ListField:
        return _list_of(field.child)  # type: ignore[attr-defined]
    if kind is serializers.DictField:
        return _dict_of(field.child)  # type: ignore[attr-defined]
    if isinstance(field, serializers.SerializerMethodField | serializers.RelatedField):
        return None
    if isinstance(field, serializers.Serializer | serializers.ListSerializer):
        return None
    return field.to_representation


def _plan_of(serializer: serializers.Serializer) -> list[tuple[str, str, Convert]] | None:
    """(name, attribute, conversion) of each readable field, or None if one is not flat."""
    plan = []
    for field in serializer._readable_fields:
        convert = _simple(field) if len(field.source_attrs) == 1 else None
        if convert is None:
            return None
        plan.append((str(field.field_name), field.source_attrs[0], convert))
    return plan


class RowListSerializer(serializers.ListSerializer):
    """``many=True`` of a ``RowSerializer``: the current time zone is read once for the rows."""

    def to_representation(self, data: Any) -> list[Any]:
        child = self.child
        if not isinstance(child, RowSerializer):
            return super().to_representation(data)
        times = [c for _, _, c in child.row_plan() or () if isinstance(c, _Time)]
        zone = timezone.get_current_timezone() if settings.USE_TZ else None
        for convert in times:
            convert.zone = zone
        try:
            return super().to_representation(data)
        finally:
            for convert in times:
                convert.zone = _UNPLANNED


class RowSerializer(serializers.Serializer):
    """A serializer of flat rows (see the module): mix in before ``ModelSerializer`` or use as
    ``Serializer``."""

    _plan: list[tuple[str, str, Convert]] | None = _UNPLANNED

    class Meta:
        list_serializer_class = RowListSerializer

    def row_plan(self) -> list[tuple[str, str, Convert]] | None:
        """(name, attribute, conversion) of each field; None where DRF's pass serializes."""
        if self._plan is _UNPLANNED:
            self._plan = _plan_of(self)
        return self._plan

    def to_representation(self, instance: Any) -> dict[str, Any]:
        plan = self.row_plan()
        if plan is None:
            return super().to_representation(instance)
        try:
            if isinstance(instance, Mapping):
                values = [(name, instance[source], convert) for name, source, convert in plan]
            else:
                values = [
                    (name, getattr(instance, source), convert) for name, source, convert in plan
                ]
        except (KeyError, AttributeError):  # DRF's pass says what is missing, or defaults it
            return super().to_representation(instance)
        row = {}
        for name, value, convert in values:
            if callable(value):  # a method: DRF's pass calls it
                return super().to_representation(instance)
            row[name] = None if value is None else convert(value)
        return row
