"""The benchmarks' own kernels against their twins."""

import sys

import numpy as np
from hypothesis import given, strategies as st

from conftest import ROOT
from pbwire import frame
from test_protobuf import _group

sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_decoder import wire_walk  # noqa: E402 - the benchmarks' folder is not a package


def twin_walk(groups):
    """Every FeatureValue's key, and its value bits where it has a value, in the order a serializer writes them."""
    keys, values = [], {}
    for group in groups:
        for table in group.feature_tables:
            for line in table.feature_lines:
                for feature in line.features:
                    for v in feature.values:
                        if v.HasField("key"):
                            if v.HasField("value"):
                                values[len(keys)] = int(np.float32(v.value).view(np.uint32))
                            keys.append(v.key)
    return keys, values


@given(groups=st.lists(_group(1), max_size=5), cut=st.integers(0, 3))
def test_wire_walk_matches_twin(groups, cut):
    """The walk finds the keys and values the protobuf library parses, in order, and only in whole records."""
    data = np.frombuffer(frame([g.SerializeToString() for g in groups]) + b"\x01\x02\x03"[:cut], np.uint8).copy()
    keys = np.empty(len(data), np.int64)
    values = np.empty(len(data), np.uint32)
    ids = wire_walk(data, len(data), keys, values)
    want_keys, want_values = twin_walk(groups)
    assert keys[:ids].tolist() == want_keys
    assert {i: int(values[i]) for i in want_values} == want_values
