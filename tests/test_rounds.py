"""keep_sample and pause: used groups go back through the ops until one drops them; reading in rounds."""

import collections
import threading

import numpy as np
import pytest

import ingest
from ingest.pipeline.rounds import GroupRelease, Rounds
from conftest import make_reader

GROUPS = 120


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """GROUPS groups of 1 to 7 samples, sample ids ``g<group>_<k>``."""
    lines = []
    for g in range(GROUPS):
        for k in range(1 + g % 7):
            lines.append(f"g{g}_{k}|g{g}|a@{g * 10 + k}:1.0||1")
    path = tmp_path_factory.mktemp("rounds") / "r.txt"
    path.write_text("\n".join(lines) + "\n")
    return path, len(lines)


def _group(sid):
    return int(sid.split(b"_")[0][1:])


class Passes:
    """An op letting every group through ``n`` times, then dropping it; it records the passes it saw."""

    def __init__(self, n):
        self.n = n
        self.seen = collections.Counter()

    def run(self, group):
        sid = group.sample_ids[0]
        self.seen[sid] += 1
        return self.seen[sid] <= self.n


def _batches(reader):
    out = []
    with reader.startup():
        for batch in reader:
            out.append([bytes(s) for s in batch.sample_ids.tolist()])
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_keep_sample_runs_every_group_until_an_op_drops_it(small, threads):
    path, n = small
    op = Passes(3)
    reader = make_reader([path], sparse=("a",), batch_size=(50,), threads=(threads,)).add_op(op).keep_sample(True)
    batches = _batches(reader)
    delivered = collections.Counter(s for b in batches for s in b)
    assert len(delivered) == n and set(delivered.values()) == {3}
    assert set(op.seen.values()) == {4}  # three passes delivered, the fourth dropped it


def test_pause_reads_in_whole_rounds(small):
    """pause(5, wait_exactly=True) without keep: a batch never mixes two rounds of 5 groups."""
    path, n = small
    reader = make_reader([path], sparse=("a",), batch_size=(64,)).pause(5, wait_exactly=True)
    batches = _batches(reader)
    assert sorted(s for b in batches for s in b) == sorted(
        f"g{g}_{k}".encode() for g in range(GROUPS) for k in range(1 + g % 7)
    )
    for b in batches:
        assert len({_group(s) // 5 for s in b}) == 1
    assert len(batches) == GROUPS // 5  # every round is at most 28 samples: one short batch each


def test_keep_sample_with_pause_iterates_round_by_round(small):
    """XDL's iterative loop: each round of 4 groups goes through its passes before the next round is read."""
    path, n = small
    op = Passes(2)
    reader = make_reader([path], sparse=("a",), batch_size=(1000,)).add_op(op).keep_sample(True)
    batches = _batches(reader.pause(4, wait_exactly=True))
    rounds = [{_group(s) // 4 for s in b} for b in batches]
    assert all(len(r) == 1 for r in rounds)
    assert [min(r) for r in rounds] == sorted(min(r) for r in rounds)  # rounds in order
    assert len(batches) == 2 * GROUPS // 4  # two passes per round, each one partial batch
    assert set(collections.Counter(s for b in batches for s in b).values()) == {2}


def test_pause_window_without_wait_exactly(small):
    """wait_exactly=False: at most n groups live, reading goes on as soon as groups leave; nothing lost."""
    path, n = small
    reader = make_reader([path], sparse=("a",), batch_size=(16,), threads=(2,)).pause(3)
    batches = _batches(reader)
    assert sum(len(b) for b in batches) == n
    assert all(len({_group(s) for s in b}) <= 3 for b in batches)


def test_keep_sample_errors(small):
    path, _ = small
    with pytest.raises(ingest.ConfigError, match="needs an op"):
        make_reader([path], sparse=("a",)).keep_sample(True).startup()
    with pytest.raises(ingest.ConfigError, match="enable_state"):
        make_reader([path], sparse=("a",), enable_state=True).add_op(Passes(1)).keep_sample(True).startup()
    with pytest.raises(ingest.ConfigError, match="deterministic"):
        make_reader([path], sparse=("a",), deterministic=(True,)).pause(3).startup()


def test_workers_admitting_at_once_share_the_gates_places():
    """Each worker's ``admit`` counts what it takes before another can look: two asking for 3 of 4 places get 4 in all,
    and the gate closes (read first and counted after, both saw 4 free and let 6 in)."""
    for _ in range(200):
        rounds = Rounds(keep=False, limit=4, threads=2)
        stop, start, got = threading.Event(), threading.Barrier(2), []

        def worker():
            start.wait()
            got.append(rounds.admit(3, stop, lambda blk: True))

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert sorted(got) == [1, 3] and rounds.live == 4 and rounds.closed


def test_a_batchs_groups_go_back_once_however_many_threads_release_them():
    """A trainer's ``batch.release()`` and the loader's next ``next()`` may release the same batch at once."""

    class Counting:
        keep = False

        def __init__(self):
            self.calls = []

        def released(self, groups, used):
            self.calls.append(groups)

    class Block:
        group_offsets = np.array([0, 2, 5])
        nrows = 5

    for _ in range(200):
        rounds = Counting()
        release = GroupRelease(rounds, [(Block(), 0, 5)])
        start = threading.Barrier(4)

        def call():
            start.wait()
            release()

        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert rounds.calls == [2]
