"""The stores' columns of keys and values, built from buffers (``workers.state.binary_array``):
the same arrays as ``pa.array(items, pa.binary())``, without pyarrow importing pandas. pyarrow's
``pa.array`` of a Python list checks lazily whether it is a pandas object, importing pandas on
its first call in a process: 0.19 s of a fresh Spark Python worker's first export, paid while
the collect epoch's tasks waited for the export's (docs/benchmarks.md, "Hot vnodes first, or last")."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.state import BACKENDS, binary_array

REPO = Path(__file__).resolve().parents[4]


@given(st.lists(st.binary(max_size=40), max_size=200))
def test_the_array_is_the_one_pa_array_makes(items: list[bytes]) -> None:
    made = binary_array(items)
    assert made.type == pa.binary() and made.equals(pa.array(items, pa.binary()))
    made.validate(full=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_export_in_a_fresh_process_does_not_import_pandas(backend: str, tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from workers.layout import pu_store
        from workers.rescale.exports import ExportTask, export_pu
        from workers.state import open_store
        from workers.state.base import Update, encode_key

        root = Path({str(tmp_path)!r})
        with open_store({backend!r}, pu_store(root, "f", 0)) as store:
            store.commit_epoch(
                0, [Update(encode_key(3, b"k%05d" % i), None, b"v" * 9) for i in range(500)]
            )
        assert "pandas" not in sys.modules, "imported before the export"
        out = root / "vnode-3.arrow"
        done = export_pu(ExportTask(str(root), {backend!r}, "f", 0, ((3, None, str(out)),)))
        assert done["manifests"][str(out)]["keys"] == 500, done
        print("pandas" in sys.modules)
        """
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip() == "False", "the export imported pandas"
