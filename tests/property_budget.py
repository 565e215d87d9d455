"""How many examples the costly property tests try.

The native core's differential tests are worth many examples, but their strategies are dear
(tens of milliseconds an example for a stream of meta replies), and the README's test command
must stay within CI's time bound. Each such test names the examples of a deep run; the test
command tries a fifth of that, never fewer than hypothesis's own default, and
``FANOUT_DEEP_PROPERTIES=1`` tries them all (docs/testing.md).
"""

from __future__ import annotations

import os

DEEP = os.environ.get("FANOUT_DEEP_PROPERTIES") == "1"
HYPOTHESIS_DEFAULT = 100


def examples(deep: int) -> int:
    """The examples to try of a test whose deep run tries ``deep``."""
    return deep if DEEP else max(HYPOTHESIS_DEFAULT, deep // 5)
