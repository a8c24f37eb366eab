"""StreamPacker on a shuffled stream: its pack count against offline best fit decreasing and
against seqpacker's streaming packers (NextFit, Harmonic-K), and its time per item.

    python benches/bench_stream.py [--n 1000000] [--cpu-time]   # the table (release build)
    pytest benches/bench_stream.py --benchmark-enable

The stream is issue 22's workload, ``min(int(lognormal(7, 1)) + 16, 32768)`` in random order,
cap 32,768. Offline BFD (``pack_sequences(..., algorithm="bfd")``) sees the whole batch at once
and sorts it; a streaming packer sees one length at a time and keeps a bounded number of packs
open, so BFD's count is the yardstick (ratio 1.0 = as few packs as BFD). seqpacker's rows run
when seqpacker is installed (``pip install seqpacker``) and are skipped otherwise. Times are per
item, beside ``numpy.sort`` of the same array per item as the floor; seqpacker's stream has no
batch call, so its per-item ``add`` loop is compared with StreamPacker's.

With benchmarks disabled (the default in the test suite) each case runs once on a smaller
stream and checks its answer: every index once, the cap held.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import math
import time
from collections.abc import Callable, Iterable

import numpy as np
import pytest

from seqbalance import StreamPacker, _native, pack_sequences
from workloads import best_of

try:
    import seqpacker
except ImportError:  # an optional benchmark dependency
    seqpacker = None

CAP = 32_768
N = 1_000_000
SMALL_N = 20_000


def shuffled_stream(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = np.minimum(rng.lognormal(7.0, 1.0, n).astype(np.int64) + 16, CAP)
    return rng.permutation(raw)


def check(packs: Iterable[Iterable[int]], lengths: np.ndarray, cap: int = CAP) -> int:
    """Assert that every index is in one pack and no pack is over the cap; the pack count."""
    arrays = [np.fromiter(pack, dtype=np.int64) for pack in packs]
    assert all(array.size > 0 for array in arrays)
    assert all(int(lengths[array].sum()) <= cap for array in arrays)
    flat = np.sort(np.concatenate(arrays)) if arrays else np.empty(0, np.int64)
    assert np.array_equal(flat, np.arange(lengths.size))
    return len(arrays)


def stream_add_many(lengths: np.ndarray, **options) -> list[list[int]]:
    packer = StreamPacker(CAP, **options)
    return packer.add_many(lengths) + packer.flush()


def stream_add_loop(lengths: list[int], **options) -> list[list[int]]:
    packer = StreamPacker(CAP, **options)
    packs: list[list[int]] = []
    for length in lengths:
        packs += packer.add(length)
    return packs + packer.flush()


def seqpacker_stream(lengths: list[int], strategy: str) -> list[list[int]]:
    assert seqpacker is not None
    packer = seqpacker.StreamPacker(CAP, strategy=strategy)
    packs: list[list[int]] = []
    for length in lengths:
        packs += [pack.sequence_ids for pack in packer.add(length)]
    return packs + [pack.sequence_ids for pack in packer.finish()]


# -- pytest-benchmark -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stream(request) -> np.ndarray:
    enabled = not request.config.getoption("benchmark_disable", default=True)
    return shuffled_stream(N if enabled else SMALL_N)


@pytest.mark.parametrize("max_open", [16, 64])
def test_stream_add_many(benchmark, stream, max_open):
    count = check(stream_add_many(stream, max_open=max_open), stream)
    assert count >= math.ceil(int(stream.sum()) / CAP)
    benchmark(stream_add_many, stream, max_open=max_open)


def test_stream_add_loop(benchmark, stream):
    as_list = stream.tolist()
    assert stream_add_loop(as_list) == stream_add_many(stream)
    benchmark.pedantic(stream_add_loop, args=(as_list,), rounds=3, iterations=1)


@pytest.mark.parametrize("strategy", ["nf", "hk"])
def test_seqpacker_stream_add_loop(benchmark, stream, strategy):
    if seqpacker is None:
        pytest.skip("seqpacker is not installed (pip install seqpacker)")
    as_list = stream.tolist()
    check(seqpacker_stream(as_list, strategy), stream)
    benchmark.pedantic(seqpacker_stream, args=(as_list, strategy), rounds=3, iterations=1)


# -- the table ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=N, help="stream length (default 10^6)")
    parser.add_argument("--rounds", type=int, default=3, help="best of this many (default 3)")
    parser.add_argument("--cpu-time", action="store_true", help="process CPU time, not wall")
    arguments = parser.parse_args()
    if _native.build_profile() != "release":
        parser.error("seqbalance is a debug build; build the release profile before timing it")
    clock = time.process_time if arguments.cpu_time else time.perf_counter
    lengths = shuffled_stream(arguments.n)
    as_list = lengths.tolist()
    rounds = arguments.rounds

    def timed(function: Callable[[], list[list[int]]]) -> tuple[int, float]:
        count = check(function(), lengths)
        return count, best_of(function, rounds, clock) / lengths.size

    floor = best_of(lambda: np.sort(lengths), rounds, clock) / lengths.size
    bound = math.ceil(int(lengths.sum()) / CAP)
    rows: list[tuple[str, int, float | None]] = []
    bfd_count, bfd_time = timed(lambda: pack_sequences(lengths, CAP, algorithm="bfd"))
    rows.append(('offline pack_sequences(..., "bfd")', bfd_count, bfd_time))
    for max_open in (1, 4, 16, 64, 256):
        name = f"StreamPacker(max_open={max_open}).add_many"
        rows.append((name, *timed(lambda m=max_open: stream_add_many(lengths, max_open=m))))
    rows.append(
        (
            "StreamPacker(max_sequences=16).add_many",
            *timed(lambda: stream_add_many(lengths, max_sequences=16)),
        )
    )
    # A padded pack's sum is at most its footprint, so `check` holds for it too.
    rows.append(
        (
            'StreamPacker(footprint="padded").add_many',
            *timed(lambda: stream_add_many(lengths, footprint="padded")),
        )
    )
    rows.append(("StreamPacker().add, one call per item", *timed(lambda: stream_add_loop(as_list))))
    peers: dict[str, int] = {}
    if seqpacker is not None:
        for strategy, label in (("nf", "NextFit"), ("hk", "Harmonic-K")):
            count, per_item = timed(lambda s=strategy: seqpacker_stream(as_list, s))
            peers[label] = count
            rows.append((f"seqpacker StreamPacker {label}, .add per item", count, per_item))
    print(
        f"n = {lengths.size:,}, cap = {CAP:,}, shuffled min(int(lognormal(7, 1)) + 16, 32768); "
        f"lower bound ceil(sum / cap) = {bound:,}; {'CPU' if arguments.cpu_time else 'wall'} time, "
        f"best of {rounds}; numpy.sort {floor * 1e9:.1f} ns per item"
    )
    peer_names = list(peers)
    header = f"{'':52} {'packs':>9} {'/ BFD':>7}" + "".join(f" {'/ ' + p:>13}" for p in peer_names)
    print(header + f" {'ns/item':>9} {'/ sort':>8}")
    for name, count, per_item in rows:
        line = f"{name:52} {count:>9,} {count / bfd_count:>7.4f}"
        line += "".join(f" {count / peers[p]:>13.4f}" for p in peer_names)
        if per_item is not None:
            line += f" {per_item * 1e9:>9.1f} {per_item / floor:>8.1f}"
        print(line)
    if seqpacker is None:
        print("seqpacker is not installed: its rows are skipped (pip install seqpacker)")
    else:
        loop = next(t for name, _, t in rows if name.startswith("StreamPacker().add,"))
        for name, _, per_item in rows:
            if name.startswith("seqpacker") and per_item:
                print(f"StreamPacker().add per item / {name}: {loop / per_item:.2f}")


if __name__ == "__main__":
    main()
