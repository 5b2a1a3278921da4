"""A planned operation's units: a vnode's move from one PU to another, and a step of a live
migration (vnodes, or one key range of a hot vnode, going from one PU to another)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers.hashing import KeyRange


# Move and StepSpec are made by the ten thousand (a 2x scale-out of 32,768 vnodes plans 16,384 of
# each): their __init__ stores into the instance's dict, a sixth of the cost of the frozen
# dataclass's own (one object.__setattr__ per field) and 40 % less than one dict.update with
# keywords. They stay frozen: assigning a field raises.
@dataclass(frozen=True, init=False)
class Move:
    """One vnode leaving one PU for another."""

    fragment: str
    vnode: int
    source_pu: int
    target_pu: int
    keys: int
    bytes: int

    def __init__(
        self, fragment: str, vnode: int, source_pu: int, target_pu: int, keys: int, bytes: int
    ) -> None:
        fields = self.__dict__
        fields["fragment"] = fragment
        fields["vnode"] = vnode
        fields["source_pu"] = source_pu
        fields["target_pu"] = target_pu
        fields["keys"] = keys
        fields["bytes"] = bytes

    def to_json(self) -> dict[str, Any]:
        # field by field, not asdict (a deep copy): a plan has thousands of moves
        return {
            "fragment": self.fragment,
            "vnode": self.vnode,
            "source_pu": self.source_pu,
            "target_pu": self.target_pu,
            "keys": self.keys,
            "bytes": self.bytes,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Move:
        return cls(**data)


@dataclass(frozen=True, init=False)
class StepSpec:
    """One unit of a live migration, as planned: vnodes going from one PU to another, or one
    key range of one hot vnode (``key_range``; a vnode over the granularity's key or byte cap
    moves range by range, and only the range in flight is held)."""

    step: int  # its number in the operation, from 1
    fragment: str
    source_pu: int
    target_pu: int
    vnodes: tuple[int, ...]
    keys: int
    bytes: int
    key_range: KeyRange | None

    def __init__(
        self,
        step: int,
        fragment: str,
        source_pu: int,
        target_pu: int,
        vnodes: tuple[int, ...],
        keys: int,
        bytes: int,
        key_range: KeyRange | None = None,
    ) -> None:
        if key_range is not None and len(vnodes) != 1:
            raise ValueError(f"step {step}: a key range is of one vnode, not {len(vnodes)}")
        fields = self.__dict__
        fields["step"] = step
        fields["fragment"] = fragment
        fields["source_pu"] = source_pu
        fields["target_pu"] = target_pu
        fields["vnodes"] = vnodes
        fields["keys"] = keys
        fields["bytes"] = bytes
        fields["key_range"] = key_range

    @property
    def completes_vnodes(self) -> tuple[int, ...]:
        """The vnodes whose move this step completes: all of them, or, for a key range, its
        vnode once it is the last range (ranges of a vnode move in index order)."""
        kr = self.key_range
        return self.vnodes if kr is None or kr.index == kr.count - 1 else ()

    def to_json(self) -> dict[str, Any]:
        # field by field, not asdict (a deep copy): a plan has thousands of steps
        return {
            "step": self.step,
            "fragment": self.fragment,
            "source_pu": self.source_pu,
            "target_pu": self.target_pu,
            "vnodes": list(self.vnodes),
            "keys": self.keys,
            "bytes": self.bytes,
            "key_range": None if self.key_range is None else self.key_range.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepSpec:
        key_range = data.get("key_range")
        return cls(
            step=data["step"],
            fragment=data["fragment"],
            source_pu=data["source_pu"],
            target_pu=data["target_pu"],
            vnodes=tuple(data["vnodes"]),
            keys=data["keys"],
            bytes=data["bytes"],
            key_range=None if key_range is None else KeyRange.from_json(key_range),
        )
