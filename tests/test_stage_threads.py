"""In-order stages on threads (``streamer.pipeline.stage_threads``): order, overlap, errors."""

import threading
import time

import pytest

from streamer.pipeline.stage_threads import run_stages


def _stage_threads_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("st-")]


def test_items_pass_every_stage_in_order():
    seen: list[int] = []
    calls: dict[str, list[int]] = {"a": [], "b": []}

    def stage(name, add):
        def run(item):
            calls[name].append(item)
            return item + add
        return run

    run_stages(range(50), [stage("a", 1000), stage("b", 1)], seen.append, depth=2, name="st")
    assert seen == [n + 1001 for n in range(50)]
    assert calls["a"] == list(range(50)) and calls["b"] == [n + 1000 for n in range(50)]
    assert _stage_threads_alive() == []


def test_each_stage_runs_on_its_own_thread_and_they_overlap():
    threads: dict[str, set[str]] = {"source": set(), "a": set(), "b": set(), "sink": set()}
    busy = {"a": 0, "b": 0}
    both = threading.Event()
    lock = threading.Lock()

    def source():
        for n in range(20):
            threads["source"].add(threading.current_thread().name)
            yield n

    def stage(name):
        def run(item):
            threads[name].add(threading.current_thread().name)
            with lock:
                busy[name] += 1
                if busy["a"] and busy["b"]:
                    both.set()
            time.sleep(0.005)  # releases the GIL, as the codecs and the models do
            with lock:
                busy[name] -= 1
            return item
        return run

    run_stages(source(), [stage("a"), stage("b")], lambda item: threads["sink"].add(threading.current_thread().name), name="st")
    assert threads["sink"] == {threading.current_thread().name}
    names = [next(iter(threads[k])) for k in ("source", "a", "b")]
    assert all(len(threads[k]) == 1 for k in ("source", "a", "b")) and len(set(names)) == 3
    assert both.is_set()  # two frames were in two stages at the same time


@pytest.mark.parametrize("where", ["source", "stage", "sink"])
def test_the_first_error_stops_every_thread_and_is_raised(where):
    done: list[int] = []

    def source():
        for n in range(10_000):
            if where == "source" and n == 5:
                raise ValueError("bad input at 5")
            yield n

    def stage(item):
        if where == "stage" and item == 5:
            raise ValueError("bad frame 5")
        return item

    def sink(item):
        if where == "sink" and item == 5:
            raise ValueError("stopped at 5")
        done.append(item)

    with pytest.raises(ValueError, match="5"):
        run_stages(source(), [stage, stage], sink, name="st")
    # what was done before, in order; the items behind the failing one never reach the sink
    assert done == list(range(len(done))) and len(done) <= 5
    if where == "sink":
        assert done == list(range(5))
    assert _stage_threads_alive() == []


def test_a_source_without_items_ends_at_once():
    seen: list[int] = []
    run_stages(iter(()), [lambda item: item], seen.append, name="st")
    assert seen == [] and _stage_threads_alive() == []
