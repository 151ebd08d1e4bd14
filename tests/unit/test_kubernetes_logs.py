"""Pod log lines relayed once each, across reads, cut reads and a restarted triggerer."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

from airflow_stepop.backends.kubernetes import logs

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def stamp(second: float) -> str:
    moment = NOW - timedelta(seconds=60) + timedelta(seconds=second)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}123Z"


class Kubelet:
    """A pod log as the API serves it: stamped lines from ``sinceTime`` (a second) on, at most
    ``limitBytes`` of them."""

    def __init__(self):
        self.lines: dict[str, list[tuple[float, str]]] = {}
        self.queries = []

    def write(self, pod: str, second: float, text: str) -> None:
        self.lines.setdefault(pod, []).append((second, text))

    async def read(self, name: str, query: dict) -> str:
        self.queries.append((name, query))
        since = query.get("sinceTime", "")
        text = "".join(
            f"{stamp(second)} {line}\n" for second, line in self.lines.get(name, [])
            if stamp(second)[:19] >= since[:19]
        )  # fmt: skip
        return text.encode()[: query["limitBytes"]].decode("utf-8", "ignore")


def pod(name: str, index: int = 0, started: bool = True) -> dict:
    state = {"running": {}} if started else {"waiting": {"reason": "ContainerCreating"}}
    return {
        "metadata": {"name": name,
                     "annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
        "status": {"containerStatuses": [{"name": "step", "state": state}]},
    }  # fmt: skip


def read(kubelet, pods, cursor, final=False, allowed=lambda: True):
    return asyncio.run(
        logs.read_new_lines(kubelet.read, "train-t1", pods, cursor, final=final, allowed=allowed)
    )


def test_each_line_is_relayed_once_even_when_lines_share_a_stamp():
    kubelet = Kubelet()
    pods = [pod("train-t1-abcde")]
    kubelet.write("train-t1-abcde", 1, "epoch 1")
    kubelet.write("train-t1-abcde", 1, "epoch 1 again, same nanosecond")
    first, cursor = read(kubelet, pods, None)
    assert first == ["epoch 1", "epoch 1 again, same nanosecond"]
    kubelet.write("train-t1-abcde", 1, "a third line of that nanosecond")
    kubelet.write("train-t1-abcde", 2, "epoch 2")
    second, cursor = read(kubelet, pods, json.loads(json.dumps(cursor)))  # a restarted triggerer
    assert second == ["a third line of that nanosecond", "epoch 2"]
    assert read(kubelet, pods, cursor)[0] == []
    _, query = kubelet.queries[-1]
    assert query["timestamps"] == "true" and query["sinceTime"] == stamp(2)[:19] + "Z"


def test_a_cut_read_keeps_its_partial_line_for_the_next_and_says_more_waits(monkeypatch):
    monkeypatch.setattr(logs, "READ_BYTES", 100)
    monkeypatch.setattr(logs, "WIDE_READ_BYTES", 200)
    kubelet = Kubelet()
    pods = [pod("train-t1-abcde")]
    for second in range(6):
        kubelet.write("train-t1-abcde", second, f"line {second} " + "x" * 20)
    got, cursor = read(kubelet, pods, None)
    assert got and cursor.get("more") is True
    assert all(line.startswith("line ") and line.endswith("x" * 20) for line in got)
    everything = list(got)
    while cursor.get("more"):
        got, cursor = read(kubelet, pods, cursor)
        everything.extend(got)
    assert everything == [f"line {s} " + "x" * 20 for s in range(6)]


def test_several_pods_say_their_index_and_a_waiting_pod_is_not_read():
    kubelet = Kubelet()
    pods = [pod("train-t1-1-bbbbb", 1), pod("train-t1-0-aaaaa", 0), pod("train-t1-2-c", 2, False)]
    kubelet.write("train-t1-0-aaaaa", 1, "rank zero")
    kubelet.write("train-t1-1-bbbbb", 1, "rank one")
    got, _ = read(kubelet, pods, None)
    assert got == ["[0] rank zero", "[1] rank one"]
    assert "train-t1-2-c" not in [name for name, _ in kubelet.queries]


def test_a_running_job_reads_only_with_a_token_and_a_finished_one_reads_to_the_end():
    kubelet = Kubelet()
    pods = [pod("train-t1-abcde")]
    kubelet.write("train-t1-abcde", 1, "hello")
    got, cursor = read(kubelet, pods, None, allowed=lambda: False)
    assert got == [] and kubelet.queries == []
    got, cursor = read(kubelet, pods, cursor, final=True, allowed=lambda: False)
    assert got == ["hello"] and cursor["pods"]["train-t1-abcde"]["ended"] is True


def test_a_cursor_naming_another_jobs_pod_is_not_followed():
    kubelet = Kubelet()
    kubelet.write("other-job-abcde", 1, "someone else's secret")
    cursor = {"pods": {"other-job-abcde": {"time": "", "count": 0}}}
    got, cursor = read(kubelet, [pod("other-job-abcde")], cursor)
    assert got == [] and cursor["pods"] == {}


def test_a_second_of_log_longer_than_a_wide_read_is_skipped_saying_so(monkeypatch):
    monkeypatch.setattr(logs, "READ_BYTES", 100)
    monkeypatch.setattr(logs, "WIDE_READ_BYTES", 200)
    kubelet = Kubelet()
    pods = [pod("train-t1-abcde")]
    for index in range(10):  # ten lines in one second: 550 bytes
        kubelet.write("train-t1-abcde", 1 + index / 1000, f"burst {index} " + "y" * 15)
    kubelet.write("train-t1-abcde", 3, "after the burst")
    everything, cursor = read(kubelet, pods, None)
    for _ in range(10):
        if not cursor.get("more"):
            break
        got, cursor = read(kubelet, pods, cursor)
        everything.extend(got)
    assert everything[0].startswith("burst 0")
    assert any("the rest of that second is skipped" in line for line in everything)
    assert everything[-1] == "after the burst"


def test_a_cursor_the_job_rewrote_is_read_only_as_far_as_it_makes_sense():
    kubelet = Kubelet()
    kubelet.write("train-t1-abcde", 1, "hello")
    for bad in ({"time": 5}, {"count": "x"}, {"count": -1}, {"reads": True}, "text", None):
        got, cursor = read(kubelet, [pod("train-t1-abcde")], {"pods": {"train-t1-abcde": bad}})
        assert got == ["hello"], bad  # read from the start, as a pod never seen
    assert read(kubelet, [pod("train-t1-abcde")], ["not", "a", "dict"])[0] == ["hello"]
