"""Spark's checkpoint set for a rebuild's re-run of one committed epoch, and put back after it
(workers/recovery/rebuild.py): the epoch's offset entry the newest, the epoch before it the
newest commit, so that Spark reads the same source records again."""

from __future__ import annotations

from pathlib import Path


def _entries(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def _remove(directory: Path, epoch: int) -> None:
    (directory / str(epoch)).unlink(missing_ok=True)
    # Hadoop's checksum file of the entry: a stale one fails the next read of a rewritten entry
    (directory / f".{epoch}.crc").unlink(missing_ok=True)


def _write(directory: Path, epoch: int, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    _remove(directory, epoch)
    (directory / str(epoch)).write_text(text, "utf-8")


def offsets_after(checkpoint: Path, epoch: int) -> dict[int, str]:
    """Spark's offset entries after ``epoch`` (the one epoch planned but not committed)."""
    offsets = Path(checkpoint) / "offsets"
    return {e: (offsets / str(e)).read_text("utf-8") for e in _entries(offsets) if e > epoch}


def set_rerun(
    checkpoint: Path, epoch: int, offsets_before: str, offsets_at: str, commit_text: str
) -> None:
    """Make Spark's next start re-run ``epoch``: its offset entry the newest (the records it
    reads end there), the one before it next (they start there), and the epoch before it the
    newest commit."""
    checkpoint = Path(checkpoint)
    offsets, commits = checkpoint / "offsets", checkpoint / "commits"
    for e in _entries(offsets):
        if e > epoch:
            _remove(offsets, e)
    for e in _entries(commits):
        if e >= epoch:
            _remove(commits, e)
    if epoch > 0:
        _write(offsets, epoch - 1, offsets_before)
        if not (commits / str(epoch - 1)).exists():
            _write(commits, epoch - 1, commit_text)
    _write(offsets, epoch, offsets_at)


def put_back(checkpoint: Path, target: int, later_offsets: dict[int, str]) -> None:
    """After the re-runs: drop what Spark planned after ``target`` during them, and put back the
    entries it had logged before the rebuild (an epoch planned but not committed is re-run)."""
    offsets = Path(checkpoint) / "offsets"
    for e in _entries(offsets):
        if e > target:
            _remove(offsets, e)
    for e, text in sorted(later_offsets.items()):
        _write(offsets, e, text)
