"""The refresh interval of a running server is a setting: argument, environment, default."""

from __future__ import annotations

import numpy as np
import pytest

from api.context import DEFAULT_TIP_CHECK_SECONDS, ENV_REFRESH_SECONDS, ServiceContext
from api.errors import InvalidArgument
from store.cube import CubeWriter


def test_default_env_and_argument(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(ENV_REFRESH_SECONDS, raising=False)
    assert ServiceContext(tmp_path).tip_check_seconds == DEFAULT_TIP_CHECK_SECONDS
    monkeypatch.setenv(ENV_REFRESH_SECONDS, "7.5")
    assert ServiceContext(tmp_path).tip_check_seconds == 7.5
    assert ServiceContext(tmp_path, tip_check_seconds=0).tip_check_seconds == 0.0


@pytest.mark.parametrize("bad", ["-1", "soon", "inf", "nan"])
def test_a_bad_value_is_a_typed_error(tmp_path, monkeypatch, bad) -> None:
    monkeypatch.setenv(ENV_REFRESH_SECONDS, bad)
    with pytest.raises(InvalidArgument) as err:
        ServiceContext(tmp_path)
    assert err.value.code == "invalid_refresh_seconds"


def _commit(data, value: float) -> str:
    writer = CubeWriter(data)
    vals = np.full((1, 4, 4), value, dtype=np.float32)
    return writer.write_region("indices.ndvi", [19797], 1000, 2000, vals, partition_key="t|b")


@pytest.mark.parametrize(("seconds", "moves"), [("3600", False), ("0", True)])
def test_a_new_snapshot_is_served_after_the_interval(tmp_path, monkeypatch, seconds, moves):
    monkeypatch.setenv(ENV_REFRESH_SECONDS, seconds)
    first = _commit(tmp_path, 0.25)
    ctx = ServiceContext(tmp_path)
    assert ctx.reader().snapshot_id == first
    second = _commit(tmp_path, 0.5)
    assert ctx.reader().snapshot_id == (second if moves else first)
