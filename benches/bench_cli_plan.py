"""``seqbalance plan`` against the library call it wraps, in one run.

Report (the figure the CLI is held to: the whole command at most 2x the library call)::

    python benches/bench_cli_plan.py                    # 10^7 lengths, --dp 64 --max-token-len 65536
    python benches/bench_cli_plan.py --n 1000000 --rounds 3
    python benches/bench_cli_plan.py --before /other/checkout/python   # + that tree's command

It writes the lengths to a ``.npy`` file, times the command in a child process (wall time: the
interpreter's start-up, the read, the plan and the summary, what the user waits for), then in this
process ``plan_dp_ids`` on the same array (the arrays the command reads)
and ``plan_dp_micro_batches`` (list output), and prints each with its ratio to the ``plan_dp_ids`` call. ``--before DIR`` also
times the same job run from another source tree's ``python/`` folder, as ``seqbalance partition
--dp 64 --max-token-len 65536`` (the route before the ``plan`` verb), so a before/after pair comes
from one run on one machine.

Under pytest (benchmarks disabled, the suite's default) the small case checks that the command's
``--json`` plan is the library's, and times nothing.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from seqbalance import plan_dp_ids, plan_dp_micro_batches

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import best_of, rl_lengths  # noqa: E402

DP = 64
CAP = 65_536


def command(path: Path, verb: str, extra: tuple[str, ...] = ()) -> list[str]:
    """The command line that plans ``path``'s lengths over ``DP`` ranks under ``CAP``."""
    return [
        sys.executable, "-m", "seqbalance", verb, str(path),
        "--dp", str(DP), "--max-token-len", str(CAP), "--cost", "tokens", *extra,
    ]  # fmt: skip


def run_command(path: Path, verb: str, source: str | None) -> tuple[float, float | None]:
    """Wall seconds of the command in a child process (it must succeed), and the planner's share
    its own time line reports (``None`` for a tree whose time line has no share)."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = source
    start = time.perf_counter()
    done = subprocess.run(command(path, verb), capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"the command failed ({done.returncode}): {done.stderr.strip()}")
    share = re.search(r"^time: .*\(([\d.]+) (s|ms) in plan_dp_micro_batches\)$", done.stdout, re.M)
    if share is None:
        return seconds, None
    return seconds, float(share.group(1)) * (1.0 if share.group(2) == "s" else 1e-3)


#: The library call as a script of the user's would make it: in a fresh process, once (the first
#: call of a process is slower than a warm one: its memory is not mapped yet).
FRESH_CALL = """
import sys, time
import numpy as np
from seqbalance import plan_dp_ids, plan_dp_micro_batches
lengths = np.load(sys.argv[1])
start = time.perf_counter()
plan_dp_ids(lengths, int(sys.argv[2]), int(sys.argv[3]), cost="tokens")
print(time.perf_counter() - start)
"""


def fresh_call(path: Path) -> float:
    """Seconds of the one library call in a fresh child process (what the command wraps)."""
    done = subprocess.run(
        [sys.executable, "-c", FRESH_CALL, str(path), str(DP), str(CAP)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout)


def test_the_commands_plan_is_the_librarys(tmp_path):
    lengths = rl_lengths(20_000, seed=5)
    path = tmp_path / "lengths.npy"
    np.save(path, lengths)
    done = subprocess.run(
        command(path, "plan", ("--json",)), capture_output=True, text=True, check=True
    )
    payload = json.loads(done.stdout)
    assert payload["plan"] == plan_dp_micro_batches(lengths, DP, CAP, cost="tokens")
    assert payload["ranks_summary"][0]["tokens"] == int(
        sum(lengths[i] for batch in payload["plan"][0] for i in batch)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="lengths (default 10^7)")
    parser.add_argument("--rounds", type=int, default=1, help="best of this many of each")
    parser.add_argument("--before", help="another tree's python/ folder: time its command too")
    args = parser.parse_args()
    lengths = rl_lengths(args.n, seed=1)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "lengths.npy"
        np.save(path, lengths)
        cli, inside = min(run_command(path, "plan", None) for _ in range(args.rounds))
        fresh = min(fresh_call(path) for _ in range(args.rounds))
        before = None
        if args.before is not None:
            before = min(run_command(path, "partition", args.before)[0] for _ in range(args.rounds))
        ids = best_of(
            lambda: plan_dp_ids(lengths, DP, CAP, cost="tokens"),
            args.rounds,
        )
        lists = best_of(lambda: plan_dp_micro_batches(lengths, DP, CAP, cost="tokens"), args.rounds)
    print(f"{args.n:,} lengths, --dp {DP} --max-token-len {CAP:,}, best of {args.rounds}")
    if before is not None:
        print(
            f"  seqbalance partition, {args.before}: wall   {before:8.2f} s   {before / ids:5.2f}x"
        )
    print(f"  seqbalance plan (this tree), wall    {cli:8.2f} s   {cli / ids:5.2f}x")
    if inside is not None:
        # The same run's planner, as the command timed it: the ratio without other runs' noise.
        print(
            f"    of which plan_dp_micro_batches     {inside:8.2f} s   (wall {cli / inside:.2f}x it)"
        )
    print(f"  plan_dp_ids(...)            {ids:8.2f} s   1.00x   (warm, in this process)")
    print(
        f"    the same, first call of a process  {fresh:8.2f} s   (wall of plan: {cli / fresh:.2f}x it)"
    )
    print(f"  plan_dp_micro_batches (lists)        {lists:8.2f} s   {lists / ids:5.2f}x")


if __name__ == "__main__":
    main()
