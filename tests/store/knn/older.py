"""Tables as code of before the block layout (session 21) leaves them, for the upgrade tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from store import knn as V
from store.knn.write import _digest


def leave_as_older_code(path: Path, *, both_keys: bool = False) -> int:
    """Rewrite the current version of the table at ``path`` as older code leaves it:
    ``head.npy`` row-major int8 under ``head_dims`` (beside ``head_block_dims`` when
    ``both_keys``: what older code's ``upgrade_table`` keeps), no ``head_blocks.npy``, and the
    digest older code computed (over the arrays it wrote, ``head`` among them).

    Returns:
        The head dimensions.
    """
    t = V.KnnTable.open(path)
    meta = json.loads((t.path / "meta.json").read_text())
    h = int(meta[V.HEAD_BLOCKS_KEY])
    meta["head_dims"] = meta[V.HEAD_BLOCKS_KEY] if both_keys else meta.pop(V.HEAD_BLOCKS_KEY)
    np.save(t.path / "head.npy", np.asarray(t.vectors)[:, meta["head_index"]])  # (N, H) int8
    (t.path / "head_blocks.npy").unlink()
    meta["digest"] = _digest({f.stem: np.load(f) for f in t.path.glob("*.npy")})
    (t.path / "meta.json").write_text(json.dumps(meta))
    return h
