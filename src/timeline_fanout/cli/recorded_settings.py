"""The settings of a CLI process: the environment over the addresses ``fanout stack up``
recorded, over the defaults. The only place the product's settings meet the local stack."""

from __future__ import annotations

from timeline_fanout.cli.settings import Settings
from timeline_fanout_devstack.home import stack_file
from timeline_fanout_devstack.stack import StackState


def load_settings() -> Settings:
    """This process's settings; a machine where no stack was brought up gets the environment
    and the defaults."""
    state = StackState.load(stack_file())
    return Settings.with_recorded(state.addresses() if state else {})
