"""wait_until_ready at its deadline: the message says what the last answered poll found."""

from __future__ import annotations

import time

import pytest

from components import ray_client
from components.ray_client import DashboardError, RayJobError


class SlowLastAnswer:
    """A dashboard whose first poll answers (no GPUs yet) and whose next node listing is still on its way
    when the deadline passes: the call is cut short by the deadline, as on a loaded machine."""

    url, api_server = "http://head:8265", None

    def __init__(self):
        self.polls = 0

    def call(self, method, path, timeout=None, deadline=None):
        return {}

    def nodes(self, deadline):
        self.polls += 1
        if self.polls == 1:
            return 0, 1, "head"
        time.sleep(max(0.0, deadline - time.monotonic()))
        raise DashboardError("GET", self.url + "/api/v0/nodes", None, "unreachable: Read timed out")


def test_a_call_cut_short_by_the_deadline_keeps_what_the_last_poll_found():
    with pytest.raises(RayJobError) as late:
        ray_client.wait_until_ready(SlowLastAnswer(), 16, timeout_s=1)
    assert "found 0 of 16 GPUs on 1 alive node(s)" in str(late.value), late.value
