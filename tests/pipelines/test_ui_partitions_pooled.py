"""The UI's per-partition view (test_ui_partitions.py) on the instance ``earthmem ingest`` opens:
the repo's deploy/dagster.yaml, whose event log writes its rows its own way
(pipelines/dagster_event_log.py). The same backfill and the same assertions, read back
through the same instance."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from dagster import DagsterInstance

from pipelines.dagster_event_log import PooledSqliteEventLogStorage
from pipelines.instance import open_instance
from tests.pipelines import test_ui_partitions as ui
from tests.pipelines.test_ui_partitions import (  # noqa: F401 - collected here as well
    test_a_partition_stopped_by_an_error_check_shows_failed_with_its_reason,
    test_checks_are_recorded_per_partition_and_survive_other_weeks,
    test_each_partition_carries_its_own_metadata_and_log_line,
    test_latest_materialisation_is_the_newest_week_of_the_range,
    test_the_ui_shows_every_partitions_check_status,
)

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "dagster.yaml"


@pytest.fixture(scope="module")
def backfill(tiny_sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    home = tmp_path_factory.mktemp("ui_partitions_pooled") / "dagster_home"

    @contextmanager
    def pooled_instance() -> Iterator[DagsterInstance]:
        with mock.patch.dict("os.environ"), open_instance(home, CONFIG) as inst:
            assert isinstance(inst.event_log_storage, PooledSqliteEventLogStorage)
            yield inst

    with mock.patch.object(ui, "instance_for_test", pooled_instance):
        return ui.backfill.__wrapped__(tiny_sample_dir, tmp_path_factory)  # type: ignore[attr-defined]
