"""A step that prints far more than the relay holds: the relay's memory stays bounded and the
task log gets every byte once, in order (a local step in process mode, relayed by a process of
its own as a trigger relays it: ``bench/log_relay.py``)."""

from __future__ import annotations

from bench.log_relay import RSS_BOUND_MIB, measure


def test_a_step_printing_far_more_than_the_bound_without_newlines_keeps_the_relay_bounded(
    tmp_path,
):
    mib = 4 * RSS_BOUND_MIB  # newline-free, then a \r progress bar of 20,000 frames
    figures = measure(mib, 20_000, poll=0.2, workdir=tmp_path)
    assert figures["log_bytes"] > mib << 20
    assert figures["ok"], "the relayed text is not the step's output, each byte once in order"
    assert figures["growth_mib"] < RSS_BOUND_MIB, figures
