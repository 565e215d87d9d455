"""The examples in the public docstrings (rendered on the reference pages) run as written."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

from timeline_fanout.producers import publisher
from timeline_fanout.schemas import codec, topics


@pytest.mark.parametrize("module", [topics, codec, publisher], ids=lambda m: m.__name__)
def test_docstring_examples_give_what_they_show(module: ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
