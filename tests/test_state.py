"""Exact resume: state() after some batches, restore() in a new reader, the rest; errors of restore."""

import gzip
import json
from collections import Counter

import numpy as np
import pytest

import ingest
from ingest import synthetic
from ingest.convert import convert
from ingest.sources import seekable
from conftest import flatten, key_of, make_reader


def _reader(paths, file_type="txt", aux=(), dsl=None, **options):
    options.setdefault("batch_size", (100,))
    reader = synthetic.declare(make_reader(paths, file_type=file_type, **options), aux=aux)
    return reader if dsl is None else reader.feature("x", "sparse", dsl=dsl)


def _samples(batches):
    return Counter(key_of(s) for b in batches for s in flatten(b))


def _split_run(make, stops):
    """Samples delivered by a chain of readers: each takes ``stops[i]`` batches and hands its state to the
    next, which restores it; the last one reads to the end.  Returns (Counter of samples, states)."""
    got = Counter()
    state = None
    states = []
    for stop in list(stops) + [None]:
        reader = make()
        if state is not None:
            reader.restore(state)
        reader.startup()
        with reader:
            for taken, batch in enumerate(reader, 1):
                got.update(key_of(s) for s in flatten(batch))
                if taken == stop:
                    break
            state = reader.state()
            states.append(json.loads(state))
    return got, states


@pytest.fixture(scope="module")
def files(tmp_path_factory, synthetic_file):
    out = tmp_path_factory.mktemp("state")
    quiet = {"log": lambda *a: None}
    aux = convert([str(synthetic_file)], str(out / "ads.pb"), aux="auto", **quiet)["aux"]
    convert([str(synthetic_file)], str(out / "ads.pb.zst"), aux=aux, **quiet)
    with pytest.MonkeyPatch.context() as patch:  # frames of about 300 KB of pb: units of one frame each
        patch.setattr(seekable, "FRAME_BYTES", 64 << 10)
        convert([str(synthetic_file)], str(out / "framed.pb.zst"), aux=aux, **quiet)
    convert([str(synthetic_file)], str(out / "ads.spb"), **quiet)
    return {
        "txt": synthetic_file,
        "pb": out / "ads.pb",
        "pb.zst": out / "ads.pb.zst",
        "pb.zst-frames": out / "framed.pb.zst",
        "spb": out / "ads.spb",
        "aux": aux,
    }


CASES = [
    # (format, threads, options)
    ("txt", 1, {}),
    ("txt", 2, {}),
    ("txt", 2, {"unit_bytes": (200_000,)}),
    ("txt", 1, {"split_group": (False,)}),
    ("txt", 2, {"epochs": (2,), "shuffle": (7,)}),
    ("pb", 1, {}),
    ("pb", 2, {"unit_bytes": (100_000,)}),
    ("pb.zst", 2, {}),
    ("pb.zst-frames", 2, {"unit_bytes": (30_000,)}),
    ("pb.zst-frames", 1, {}),  # one unit of many frames: a resume passes over the frames before its position
    ("pb.zst-frames", 1, {"unit_bytes": (30_000,), "epochs": (2,), "shuffle": (7,)}),
    ("spb", 1, {}),
    ("txt", 2, {"deterministic": (True,)}),
    ("pb", 2, {"unique_ids": (True,), "dsl": "cartesian(cate, age)"}),
    ("txt", 0, {"unit_bytes": (200_000,)}),
    ("pb", 0, {"unique_ids": (True,), "epochs": (2,), "shuffle": (7,)}),
]


@pytest.mark.parametrize(
    "fmt,threads,options", CASES, ids=[f"{c[0]}-t{c[1]}-{'-'.join(c[2]) or 'plain'}" for c in CASES]
)
def test_resume_delivers_every_sample_once(files, fmt, threads, options):
    file_type = fmt.split(".")[0]
    aux = files["aux"] if file_type == "pb" else ()

    def make():
        return _reader([files[fmt]], file_type=file_type, aux=aux, threads=(threads,), enable_state=True, **options)

    whole = make()
    whole.startup()
    with whole:
        want = _samples(whole)
    got, states = _split_run(make, [3, 1, 7])
    assert got == want
    assert [s["batches"] for s in states[:3]] == [3, 4, 11]
    assert states[-1]["samples"] == sum(want.values())
    assert states[-1]["partial"] == [] and states[-1]["done"] == {}


def test_state_records_delivered_positions(files):
    """A batch that cuts a group: the partial position is that group's start and the rows delivered."""
    reader = make_reader([files["txt"]], sparse=("cate",), batch_size=(7,), enable_state=True)
    reader.startup()
    with reader:
        first = next(reader)
        state = json.loads(reader.state())
    assert state["format"] == "ingest-state" and state["version"] == 1
    assert state["batches"] == 1 and state["samples"] == first.size == 7
    [[epoch, unit, position, rows]] = state["partial"]
    assert (epoch, unit) == (0, 0)
    lines = files["txt"].read_bytes().split(b"\n")[:100]
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    gids = [line.split(b"|")[1] for line in lines]
    g0 = 7  # the 8th sample's group: where it starts, and how many of its samples were delivered
    while g0 > 0 and gids[g0 - 1] == gids[7]:
        g0 -= 1
    assert (position, rows) == (starts[g0], 7 - g0)


def test_state_without_enable_state_is_an_error(files):
    reader = make_reader([files["txt"]], sparse=("cate",))
    reader.startup()
    with reader, pytest.raises(ingest.ConfigError, match="enable_state=True"):
        reader.state()


def test_restore_checks_paths_and_options(files, tmp_path):
    reader = make_reader([files["txt"]], sparse=("cate",), batch_size=(64,), enable_state=True)
    reader.startup()
    with reader:
        next(reader)
        state = reader.state()
    other = tmp_path / "other.txt"
    other.write_bytes(files["txt"].read_bytes()[:5000])
    with pytest.raises(ingest.StateError, match="another input"):
        make_reader([other], sparse=("cate",)).restore(state).startup()
    with pytest.raises(ingest.StateError, match="split_group=True, this reader has split_group=False"):
        make_reader([files["txt"]], sparse=("cate",), split_group=(False,)).restore(state).startup()
    with pytest.raises(ingest.StateError, match="shard=\\[0, 1\\], this reader has shard=\\[1, 2\\]"):
        make_reader([files["txt"]], sparse=("cate",), shard=(1, 2)).restore(state).startup()
    with pytest.raises(ingest.StateError, match="not an ingest reader state"):
        make_reader([files["txt"]]).restore(b"garbage")
    newer = json.loads(state)
    newer["version"] = 99
    with pytest.raises(ingest.StateError, match="version 99"):
        make_reader([files["txt"]]).restore(json.dumps(newer).encode())
    # features and batch size may change: they do not move samples
    reader = make_reader([files["txt"]], sparse=("brand",), batch_size=(10,)).restore(state)
    reader.startup()
    reader.shutdown()


def test_save_state_every_and_restore_from(files, tmp_path):
    url = str(tmp_path / "ckpt" / "reader.state")
    (tmp_path / "ckpt").mkdir()

    def make():
        return _reader([files["txt"]], threads=(2,), batch_size=(50,))

    whole = make()
    whole.startup()
    with whole:
        want = _samples(whole)
    reader = make().save_state_every(4, url)
    reader.startup()
    got = Counter()
    seen = []
    with reader:
        for i, batch in enumerate(reader):
            seen.append(_samples([batch]))
            if i == 9:  # the state saved when batch 9 was asked for covers batches 0..7
                break
    saved = json.loads(open(url, "rb").read())
    assert saved["batches"] == 8
    for c in seen[:8]:
        got.update(c)
    rest = make().restore_from(url)
    rest.startup()
    with rest:
        got.update(_samples(rest))
    assert got == want
    assert json.loads(open(url, "rb").read())["batches"] == 8  # restore_from alone writes nothing
    fresh = make().restore_from(str(tmp_path / "missing.state"), missing_ok=True)
    fresh.startup()
    fresh.shutdown()
    with pytest.raises(ingest.StateError, match="no saved reader state"):
        make().restore_from(str(tmp_path / "missing.state"))


def test_state_after_the_end_resumes_nothing(files):
    reader = _reader([files["txt"]], enable_state=True)
    reader.startup()
    with reader:
        for _ in reader:
            pass
        state = reader.state()
    again = _reader([files["txt"]]).restore(state)
    again.startup()
    with again:
        assert list(again) == []


def test_state_from_another_thread(files):
    """A checkpoint thread taking state() while the consumer iterates gets consistent states."""
    import threading

    reader = _reader([files["txt"]], threads=(2,), batch_size=(10,), enable_state=True)
    reader.startup()
    states, done = [], threading.Event()

    def checkpoints():
        while not done.is_set():
            states.append(json.loads(reader.state()))

    taker = threading.Thread(target=checkpoints)
    with reader:
        taker.start()
        n = sum(b.size for b in reader)
        done.set()
        taker.join()
    assert len(states) > 10
    counts = [s["samples"] for s in states]
    assert counts == sorted(counts) and counts[-1] <= n


def test_a_worker_never_finds_a_unit_undelivered_and_without_its_position():
    """``Progress.where`` reads whether a unit was delivered and where it continues at once: a worker asking while
    the consumer's thread hands out units' last samples (and, at the end, closes the epoch) never finds one
    undelivered with no position, which it would read again from its start."""
    import threading

    from ingest.pipeline.progress import Marks, Progress

    units = list(range(3000))
    progress = Progress(units)
    for u in units:
        progress.apply(Marks(positions={(0, u): (10, 1)}), batch=False)
    finished, lost = threading.Event(), []

    def consumer():
        for u in units:
            progress.apply(Marks(done=[(0, u)]), batch=False)
        finished.set()

    handing = threading.Thread(target=consumer)
    handing.start()
    while not finished.is_set():
        for u in units[::7]:
            delivered, resume = progress.where(0, u)
            if not delivered and resume is None:
                lost.append(u)
    handing.join()
    assert lost == [] and progress.where(0, 0) == (True, None) and progress.epoch == 1


# -- the group shuffle of shuffle(seed, buffer=n) ------------------------------------------------------------------
def _order(reader, stop=None):
    """Sample ids in delivery order (the first ``stop`` batches, with the state after them when ``stop``)."""
    ids = []
    reader.startup()
    with reader:
        for taken, batch in enumerate(reader, 1):
            ids += [batch.sample_id(r) for r in range(batch.size)]
            if taken == stop:
                return ids, reader.state()
    return ids, None


def _shuffled(files, fmt="pb", threads=2, buffer=40, seed=3, **options):
    reader = _reader(
        [files[fmt]],
        fmt,
        aux=files["aux"] if fmt.startswith("pb") else (),
        threads=(threads,),
        epochs=(2,),
        pad=(False,),
        enable_state=True,
        **options,
    )
    return reader.shuffle(seed, buffer=buffer)


@pytest.mark.parametrize("fmt,buffer", [("pb", 40), ("txt", 3), ("pb", 1000)])
def test_the_group_shuffle_is_a_seeded_permutation_of_whole_groups(files, fmt, buffer):
    plain, _ = _order(_reader([files[fmt]], fmt, aux=files["aux"] if fmt == "pb" else (), epochs=(2,), pad=(False,)))
    shuffled, _ = _order(_shuffled(files, fmt, buffer=buffer))
    assert Counter(shuffled) == Counter(plain) and shuffled != plain
    assert _order(_shuffled(files, fmt, buffer=buffer))[0] == shuffled  # the same seed, the same order
    assert _order(_shuffled(files, fmt, buffer=buffer, seed=4))[0] != shuffled
    # groups stay whole: in each epoch a group's samples come one after the other
    half = len(shuffled) // 2
    for epoch in (shuffled[:half], shuffled[half:]):
        groups = [sid.split(b"_")[0] for sid in epoch]
        runs = [g for k, g in enumerate(groups) if k == 0 or groups[k - 1] != g]
        assert len(runs) == len(set(groups))


@pytest.mark.parametrize("fmt,buffer", [("pb", 40), ("txt", 7)])
def test_each_window_comes_in_its_seeded_order_with_every_feature(files, fmt, buffer):
    """The design's order: each epoch's groups, in input order (one work unit: no unit order to shuffle), cut
    into windows of ``buffer`` groups, each window in the order of ``default_rng([seed, epoch,
    window]).permutation``; every sample keeps its features, aux-table and DSL ones too."""
    aux = files["aux"] if fmt == "pb" else ()
    options = dict(aux=aux, dsl="cartesian(clk_hist, item)", epochs=(2,), pad=(False,), unit_bytes=(1 << 30,))
    plain = _reader([files[fmt]], fmt, deterministic=(True,), **options)
    shuffled = _reader([files[fmt]], fmt, threads=(2,), **options)
    plain = [s for b in plain.startup() for s in flatten(b)]
    got = [s for b in shuffled.shuffle(3, buffer=buffer).startup() for s in flatten(b)]
    want = []
    for epoch, samples in enumerate([plain[: len(plain) // 2], plain[len(plain) // 2 :]]):
        groups = []
        for s in samples:  # a group's samples share the sample id's head
            if groups and groups[-1][0]["sid"].split(b"_")[0] == s["sid"].split(b"_")[0]:
                groups[-1].append(s)
            else:
                groups.append([s])
        for number, first in enumerate(range(0, len(groups), buffer)):
            window = groups[first : first + buffer]
            for k in np.random.default_rng([3, epoch, number]).permutation(len(window)):
                want += window[k]
    assert [key_of(s) for s in got] == [key_of(s) for s in want]
    assert any(s["sparse"]["x"] for s in got)


@pytest.mark.parametrize("fmt,threads,stops", [("pb", 2, [3, 17]), ("txt", 1, [1, 25]), ("pb", 1, [59])])
def test_a_restored_group_shuffle_delivers_the_rest_in_the_same_order(files, fmt, threads, stops):
    whole, _ = _order(_shuffled(files, fmt, threads, unit_bytes=(300_000,)))
    delivered, state = [], None
    for stop in stops + [None]:
        reader = _shuffled(files, fmt, threads, unit_bytes=(300_000,))
        if state is not None:
            reader.restore(state)
        ids, state = _order(reader, stop)
        delivered += ids
    assert delivered == whole


def test_the_group_shuffle_refuses_what_it_cannot_follow(files):
    with pytest.raises(ingest.ConfigError, match="a buffer needs a seed"):
        _reader([files["txt"]]).shuffle(None, buffer=10)
    reader = _reader([files["txt"]]).shuffle(3, buffer=10).pause(100)
    with pytest.raises(ingest.ConfigError, match="keep_sample or pause"):
        reader.startup()


@pytest.mark.parametrize("suffix, unit_bytes", [("", 1 << 20), ("", 1 << 30), (".gz", 1 << 20)])
def test_an_error_after_a_restore_names_the_line_a_fresh_read_names(tmp_path, synthetic_file, suffix, unit_bytes):
    """In byte ranges, in a whole file and in a compressed one (whole units resume by skipping to the position)."""
    lines = synthetic_file.read_bytes().splitlines(keepends=True)[:3000]
    bad = lines[2900].replace(b"|", b"!", 1)  # its group id field made unreadable
    data = b"".join(lines[:2900] + [bad] + lines[2901:])
    path = tmp_path / f"bad.txt{suffix}"
    path.write_bytes(gzip.compress(data) if suffix else data)

    def error_of(stops):
        with pytest.raises(ingest.DataError) as caught:
            _split_run(lambda: _reader([path], enable_state=True, unit_bytes=(unit_bytes,)), stops)
        return caught.value

    fresh, resumed = error_of([]), error_of([5])
    assert fresh.line == 2901 and (resumed.line, resumed.offset) == (fresh.line, fresh.offset)


def _edited(state, edit):
    obj = json.loads(state)
    edit(obj)
    return json.dumps(obj).encode()


def _entry(i, value):
    def edit(obj):
        obj["partial"][0][i] = value

    return edit


def _set(key, value):
    return lambda obj: obj.__setitem__(key, value)


EDITS = [
    # (what is edited, the edit, what the StateError says); the state is of unit 0 of 2, in epoch 0 of 1
    ("rows < 0", _entry(3, -1), r"a partial entry is \[0, 0, \d+, -1\]; expected .* rows >= 0"),
    ("no epoch", lambda obj: obj.pop("epoch"), "no field 'epoch'"),
    ("options a list", _set("options", [1]), r"options is \[1\]; expected an object"),
    ("done a list", _set("done", []), r"done is \[\]; expected an object"),
    ("a short entry", lambda obj: obj["partial"][0].pop(), r"expected \[epoch, unit index, position, rows\]"),
    ("position a string", _entry(2, "x"), "a position and rows >= 0"),
    ("epoch a float", _set("epoch", 1.5), "epoch is 1.5; expected an int >= 0"),
    ("epoch < 0", _set("epoch", -1), "epoch is -1"),
    ("epoch past epochs", _set("epoch", 5), "epoch is 5; expected at most epochs=1"),
    ("entry past epochs", _entry(0, 7), "an epoch of done or partial is 7; expected below epochs=1"),
    ("units past the plan", _set("done", {"0": [[0, 10**9]]}), r"0 <= first < end <= 2"),
    ("negative units", _set("done", {"0": [[-5, 1]]}), r"0 <= first < end <= 2"),
    ("another unit", _entry(1, 1), "the position of a partial entry .* expected a byte offset of .* in"),
    ("position past the file", _entry(2, 2**63), "the position of a partial entry"),
    ("position past the range", _entry(2, 10**6 * 100), "the position of a partial entry"),
    ("position in the next range", None, r"resumes the byte range \[0, \d+\) at byte \d+, where none of its lines"),
    ("position mid-line", _entry(2, 1), r"at byte 1, where none of its lines starts"),
    ("rows past the group", _entry(3, 10**6), "says 1000000 samples of the group at byte \\d+ were delivered"),
]


@pytest.mark.parametrize("what, edit, says", EDITS, ids=[e[0] for e in EDITS])
def test_an_edited_state_is_refused_before_anything_is_read(files, what, edit, says):
    """A state that ``state()`` could not have written (a field missing, of another type, out of range, a position
    outside its unit or rows past its group) is a StateError: none reads other samples or corrupts memory."""
    size = files["txt"].stat().st_size
    make = lambda: _reader([files["txt"]], unit_bytes=(size // 2 + 1,), enable_state=True)  # noqa: E731
    reader = make().startup()
    with reader:
        for _ in range(3):
            next(reader)
        state = reader.state()
    assert json.loads(state)["partial"][0][:2] == [0, 0] and json.loads(state)["partial"][0][3] > 0
    if edit is None:  # a position in unit 1's bytes, given to unit 0
        edit = _entry(2, size // 2 + 100)
    with pytest.raises(ingest.StateError, match=says):
        list(make().restore(_edited(state, edit)).startup())


def test_a_pb_range_resumes_only_where_one_of_its_records_starts(files):
    size = files["pb"].stat().st_size
    make = lambda: _reader([files["pb"]], "pb", aux=files["aux"], unit_bytes=(size // 2 + 1,), enable_state=True)  # noqa: E731
    reader = make().startup()
    with reader:
        next(reader)
        state = reader.state()
    at = json.loads(state)["partial"][0][2]
    with pytest.raises(ingest.StateError, match=f"resumes the byte range \\[0, \\d+\\) at byte {at + 1}, where none"):
        list(make().restore(_edited(state, _entry(2, at + 1))).startup())
    assert sum(b.size for b in make().restore(state).startup()) == 3000 - 100


def test_a_window_state_past_the_window_is_refused(files):
    _, state = _order(_shuffled(files, "txt", 1), 3)
    assert json.loads(state)["window"][2] == 300
    with pytest.raises(ingest.StateError, match="says 100000 samples of window 0 of epoch 0 were delivered"):
        edited = _edited(state, lambda obj: obj["window"].__setitem__(2, 100_000))
        list(_shuffled(files, "txt", 1).restore(edited).startup())


def test_restore_takes_the_state_as_bytes_or_str_and_nothing_else(files):
    reader = _reader([files["txt"]], enable_state=True).startup()
    with reader:
        next(reader)
        state = reader.state()
    rest = sum(b.size for b in _reader([files["txt"]]).restore(state.decode()).startup())
    assert rest == 3000 - 100
    with pytest.raises(ingest.StateError, match="a reader state is bytes .*, not int"):
        _reader([files["txt"]]).restore(2**40)


def test_save_state_every_checks_its_url_and_makes_its_folder(files, tmp_path):
    with pytest.raises(ingest.ConfigError, match="save_state_every url=None: expected a path or URL"):
        _reader([files["txt"]]).save_state_every(2, None)
    with pytest.raises(ingest.ConfigError, match="is a directory"):
        _reader([files["txt"]]).save_state_every(2, tmp_path)
    url = tmp_path / "new" / "folder" / "reader.state"
    reader = _reader([files["txt"]]).save_state_every(2, url).startup()
    with reader:
        for _ in range(3):
            next(reader)
    assert json.loads(url.read_bytes())["batches"] == 2 and sorted(p.name for p in url.parent.iterdir()) == [
        "reader.state"
    ]


@pytest.mark.parametrize(
    "newline, shuffle, suffix", [(b"\n", False, ""), (b"", False, ""), (b"\n", True, ""), (b"", False, ".gz")]
)
def test_a_state_after_any_batch_restores_to_the_rest(tmp_path, newline, shuffle, suffix):
    """Every state a run can take (after each batch, the last one included) is accepted and resumes exactly:
    positions at a range's end, inside a group cut by max_group_size, in a file without a final newline; with a
    shuffle buffer over two epochs, whose states keep done units of an epoch before their first undelivered one,
    and one taken where a batch ends a window (the next window's number seeds its order)."""
    lines = [f"s{i}|g{i // 7}|f@{i}||1" for i in range(150)]
    path = tmp_path / f"f.txt{suffix}"
    data = "\n".join(lines).encode() + newline
    path.write_bytes(gzip.compress(data) if suffix else data)

    def make():
        reader = make_reader([path], sparse=["f"], batch_size=(16,), threads=(0,), enable_state=True)
        reader.unit_bytes(1024).max_group_size(3)
        return reader.epochs(2).shuffle(7, buffer=5) if shuffle else reader

    whole = [key_of(s) for b in make().startup() for s in flatten(b)]
    for k in range(len(whole) // 16 + 2):
        first = make().startup()
        taken = [key_of(s) for _, b in zip(range(k), first) for s in flatten(b)]
        state = first.state()
        first.shutdown()
        rest = [key_of(s) for b in make().restore(state).startup() for s in flatten(b)]
        assert taken + rest == whole, k


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_a_text_file_resumes_only_where_a_line_starts(tmp_path, synthetic_file, suffix):
    data = synthetic_file.read_bytes()
    path = tmp_path / f"whole.txt{suffix}"
    path.write_bytes(gzip.compress(data) if suffix else data)
    reader = _reader([path], enable_state=True).startup()
    with reader:
        next(reader)
        state = reader.state()
    at = json.loads(state)["partial"][0][2]
    assert data[at - 1 : at] == b"\n"
    # the plain file is read in byte ranges, the compressed one whole: both are checked
    with pytest.raises(ingest.StateError, match=f"at byte {at + 1}, where (no line|none of its lines) starts"):
        list(_reader([path]).restore(_edited(state, _entry(2, at + 1))).startup())
    assert sum(b.size for b in _reader([path]).restore(state).startup()) == 3000 - 100
