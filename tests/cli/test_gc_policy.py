import gc

from timeline_fanout.cli.gc_policy import (
    SERVING_THRESHOLDS,
    YOUNG_THRESHOLD,
    tune_for_consuming,
    tune_for_serving,
)


def test_startup_objects_are_frozen_and_young_collections_are_rarer(restored_gc: None) -> None:
    gc.unfreeze()
    _, middle, old = gc.get_threshold()
    tune_for_consuming()
    assert gc.get_freeze_count() > 1000  # everything imported so far
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)
    assert gc.isenabled()  # cyclic garbage is still collected, only less often


def test_a_serving_worker_freezes_startup_and_collects_fully_rarely(restored_gc: None) -> None:
    gc.unfreeze()
    tune_for_serving()
    assert gc.get_freeze_count() > 1000
    assert gc.get_threshold() == SERVING_THRESHOLDS
    assert gc.isenabled()
