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

from collections.abc import Callable, Mapping
from typing import Any

from rest_framework import serializers

Convert = Callable[[Any], Any]


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


def _simple(field: serializers.Field) -> Convert | None:
    """The conversion of a flat field's value (not None), or None for a field that needs DRF."""
    kind = type(field)
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


_UNPLANNED: Any = object()


def _plan_of(serializer: serializers.Serializer) -> list[tuple[str, str, Convert]] | None:
    """(name, attribute, conversion) of each readable field, or None if one is not flat."""
    plan = []
    for field in serializer._readable_fields:
        convert = _simple(field) if len(field.source_attrs) == 1 else None
        if convert is None:
            return None
        plan.append((str(field.field_name), field.source_attrs[0], convert))
    return plan


class RowSerializer(serializers.Serializer):
    """A serializer of flat rows (see the module): mix in before ``ModelSerializer`` or use as
    ``Serializer``."""

    _plan: list[tuple[str, str, Convert]] | None = _UNPLANNED

    def to_representation(self, instance: Any) -> dict[str, Any]:
        if self._plan is _UNPLANNED:
            self._plan = _plan_of(self)
        plan = self._plan
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
