import queue
import threading

import pytest

from ingest.queues import BoundedQueue, Handover


def test_fifo_within_its_bound():
    q = BoundedQueue(2)
    q.put("a")
    q.put("b", timeout=0.01)
    with pytest.raises(queue.Full):
        q.put("c", timeout=0.01)
    assert q.get() == "a"
    q.put("c", timeout=0.01)  # a get frees a place
    assert [q.get(timeout=0.01), q.get_nowait()] == ["b", "c"]
    with pytest.raises(queue.Empty):
        q.get(timeout=0.01)
    with pytest.raises(queue.Empty):
        q.get_nowait()


def test_a_bound_below_one_is_refused():
    with pytest.raises(ValueError, match="maxsize=0"):
        BoundedQueue(0)


def test_producers_and_a_consumer_lose_and_reorder_nothing():
    q = BoundedQueue(2)
    producers, items = 3, 2000

    def produce(p):
        for i in range(items):
            q.put((p, i))

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for t in threads:
        t.start()
    got = [q.get(timeout=10) for _ in range(producers * items)]
    for t in threads:
        t.join(10)
    assert all(not t.is_alive() for t in threads)
    for p in range(producers):
        assert [i for who, i in got if who == p] == list(range(items))
    with pytest.raises(queue.Empty):
        q.get_nowait()


def test_put_unless_stops_waiting_for_a_place_once_stopped():
    q = BoundedQueue(1)
    stop = threading.Event()
    assert q.put_unless("a", stop, poll=0.01)
    threading.Timer(0.05, stop.set).start()
    assert not q.put_unless("b", stop, poll=0.01)  # full until stopped: gives up instead of hanging
    assert q.get_nowait() == "a"
    with pytest.raises(queue.Empty):
        q.get_nowait()


def _delivering(put):
    """A runner's ``deliver``: each item to ``put`` in turn, until one is refused."""
    return lambda items: all(put(item) for item in items)


def test_a_handover_puts_what_it_holds_at_each_release_at_most_its_bound_at_a_time():
    put = []
    handover = Handover(_delivering(lambda item: put.append(item) or True), most=3)

    def items():  # a block's batches, the release before the next read, then a block of five
        yield from "ab"
        assert put == []
        handover.release()
        assert put == ["a", "b"]
        yield from "cdefg"
        assert put == ["a", "b", "c", "d", "e"]  # three at most wait

    assert handover.deliver(items()) and put == list("abcdefg")


def test_a_handover_puts_what_came_before_an_error_then_raises_it():
    put = []
    handover = Handover(_delivering(lambda item: put.append(item) or True), most=4)

    def items():
        yield "a"
        raise ValueError("bad record")

    with pytest.raises(ValueError, match="bad record"):
        handover.deliver(items())
    assert put == ["a"]


def test_a_handover_stops_at_the_first_refused_put():
    put = []
    handover = Handover(_delivering(lambda item: item != "b" and not put.append(item)), most=2)
    assert not handover.deliver(iter("abcd"))
    assert put == ["a"]
