"""The offset requests of ``Cluster`` without a broker (the metadata and ListOffsets answers given): a partition
whose leader is not elected yet, or moved, is asked again with fresh leaders; an error that lasts, or one no
retry can help, is a SourceError naming the partition and the error."""

from types import SimpleNamespace

import pytest
from kafka import TopicPartition

from ingest.errors import SourceError
from ingest.sources.kafka.cluster import Cluster

LEADER_NOT_AVAILABLE, NOT_LEADER, INVALID_REQUEST = 5, 6, 42
TP = TopicPartition("t", 0)


class Answers:
    """The leaders and the ListOffsets error codes the brokers give, one of each per request, the last repeated."""

    def __init__(self, leaders, codes):
        self.leaders, self.codes = list(leaders), list(codes)
        self.asked = []  # the leader each ListOffsets request went to

    def leader(self, topic):
        return {0: self.leaders.pop(0) if len(self.leaders) > 1 else self.leaders[0]}

    def ask(self, leader, request, response_class, version):
        self.asked.append(leader)
        code = self.codes.pop(0) if len(self.codes) > 1 else self.codes[0]
        answer = SimpleNamespace(partition_index=0, error_code=code, offset=42)
        return SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=[answer])])


def cluster(monkeypatch, answers, timeout_ms=2000):
    c = Cluster(["broker:9092"], {"request_timeout_ms": timeout_ms})
    monkeypatch.setattr(c, "leaders", answers.leader)
    monkeypatch.setattr(c, "_ask", answers.ask)
    return c


def test_a_partition_whose_leader_moved_is_asked_again_at_its_new_leader(monkeypatch):
    answers = Answers([("a", 1), ("b", 2)], [NOT_LEADER, 0])
    assert cluster(monkeypatch, answers).end_offsets([TP]) == {TP: 42}
    assert answers.asked == [("a", 1), ("b", 2)]


def test_a_partition_without_a_leader_yet_is_asked_once_it_has_one(monkeypatch):
    answers = Answers([None, None, ("a", 1)], [LEADER_NOT_AVAILABLE, 0])
    assert cluster(monkeypatch, answers).beginning_offsets([TP]) == {TP: 42}
    assert answers.asked == [("a", 1), ("a", 1)]


def test_a_leader_that_stays_away_is_an_error_after_the_request_timeout(monkeypatch):
    answers = Answers([("a", 1)], [NOT_LEADER])
    with pytest.raises(SourceError, match=r"kafka://broker:9092/t:0: cannot list offsets: NotLeaderForPartitionError"):
        cluster(monkeypatch, answers, timeout_ms=300).end_offsets([TP])
    assert 3 <= len(answers.asked) <= 6  # backing off from 50 ms


def test_an_error_no_retry_can_help_is_raised_at_once(monkeypatch):
    answers = Answers([("a", 1)], [INVALID_REQUEST])
    with pytest.raises(SourceError, match="cannot list offsets: InvalidRequestError"):
        cluster(monkeypatch, answers).end_offsets([TP])
    assert answers.asked == [("a", 1)]
