"""mongomock 4.3 predates pymongo 4.11, whose UpdateOne/ReplaceOne pass ``sort=`` to the bulk
builder. The store never sorts inside a bulk write, so dropping a ``None`` sort is exact."""

from __future__ import annotations

import functools
from typing import Any

import mongomock.collection


def _drop_unsorted(method: Any) -> Any:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, sort: Any = None, **kwargs: Any) -> Any:
        if sort is not None:
            raise NotImplementedError("mongomock cannot sort inside bulk writes")
        return method(self, *args, **kwargs)

    return wrapper


def patch_mongomock() -> None:
    builder = mongomock.collection.BulkOperationBuilder
    if not getattr(builder, "_fanout_patched", False):
        builder.add_update = _drop_unsorted(builder.add_update)
        builder.add_replace = _drop_unsorted(builder.add_replace)
        builder._fanout_patched = True
