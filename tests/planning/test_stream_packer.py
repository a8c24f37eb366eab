"""StreamPacker against a plain-Python model of the streaming rule (planning spec, "Streaming packer")."""

from __future__ import annotations

import copy
import pickle
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqbalance import StreamPacker
from tests import helpers


class Model:
    """The rule written out plainly: packs are lists of (index, length), every figure recomputed."""

    def __init__(
        self, cap: int, max_open: int, max_sequences: int | None, footprint: str, by_key: bool
    ) -> None:
        self.cap, self.max_open, self.most = cap, max_open, max_sequences
        self.footprint, self.by_key = footprint, by_key
        self.next = 0
        self.packs: list[tuple[Any, list[tuple[int, int]]]] = []

    def charged(self, items: list[tuple[int, int]]) -> int:
        lengths = [length for _, length in items]
        if self.footprint == "sum":
            return sum(lengths)
        return len(lengths) * max(lengths)

    def room(self, items: list[tuple[int, int]]) -> int:
        return self.cap - self.charged(items)

    def full(self, items: list[tuple[int, int]]) -> bool:
        return self.room(items) == 0 or (self.most is not None and len(items) >= self.most)

    def add(self, length: int, key: Any = None) -> list[list[int]]:
        index = self.next
        self.next += 1
        best: tuple[int, int] | None = None
        for at, (pack_key, items) in enumerate(self.packs):
            placed = [*items, (index, length)]
            fits = self.room(placed) >= 0 and (self.most is None or len(placed) <= self.most)
            if pack_key == key and fits and (best is None or self.room(placed) < best[0]):
                best = (self.room(placed), at)
        closed: list[list[int]] = []
        if best is not None:
            at = best[1]
            self.packs[at][1].append((index, length))
            if self.full(self.packs[at][1]):
                closed.append([i for i, _ in self.packs.pop(at)[1]])
            return closed
        if len(self.packs) == self.max_open:
            rooms = [self.room(items) for _, items in self.packs]
            fullest = rooms.index(min(rooms))
            closed.append([i for i, _ in self.packs.pop(fullest)[1]])
        items = [(index, length)]
        if self.full(items):
            closed.append([index])
        else:
            self.packs.append((key, items))
        return closed

    def open_packs(self) -> list[list[int]]:
        return [[i for i, _ in items] for _, items in self.packs]

    def flush(self) -> list[list[int]]:
        packs = self.open_packs()
        self.packs = []
        return packs


KEYS = ["text", "image", 7]


@st.composite
def streams(draw: st.DrawFn, size: int = 80) -> tuple[dict[str, Any], list[tuple[int, Any]]]:
    cap = draw(st.integers(1, 60))
    options = {
        "max_open": draw(st.integers(1, 6)),
        "max_sequences": draw(st.none() | st.integers(1, 5)),
        "footprint": draw(st.sampled_from(["sum", "padded"])),
        "by_key": draw(st.booleans()),
    }
    key = st.sampled_from(KEYS) if options["by_key"] else st.none()
    # A few repeated lengths make ties (equal room in two packs) common; lengths near the cap
    # make packs fill up exactly now and then.
    palette = draw(st.lists(st.integers(1, cap), min_size=1, max_size=3))
    length = st.sampled_from(palette) | st.integers(1, cap) | st.integers(max(1, cap - 3), cap)
    # Hypothesis keeps lists short unless told; long streams are where the rule gets busy.
    count = draw(st.integers(0, size))
    items = draw(st.lists(st.tuples(length, key), min_size=count, max_size=count))
    return {"max_token_len": cap, **options}, items


def model_of(settings: dict[str, Any]) -> Model:
    return Model(
        settings["max_token_len"],
        settings["max_open"],
        settings["max_sequences"],
        settings["footprint"],
        settings["by_key"],
    )


def check_packs(settings: dict[str, Any], items: list[tuple[int, Any]], packs: list[list[int]]):
    """Every index once; every pack within the cap (in its footprint), the count, one key."""
    assert sorted(i for pack in packs for i in pack) == list(range(len(items)))
    for pack in packs:
        assert pack, "an empty pack"
        assert pack == sorted(pack)
        lengths = [items[i][0] for i in pack]
        charged = sum(lengths) if settings["footprint"] == "sum" else len(pack) * max(lengths)
        assert charged <= settings["max_token_len"]
        if settings["max_sequences"] is not None:
            assert len(pack) <= settings["max_sequences"]
        assert len({items[i][1] for i in pack}) == 1


@given(streams())
def test_add_follows_the_model(case: tuple[dict[str, Any], list[tuple[int, Any]]]) -> None:
    settings, items = case
    packer = StreamPacker(**settings)
    model = model_of(settings)
    every: list[list[int]] = []
    for length, key in items:
        closed = packer.add(length, key)
        assert closed == model.add(length, key)
        assert packer.open_packs == model.open_packs()
        assert len(packer.open_packs) <= settings["max_open"]
        every += closed
    assert packer.items_added == len(items)
    rest = packer.flush()
    assert rest == model.flush()
    assert packer.open_packs == []
    check_packs(settings, items, every + rest)


@given(streams(), st.lists(st.integers(0, 80), max_size=4))
def test_add_many_returns_the_adds_concatenated(
    case: tuple[dict[str, Any], list[tuple[int, Any]]], cuts: list[int]
) -> None:
    settings, items = case
    one_by_one = StreamPacker(**settings)
    expected = [pack for length, key in items for pack in one_by_one.add(length, key)]
    batched = StreamPacker(**settings)
    got: list[list[int]] = []
    bounds = [0, *sorted(min(cut, len(items)) for cut in cuts), len(items)]
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        lengths = np.array([length for length, _ in items[start:end]], dtype=np.int64)
        keys = [key for _, key in items[start:end]] if settings["by_key"] else None
        got += batched.add_many(lengths, keys)
    assert got == expected
    assert batched.flush() == one_by_one.flush()


@given(streams(), st.integers(0, 80), st.booleans())
def test_a_pickled_packer_goes_on_identically(
    case: tuple[dict[str, Any], list[tuple[int, Any]]], cut: int, deep_copy: bool
) -> None:
    settings, items = case
    cut = min(cut, len(items))
    packer = StreamPacker(**settings)
    for length, key in items[:cut]:
        packer.add(length, key)
    restored = copy.deepcopy(packer) if deep_copy else pickle.loads(pickle.dumps(packer))
    assert restored.open_packs == packer.open_packs
    assert repr(restored) == repr(packer)
    for length, key in items[cut:]:
        assert restored.add(length, key) == packer.add(length, key)
    assert restored.flush() == packer.flush()


def test_documented_examples() -> None:
    packer = StreamPacker(10, max_open=2)
    assert (packer.add(6), packer.add(4)) == ([], [[0, 1]])
    assert (packer.add(7), packer.add(5), packer.add(9)) == ([], [], [[2]])
    assert packer.flush() == [[3], [4]]
    # Padded: two items of 5 and 2 are charged 2 * 5 = 10, so a third (3 * 5 = 15) opens a pack.
    padded = StreamPacker(12, footprint="padded")
    assert [padded.add(n) for n in (2, 5, 3)] == [[], [], []]
    assert padded.flush() == [[0, 1], [2]]
    limited = StreamPacker(100, max_sequences=2)
    assert [limited.add(1) for _ in range(5)] == [[], [[0, 1]], [], [[2, 3]], []]
    # Two packs with room 4: a 2 goes to the earlier one.
    tied = StreamPacker(10)
    assert [tied.add(n) for n in (6, 6, 2)] == [[], [], []]
    assert tied.open_packs == [[0, 2], [1]]
    keyed = StreamPacker(10, by_key=True)
    assert [keyed.add(3, "a"), keyed.add(3, "b"), keyed.add(3, "a")] == [[], [], []]
    assert keyed.flush() == [[0, 2], [1]]


def test_a_pack_full_at_once_closes_after_the_fullest_it_pushed_out() -> None:
    packer = StreamPacker(10, max_open=1)
    packer.add(4)
    assert packer.add(10) == [[0], [1]]
    assert packer.open_packs == []


def snapshot(packer: StreamPacker) -> bytes:
    return pickle.dumps(packer)


@pytest.mark.parametrize(
    ("length", "error", "message"),
    [
        (0, ValueError, "length must be >= 1, got 0"),
        (-3, ValueError, "length must be >= 0, got -3"),
        (False, ValueError, "length must be >= 1, got 0"),
        (11, ValueError, r"length = 11 is longer than max_token_len \(10\)"),
        (2**70, OverflowError, r"length must be <= 2\*\*63 - 1, got 1180591620717411303424"),
        (2.0, TypeError, r"length must be an integer, got 2.0 \(float\)"),
        ("3", TypeError, "length must be an integer, got '3'"),
    ],
)
def test_a_refused_add_names_the_value_and_changes_nothing(
    length: Any, error: type[Exception], message: str
) -> None:
    packer = StreamPacker(10, footprint="padded")
    packer.add(4)
    before = snapshot(packer)
    with pytest.raises(error, match=message):
        packer.add(length)
    assert snapshot(packer) == before
    assert packer.add(3) == []
    assert packer.open_packs == [[0, 1]]


@pytest.mark.parametrize(
    ("lengths", "error", "message"),
    [
        ([3, 0, 2], ValueError, r"lengths\[1\] must be >= 1, got 0"),
        ([3, 4, 11], ValueError, r"lengths\[2\] = 11 is longer than max_token_len \(10\)"),
        ([3, -1], ValueError, r"lengths\[1\]"),
        ([3, 1.5], TypeError, r"lengths\[1\]"),
    ],
)
def test_a_refused_batch_names_the_first_bad_length_and_changes_nothing(
    lengths: list[Any], error: type[Exception], message: str
) -> None:
    packer = StreamPacker(10)
    packer.add_many([5, 7])
    before = snapshot(packer)
    with pytest.raises(error, match=message):
        packer.add_many(lengths)
    assert snapshot(packer) == before
    assert packer.add_many([5]) == [[0, 2]]


def test_key_errors_change_nothing() -> None:
    # Two packs with room 4: a 2 goes to the earlier one.
    tied = StreamPacker(10)
    assert [tied.add(n) for n in (6, 6, 2)] == [[], [], []]
    assert tied.open_packs == [[0, 2], [1]]
    keyed = StreamPacker(10, by_key=True)
    keyed.add(2, "a")
    before = snapshot(keyed)
    with pytest.raises(ValueError, match="key is required when by_key=True, got None"):
        keyed.add(3)
    with pytest.raises(TypeError, match=r"key must be hashable, got \['a'\]"):
        keyed.add(3, ["a"])
    with pytest.raises(ValueError, match="keys is required when by_key=True"):
        keyed.add_many([3])
    with pytest.raises(ValueError, match="keys has 1 items but lengths has 2"):
        keyed.add_many([3, 4], ["a"])
    with pytest.raises(ValueError, match=r"keys\[1\] is required when by_key=True, got None"):
        keyed.add_many([3, 4], ["new", None])
    with pytest.raises(ValueError, match=r"lengths\[1\] = 40"):
        keyed.add_many([3, 40], ["new", "newer"])
    assert snapshot(keyed) == before
    plain = StreamPacker(10)
    with pytest.raises(ValueError, match="key must be None when by_key=False, got 'a'"):
        plain.add(3, "a")
    with pytest.raises(ValueError, match="keys must be None when by_key=False"):
        plain.add_many([3], ["a"])
    assert plain.items_added == 0


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"max_token_len": 0}, ValueError, "max_token_len must be >= 1, got 0"),
        ({"max_token_len": 2**64}, ValueError, "max_token_len must be <= 2\\*\\*64 - 1"),
        ({"max_token_len": "8"}, TypeError, "max_token_len must be an int"),
        ({"max_open": 0}, ValueError, "max_open must be >= 1, got 0"),
        ({"max_open": 2**24 + 1}, ValueError, "max_open must be <= 2\\*\\*24"),
        ({"max_sequences": 0}, ValueError, "max_sequences must be >= 1, got 0"),
        ({"max_sequences": 1.0}, TypeError, "max_sequences must be an int"),
        ({"footprint": "max"}, ValueError, "footprint must be 'sum' or 'padded', got 'max'"),
        ({"by_key": "yes"}, TypeError, "by_key must be True or False, got 'yes' \\(str\\)"),
    ],
)
def test_bad_settings_name_the_argument(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    settings = {"max_token_len": 10, **arguments}
    with pytest.raises(error, match=message):
        StreamPacker(**settings)


def test_huge_caps_and_limits() -> None:
    packer = StreamPacker(2**64 - 1, max_sequences=2**80)
    assert packer.add(2**63 - 1) == []
    assert packer.add(2**63 - 1) == []
    assert packer.add(1) == [[0, 1, 2]]
    assert packer.add_many(np.array([2**62, 2**62], dtype=np.int64)) == []
    assert packer.max_sequences == 2**80


def test_memory_stays_bounded_over_a_long_stream_of_new_keys() -> None:
    packer = StreamPacker(1000, max_open=4, by_key=True)
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 400, size=20_000)
    seen: set[int] = set()
    for start in range(0, lengths.size, 500):
        chunk = lengths[start : start + 500]
        keys = [f"policy-{(start + i) // 3}" for i in range(chunk.size)]
        for pack in packer.add_many(chunk, keys):
            seen.update(pack)
        assert len(packer.open_packs) <= 4
        assert len(packer.__getstate__()["keys"]) <= 2 * 4 + 8 + 500
    for i in range(20_000, 20_100):
        for pack in packer.add(5, f"single-{i}"):
            seen.update(pack)
        assert len(packer.__getstate__()["keys"]) <= 2 * 4 + 9
    seen.update(i for pack in packer.flush() for i in pack)
    assert seen == set(range(20_100))


def test_keys_compare_as_dict_keys_and_survive_pruning() -> None:
    packer = StreamPacker(10, max_open=2, by_key=True)
    assert packer.add(3, 1) == []
    for i in range(40):  # many other keys push the map past its pruning size
        packer.add(10, f"k{i}")
    assert packer.add(3, 1.0) == []  # 1.0 == 1: the same key as the first item's
    assert packer.open_packs == [[0, 41]]


def test_threads_share_one_packer() -> None:
    packer = StreamPacker(64, max_open=8)
    closed: list[list[int]] = []
    lock = threading.Lock()

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(200):
            if rng.random() < 0.5:
                got = packer.add(int(rng.integers(1, 65)))
            else:
                got = packer.add_many(rng.integers(1, 65, size=int(rng.integers(0, 3000))))
            with lock:
                closed.extend(got)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    closed += packer.flush()
    indexes = sorted(i for pack in closed for i in pack)
    assert indexes == list(range(packer.items_added))


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda s: s.update(version=99),
        lambda s: s.update(core=s["core"][:5] + ([(0, 3, 3, [0]), (0, 4, 4, [0])],)),
        lambda s: s.update(core=s["core"][:5] + ([(0, 30, 30, [0])],)),
        lambda s: s.update(core=(99, *s["core"][1:])),
        lambda s: s.update(keys=[("a", 0), ("b", 0)]),
        lambda s: s.update(settings=(10, 0, None, "sum", True)),
        lambda s: s.pop("core"),
    ],
)
def test_a_corrupt_state_is_refused(corrupt: Any) -> None:
    packer = StreamPacker(10, by_key=True)
    packer.add(3, "a")
    packer.add(4, "b")
    state = packer.__getstate__()
    corrupt(state)
    fresh = StreamPacker.__new__(StreamPacker)
    with pytest.raises(ValueError, match="not a StreamPacker state"):
        fresh.__setstate__(state)


def test_a_state_claiming_more_packs_than_max_open_is_refused_before_it_is_read() -> None:
    # A pickled state may come from anywhere: a claimed size is checked before anything is
    # allocated for it (a copy sized by the claim would abort the process), and nothing read.
    child = helpers.run_child(
        """
        from seqbalance import _native

        class Claims:
            def __len__(self):
                return 2**40

            def __iter__(self):
                raise AssertionError("read")

        try:
            _native._StreamCore.from_state(10, 64, None, False, 5, Claims())
        except ValueError as error:
            print(error)
        """
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "not a StreamPacker state: more open packs than max_open"


def test_the_docs_examples_run_and_print_what_they_say(capsys: pytest.CaptureFixture[str]) -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "shapes-and-streams.md"
    section = page.read_text().split("## Streaming packer")[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, str(page), "exec"), {})
        printed = capsys.readouterr().out.splitlines()
        said = [line.split("# ", 1)[1] for line in block.splitlines() if line.startswith("print(")]
        assert len(printed) == len(said)
        for output, comment in zip(printed, said, strict=True):
            assert comment.startswith(output), (output, comment)


# A child process, because what these rule out (an abort, Ctrl-C ignored) would take the test
# runner down with it (docs/reliability.md).
CHILD_PRELUDE = helpers.CHILD_MEMORY + textwrap.dedent(
    """
    import pickle, resource, signal, time
    import numpy as np
    from seqbalance import StreamPacker

    signal.signal(signal.SIGINT, signal.default_int_handler)
    values = np.random.default_rng(0).integers(1, 32768, 20_000_000, dtype=np.int64)
    packer = StreamPacker(32768, max_open=64)
    packer.add_many(values[:1000])
    """
)


def test_ctrl_c_stops_add_many_and_leaves_the_packer_as_it_was() -> None:
    body = """
    print("started", flush=True)
    try:
        for _ in range(50):
            before = pickle.dumps(packer)
            packer.add_many(values)
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", time.monotonic(), pickle.dumps(packer) == before, flush=True)
    added = packer.items_added
    packer.add(5)
    print(packer.items_added == added + 1)
    """
    latency, words, rest = helpers.interrupt_child(
        CHILD_PRELUDE + textwrap.dedent(body), delay=1.0, timeout=120
    )
    (second,) = rest
    assert words == ["True"]  # the packer is as it was before the interrupted call
    # ~100 ms on an idle machine; 2 s of the child's own CPU time (whatever the load) leaves room
    # for a slow machine and still fails a packer deaf to signals.
    helpers.assert_prompt(latency, 2.0)
    assert second == "True"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc")
def test_add_many_too_large_for_memory_is_a_memory_error_and_changes_nothing() -> None:
    body = """
    before = pickle.dumps(packer)
    resource.setrlimit(resource.RLIMIT_AS, (address_space() + 64 * 2**20, resource.RLIM_INFINITY))
    try:
        packer.add_many(values)
    except MemoryError as error:
        print(type(error).__name__, error)
    print(pickle.dumps(packer) == before, packer.add_many([5, 6]) == [])
    """
    child = subprocess.run(
        [sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    first, second = child.stdout.splitlines()
    assert re.fullmatch(
        r"MemoryError seqbalance ran out of memory: could not allocate \d+ bytes for .+", first
    )
    assert second == "True True"
