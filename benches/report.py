"""Benchmark report: native against the pure-Python reference, and how the native cost scales.

    python benches/report.py                 # full report (a few minutes), writes bench-report.json
    python benches/report.py --quick         # smaller grid, for a first look
    python benches/report.py --json out.json
    python benches/report.py --cpu-time      # process CPU time: steadier on a shared, loaded machine

Times are the best of several runs (``time.perf_counter``) of one call on the same input, native
and reference in the same process; every native answer is checked against the reference before
it is timed. Absolute times on shared machines are noisy; ratios in one run are what to compare.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import seqbalance  # noqa: E402
from seqbalance import _native, reference  # noqa: E402
from workloads import lengths, reference_is_affordable  # noqa: E402

# What best_time reads. Wall time by default; --cpu-time switches to the process's CPU time,
# because on a machine shared with other jobs a call of seconds (the reference) is always
# preempted while one of microseconds (native) often is not, which inflates the ratios.
CLOCK = time.perf_counter


def best_time(function, *args, repeat=5, budget=2.0, clock=None, **kwargs):
    """Best time of ``repeat`` calls (on ``clock``, default CLOCK), fewer when one is slow."""
    clock = clock or CLOCK
    times = []
    started = time.perf_counter()
    for _ in range(repeat):
        t0 = clock()
        function(*args, **kwargs)
        times.append(clock() - t0)
        if time.perf_counter() - started > budget:
            break
    return min(times)


def machine():
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "seqbalance": seqbalance.__version__,
        "build": _native.build_profile(),
    }


def speedup_grid(ns, ks, progress):
    rows = []
    for n in ns:
        for k in ks:
            for equal_size in (False, True):
                if k > n:
                    continue
                values = lengths(n).tolist()
                native_s = best_time(seqbalance.karmarkar_karp, values, k, equal_size, repeat=20)
                row = {
                    "n": n,
                    "k": k,
                    "equal_size": equal_size,
                    "native_s": native_s,
                    "reference_s": None,
                    "speedup": None,
                }
                if reference_is_affordable(n, k, equal_size):
                    expected = reference.karmarkar_karp(values, k, equal_size)
                    if seqbalance.karmarkar_karp(values, k, equal_size) != expected:
                        raise SystemExit(f"native differs from reference at n={n} k={k}")
                    row["reference_s"] = best_time(
                        reference.karmarkar_karp, values, k, equal_size, repeat=3, budget=5.0
                    )
                    row["speedup"] = row["reference_s"] / native_s
                rows.append(row)
                progress(row)
    return rows


def geometric_mean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def large_case(n, k):
    values = lengths(n, seed=1)
    out = {"n": n, "k": k}
    out["numpy_sort_s"] = best_time(np.sort, values)
    out["sort_tolist_s"] = best_time(lambda: np.sort(values).tolist())
    # Not a target's floor, but the honest comparison for ids: the core must beat an argsort.
    out["argsort_stable_s"] = best_time(np.argsort, values, kind="stable")
    for equal_size in (True, False):
        mode = "equal" if equal_size else "free"
        out[f"lists_{mode}_s"] = best_time(seqbalance.karmarkar_karp, values, k, equal_size)
        out[f"ids_{mode}_s"] = best_time(seqbalance.partition_ids, values, k, equal_size=equal_size)
        out[f"lists_{mode}_vs_sort_tolist"] = out[f"lists_{mode}_s"] / out["sort_tolist_s"]
        out[f"ids_{mode}_vs_sort"] = out[f"ids_{mode}_s"] / out["numpy_sort_s"]
        out[f"ids_{mode}_vs_argsort"] = out[f"ids_{mode}_s"] / out["argsort_stable_s"]
    return out


def two_threads(n=2**18, k=256):
    """Two inputs partitioned one after the other, then from two threads at once.

    With list output part of each call (building a quarter of a million int objects and their
    lists) needs the GIL and cannot overlap; `partition_ids` shows the core alone.
    """
    a, b = lengths(n, seed=2), lengths(n, seed=3)
    calls = {
        "lists": lambda x: seqbalance.karmarkar_karp(x, k, False),
        "ids": lambda x: seqbalance.partition_ids(x, k, equal_size=False),
    }
    result = {"n": n, "k": k}
    for name, call in calls.items():
        # Wall time whatever the clock: CPU time would add up both threads.
        serial = best_time(lambda call=call: (call(a), call(b)), repeat=9, clock=time.perf_counter)

        def together(call=call):
            threads = [threading.Thread(target=call, args=(x,)) for x in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        concurrent = best_time(together, repeat=9, clock=time.perf_counter)
        result[name] = {"serial_s": serial, "threads_s": concurrent, "ratio": concurrent / serial}
    return result


def scaling(k=1024, exponents=range(14, 21)):
    rows = []
    for e in exponents:
        n = 2**e
        uniform = lengths(n, seed=4)
        adversarial = np.ones(n, dtype=np.int64)
        adversarial[0] = 2**40
        for name, values in (("uniform", uniform), ("one-huge", adversarial)):
            # The floors of the same input in the same run: the ratios, unlike the times, carry
            # over to other machines.
            sort_s = best_time(np.sort, values)
            sort_tolist_s = best_time(lambda values=values: np.sort(values).tolist())
            for equal_size in (False, True):
                t = best_time(seqbalance.karmarkar_karp, values, k, equal_size)
                ids = best_time(seqbalance.partition_ids, values, k, equal_size=equal_size)
                rows.append(
                    {
                        "input": name,
                        "n": n,
                        "k": k,
                        "equal_size": equal_size,
                        "seconds": t,
                        "ns_per_item": t / n * 1e9,
                        "ids_seconds": ids,
                        "ids_ns_per_item": ids / n * 1e9,
                        "numpy_sort_s": sort_s,
                        "sort_tolist_s": sort_tolist_s,
                        "lists_vs_sort_tolist": t / sort_tolist_s,
                        "ids_vs_sort": ids / sort_s,
                    }
                )
    return rows


# VmHWM (peak resident memory of this address space) starts afresh at exec, unlike ru_maxrss,
# which Linux carries over from the parent that forked the measuring process.
_PEAK_SCRIPT = """
import numpy as np
import seqbalance

def peak_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

values = np.random.default_rng(1).integers(1, 32768, size=2**20, dtype=np.int64)
seqbalance.karmarkar_karp(values[:4096], 8, False)  # imports and first-call costs
before = peak_kb()
result = seqbalance.{call}
after = peak_kb()
print((after - before) / 1024)
"""


def peak_memory_mb(function, equal_size):
    """Extra peak resident memory (MB) of one call at n = 2^20, k = 1024, in a fresh process.

    It includes the result itself (for lists: a million int objects and their lists).
    """
    if function == "partition_ids":
        call = f"partition_ids(values, 1024, equal_size={equal_size})"
    else:
        call = f"{function}(values, 1024, {equal_size})"
    code = _PEAK_SCRIPT.replace("{call}", call)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def fmt_time(seconds):
    if seconds is None:
        return "skipped (>10 s)"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def print_large_case():
    """The 2^20 case: the native core against numpy's sort, sort + tolist and a stable argsort."""
    big = large_case(2**20, 1024)
    print(
        f"\nn=2^20 uniform 1..32767 int64, k=1024: numpy.sort {fmt_time(big['numpy_sort_s'])}, "
        f"sort+tolist {fmt_time(big['sort_tolist_s'])}, argsort(stable) "
        f"{fmt_time(big['argsort_stable_s'])} ({big['argsort_stable_s'] / big['numpy_sort_s']:.2f}× sort)"
    )
    for mode in ("equal", "free"):
        print(
            f"  {mode:5}: lists {fmt_time(big[f'lists_{mode}_s'])} "
            f"({big[f'lists_{mode}_vs_sort_tolist']:.2f}× sort+tolist), ids "
            f"{fmt_time(big[f'ids_{mode}_s'])} ({big[f'ids_{mode}_vs_sort']:.2f}× sort, "
            f"{big[f'ids_{mode}_vs_argsort']:.2f}× argsort)"
        )
    big["peak_mb"] = {
        f"{function} {'equal' if equal_size else 'free'}": peak_memory_mb(function, equal_size)
        for function in ("karmarkar_karp", "partition_ids")
        for equal_size in (True, False)
    }
    print(
        "  extra peak memory of one call (fresh process, result included): "
        + ", ".join(f"{name} {mb:.0f} MB" for name, mb in big["peak_mb"].items())
    )
    return big


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grid, no 2^20 case")
    parser.add_argument(
        "--large-only", action="store_true", help="only the 2^20 case against the sort floors"
    )
    parser.add_argument("--json", default="bench-report.json", help="where to write the figures")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with the process's CPU time (steadier on a shared machine; not the two-thread case)",
    )
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.cpu_time else time.perf_counter

    report = {"machine": machine(), "clock": "process CPU time" if args.cpu_time else "wall time"}
    print(f"machine: {report['machine']}, clock: {report['clock']}")
    if report["machine"]["build"] != "release":
        print("warning: this is a debug build; figures are meaningless", file=sys.stderr)

    if args.large_only:
        report["large"] = print_large_case()
        Path(args.json).write_text(json.dumps(report, indent=2))
        return 0
    ns = (64, 1024, 8192) if args.quick else (64, 256, 1024, 4096, 8192, 32768)
    ks = (8, 64) if args.quick else (8, 64, 256)
    print("\n| n | k | equal_size | native | reference | speed-up |\n|---|---|---|---|---|---|")

    def progress(row):
        speedup = f"{row['speedup']:.0f}×" if row["speedup"] else "—"
        print(
            f"| {row['n']} | {row['k']} | {row['equal_size']} | {fmt_time(row['native_s'])} | "
            f"{fmt_time(row['reference_s'])} | {speedup} |",
            flush=True,
        )

    report["grid"] = speedup_grid(ns, ks, progress)
    target = [
        r["speedup"]
        for r in report["grid"]
        if r["n"] in (64, 1024, 8192) and r["k"] in (8, 64) and r["speedup"]
    ]
    report["target_grid_geomean"] = geometric_mean(target)
    report["target_grid_min"] = min(target)
    print(
        f"\nn∈{{64,1024,8192}} × k∈{{8,64}} × both modes: geometric-mean speed-up "
        f"{report['target_grid_geomean']:.0f}×, lowest {report['target_grid_min']:.0f}×"
    )

    if not args.quick:
        report["large"] = print_large_case()
        threads = two_threads()
        report["two_threads"] = threads
        for name in ("lists", "ids"):
            row = threads[name]
            print(
                f"\ntwo threads, n=2^18 each, k=256, free, {name}: serial "
                f"{fmt_time(row['serial_s'])}, together {fmt_time(row['threads_s'])} "
                f"(ratio {row['ratio']:.2f})"
            )
        report["scaling"] = scaling()
        print(
            "\n| input | n | equal_size | lists | ns/item | × sort+tolist | ids | ns/item | × sort |\n"
            "|---|---|---|---|---|---|---|---|---|"
        )
        for row in report["scaling"]:
            print(
                f"| {row['input']} | 2^{int(math.log2(row['n']))} | {row['equal_size']} | "
                f"{fmt_time(row['seconds'])} | {row['ns_per_item']:.0f} | "
                f"{row['lists_vs_sort_tolist']:.2f} | "
                f"{fmt_time(row['ids_seconds'])} | {row['ids_ns_per_item']:.0f} | "
                f"{row['ids_vs_sort']:.2f} |"
            )

    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
