"""seqbalance against the other native libraries: seqpacker 0.1.3 (packing) and seq-len-balance
0.1.2 (Karmarkar-Karp partitioning), as ratios of times taken in one run.

    python benches/bench_peers.py                      # 10^6 and 10^7 packing, 10^6 partitioning
    python benches/bench_peers.py --sizes 1e6 --repeat 7
    pytest benches/bench_peers.py --benchmark-enable -s   # the same rows, printed, and timed

Both peers are optional (``pip install seqpacker seq-len-balance``, or the ``bench`` extra); the
rows of a missing one are skipped. Every time is the process's CPU time (steadier than wall time
on a shared machine), best of ``--repeat`` calls, the two libraries taking turns call by call;
a ratio is seqbalance's time over the peer's, so below 1 means seqbalance is faster. Both sides
return lists of index lists (``PackResult.bins`` for seqpacker) unless the row says arrays, and
every answer is checked (each index once, no pack over the cap, no empty pack) before it is timed.

Lengths are the issue-22 workload: ``min(int(lognormal(7, 1)) + 16, 32768)``, cap 32,768.
With benchmarks disabled (the test suite's default), the pytest cases run once on 10^5 items.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import seqbalance
from seqbalance import pack_ids, pack_sequences

CAP = 32_768
#: The partition rows' k. seq-len-balance's free mode at k = 1024 and 10^6 items needs more
#: memory than a shared 24 GB machine had left (it was killed), so the rows use 64.
K_PARTITIONS = 64
#: Seconds of CPU one side may spend on a row's timed calls before the repeats stop early.
BUDGET = 30.0


def have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def workload(n: int, seed: int = 0) -> np.ndarray:
    """``n`` lengths ``min(int(lognormal(7, 1)) + 16, 32768)`` as int64."""
    raw = np.random.default_rng(seed).lognormal(7.0, 1.0, n)
    return np.minimum(raw.astype(np.int64) + 16, CAP)


def check_packs(packs: list[list[int]], lengths: np.ndarray, cap: int) -> int:
    """The number of packs, after checking each index is in one pack, none empty or over the cap."""
    sizes = np.fromiter(map(len, packs), dtype=np.int64, count=len(packs))
    assert sizes.size == 0 or sizes.min() > 0, "an empty pack"
    flat = np.fromiter((i for pack in packs for i in pack), dtype=np.int64, count=int(sizes.sum()))
    assert np.array_equal(np.sort(flat), np.arange(lengths.size)), "not each index once"
    if sizes.size:
        loads = np.add.reduceat(lengths[flat], np.concatenate(([0], np.cumsum(sizes)[:-1])))
        assert loads.max() <= cap, "a pack over the cap"
    return len(packs)


def check_parts(parts: list[list[int]], lengths: list[int], k: int, equal_size: bool) -> int:
    """The spread (heaviest minus lightest part) after checking the parts cover each index once."""
    assert len(parts) == k
    flat = sorted(i for part in parts for i in part)
    assert flat == list(range(len(lengths)))
    if equal_size:
        assert {len(part) for part in parts} == {len(lengths) // k}
    loads = [sum(lengths[i] for i in part) for part in parts]
    return max(loads) - min(loads)


def taking_turns(ours: Callable[[], object], peer: Callable[[], object], repeat: int):
    """Best process-CPU seconds of ``ours`` and of ``peer``, called alternately ``repeat`` times."""
    best = [float("inf"), float("inf")]
    spent = [0.0, 0.0]
    for _ in range(repeat):
        for side, function in enumerate((ours, peer)):
            if spent[side] > BUDGET and best[side] < float("inf"):
                continue
            start = time.process_time()
            answer = function()
            elapsed = time.process_time() - start
            del answer
            best[side] = min(best[side], elapsed)
            spent[side] += elapsed
    return best[0], best[1]


@dataclass
class Row:
    what: str
    n: int
    ours: float
    peer: float
    #: Packs (packing rows) or the heaviest-minus-lightest spread (partition rows), ours and peer's.
    ours_quality: int
    peer_quality: int

    @property
    def ratio(self) -> float:
        return self.ours / self.peer

    def line(self) -> str:
        return (
            f"{self.what:<48} {self.n:>10,} {self.ours * 1e3:>9.0f} {self.peer * 1e3:>9.0f}"
            f" {self.ratio:>6.2f}x {self.ours_quality:>9,} {self.peer_quality:>9,}"
        )


HEADER = (
    f"{'row (seqbalance vs peer)':<48} {'n':>10} {'ours ms':>9} {'peer ms':>9} {'ratio':>7}"
    f" {'ours q':>9} {'peer q':>9}"
)
#: Our algorithm name, seqpacker's strategy, and the row's label.
PACKING_PAIRS = [
    ("ffd", "ffd", "pack ffd vs seqpacker ffd (lists)"),
    ("bfd", "obfd", "pack bfd vs seqpacker obfd (lists)"),
]


def packing_row(n: int, algorithm: str, repeat: int) -> Row:
    """``pack_sequences(..., algorithm)`` against seqpacker's matching strategy, lists on both sides."""
    import seqpacker

    ours_name, peer_name, label = next(p for p in PACKING_PAIRS if p[0] == algorithm)
    lengths = workload(n)

    def ours() -> list[list[int]]:
        return pack_sequences(lengths, CAP, algorithm=ours_name)

    def peer() -> list[list[int]]:
        return seqpacker.pack_sequences(lengths, CAP, peer_name).bins

    ours_packs = check_packs(ours(), lengths, CAP)
    peer_packs = check_packs(peer(), lengths, CAP)
    ours_time, peer_time = taking_turns(ours, peer, repeat)
    return Row(label, n, ours_time, peer_time, ours_packs, peer_packs)


def packing_ids_row(n: int, repeat: int) -> Row:
    """Array answers: ``pack_ids`` (bfd) against seqpacker's ``pack_flat`` (obfd)."""
    import seqpacker

    lengths = workload(n)

    def ours() -> np.ndarray:
        return pack_ids(lengths, CAP)

    def peer() -> tuple[np.ndarray, np.ndarray]:
        return seqpacker.Packer(CAP, "obfd").pack_flat(lengths)

    ids = ours()
    assert np.array_equal(np.flatnonzero(ids == 0), sorted(pack_sequences(lengths, CAP)[0])), (
        "ids disagree with the lists"
    )
    assert np.bincount(ids, weights=lengths).max() <= CAP
    items, offsets = peer()
    assert np.array_equal(np.sort(items), np.arange(n))
    ours_time, peer_time = taking_turns(ours, peer, repeat)
    return Row(
        "pack_ids bfd vs seqpacker pack_flat (arrays)",
        n,
        ours_time,
        peer_time,
        int(ids.max()) + 1 if n else 0,
        offsets.size + 1,
    )


def partition_lengths(n: int) -> list[int]:
    """The workload as a list, cut to a multiple of k (equal sizes need one; 10^6 already is)."""
    return workload(n - n % K_PARTITIONS).tolist()


def partition_row(n: int, equal_size: bool, repeat: int) -> Row:
    """``get_seqlen_balanced_partitions`` against seq-len-balance's, a Python list in, lists out."""
    import seq_len_balance

    lengths = partition_lengths(n)
    n = len(lengths)

    def ours() -> list[list[int]]:
        return seqbalance.get_seqlen_balanced_partitions(lengths, K_PARTITIONS, equal_size)

    def peer() -> list[list[int]]:
        return seq_len_balance.get_seqlen_balanced_partitions(lengths, K_PARTITIONS, equal_size)

    ours_spread = check_parts(ours(), lengths, K_PARTITIONS, equal_size)
    peer_spread = check_parts(peer(), lengths, K_PARTITIONS, equal_size)
    ours_time, peer_time = taking_turns(ours, peer, repeat)
    mode = "equal" if equal_size else "free"
    label = f"partition k={K_PARTITIONS} {mode} vs seq-len-balance"
    return Row(label, n, ours_time, peer_time, ours_spread, peer_spread)


def all_rows(packing_sizes: list[int], partition_size: int, repeat: int):
    """Every row whose peer is installed, in the printed order (a generator, so rows print as they come)."""
    if have("seqpacker"):
        for n in packing_sizes:
            for algorithm, _, _ in PACKING_PAIRS:
                yield packing_row(n, algorithm, repeat)
            yield packing_ids_row(n, repeat)
    else:
        print("seqpacker is not installed: packing rows skipped", file=sys.stderr)
    if have("seq_len_balance"):
        for equal_size in (False, True):
            yield partition_row(partition_size, equal_size, repeat)
    else:
        print("seq-len-balance is not installed: partition rows skipped", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1e6,1e7", help="packing sizes, comma-separated")
    parser.add_argument("--partition-size", default="1e6", help="partition rows' item count")
    parser.add_argument("--repeat", type=int, default=5, help="calls per side (best is kept)")
    args = parser.parse_args(argv)
    sizes = [int(float(size)) for size in args.sizes.split(",") if size]
    partition_size = int(float(args.partition_size))
    seqbalance_build = seqbalance._native.build_profile()
    if seqbalance_build != "release":
        print(
            f"warning: seqbalance is a {seqbalance_build} build; times mean little", file=sys.stderr
        )
    print(f"process CPU, best of {args.repeat}; q = packs (packing) or spread (partition)")
    print(HEADER)
    for row in all_rows(sizes, partition_size, args.repeat):
        print(row.line(), flush=True)
    return 0


# ------------------------------------------------------------------------------- under pytest


@pytest.fixture(scope="module")
def size(request) -> int:
    """10^6 when benchmarking, 10^5 when the suite only checks the answers."""
    return 10**5 if request.config.getoption("benchmark_disable", default=True) else 10**6


@pytest.mark.parametrize("algorithm", ["ffd", "bfd"])
def test_packing_against_seqpacker(benchmark, size, algorithm):
    pytest.importorskip("seqpacker")
    row = packing_row(size, algorithm, repeat=3)
    print("\n" + row.line())
    # Same or fewer packs than the peer on this workload (deterministic: a fixed seed).
    assert row.ours_quality <= row.peer_quality
    lengths = workload(size)
    benchmark.group = f"peers: pack {algorithm}, n={size}"
    benchmark.pedantic(
        pack_sequences, args=(lengths, CAP), kwargs={"algorithm": algorithm}, rounds=3
    )


def test_packing_ids_against_seqpacker_flat(benchmark, size):
    pytest.importorskip("seqpacker")
    row = packing_ids_row(size, repeat=3)
    print("\n" + row.line())
    lengths = workload(size)
    benchmark.group = f"peers: pack ids, n={size}"
    benchmark.pedantic(pack_ids, args=(lengths, CAP), rounds=3)


@pytest.mark.parametrize("equal_size", [False, True], ids=["free", "equal"])
def test_partition_against_seq_len_balance(benchmark, size, equal_size):
    pytest.importorskip("seq_len_balance")
    row = partition_row(size, equal_size, repeat=1 if size > 10**5 else 3)
    print("\n" + row.line())
    lengths = partition_lengths(size)
    benchmark.group = f"peers: partition k={K_PARTITIONS}, n={size}"
    benchmark.pedantic(
        seqbalance.get_seqlen_balanced_partitions,
        args=(lengths, K_PARTITIONS, equal_size),
        rounds=3,
    )


if __name__ == "__main__":
    sys.exit(main())
