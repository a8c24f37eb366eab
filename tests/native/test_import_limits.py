"""``import seqbalance`` under an address-space limit: it imports, or raises a Python exception,
in bounded time, whatever the limit (issue 28: some limits aborted the process with "memory
allocation of 262144 bytes failed", others hung in the native module's import)."""

from __future__ import annotations

from tests import helpers

# Run in a child that has imported NumPy: one forked grandchild per limit (a fresh import each
# time, at little cost), the limit set above the address space already in use.
_SWEEP = """
import os, resource, signal, sys, time
# One thread in NumPy's BLAS: the sweep forks, and a fork copies only the calling thread.
for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[name] = "1"
import numpy

def address_space():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")

base = address_space()
for extra_mb in range({low}, {high}, {step}):
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        limit = base + extra_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            import seqbalance
            parts = seqbalance.get_seqlen_balanced_partitions([3, 1, 2], 2, False)
            word = "ok" if sorted(parts[0] + parts[1]) == [0, 1, 2] else "wrong"
        except BaseException as error:  # the outcome: the exception, or the MemoryError behind it
            word = type(error).__name__
            cause = error
            while cause is not None and word not in ("MemoryError", "ImportError"):
                cause = cause.__cause__ or cause.__context__
                if isinstance(cause, MemoryError):
                    word = "MemoryError"
        os.write(write_end, word.encode())
        os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + 30
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.005)
    word = os.read(read_end, 100).decode() or "hung or died"
    os.close(read_end)
    print(extra_mb, word, flush=True)
"""


def test_import_under_any_address_space_limit_imports_or_raises() -> None:
    child = helpers.run_child(_SWEEP.format(low=0, high=300, step=3), timeout=600)
    assert child.returncode == 0, child.stderr
    outcomes = dict(line.split(" ", 1) for line in child.stdout.splitlines())
    assert len(outcomes) == 100
    # "ok", or a Python exception saying memory ran short: never an abort, a hang, or another
    # error (an ImportError is what a failed mapping of the extension module raises).
    allowed = ("ok", "MemoryError", "ImportError")
    bad = {mb: word for mb, word in outcomes.items() if word not in allowed}
    assert not bad, (bad, child.stderr[-2000:])
    # The sweep reaches limits that leave room enough: the import then works.
    assert "ok" in outcomes.values()
    assert outcomes["297"] == "ok"


def test_too_tight_a_limit_is_a_memory_error_that_says_why() -> None:
    child = helpers.run_child(
        """
        import resource
        import numpy

        with open("/proc/self/status") as status:
            used = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
        resource.setrlimit(resource.RLIMIT_AS, (used + 40 * 2**20, resource.RLIM_INFINITY))
        try:
            import seqbalance
        except MemoryError as error:
            print(error)
        """
    )
    assert child.returncode == 0, child.stderr
    assert "seqbalance needs about 80 MiB of free address space" in child.stdout
    assert "RLIMIT_AS" in child.stdout


#: A child's check of what ``import seqbalance`` does to ``os.environ``: it prints the keys
#: added, removed or changed, as ``KEY=VALUE`` (``KEY`` alone when removed), one a line.
_ENVIRON_DIFF = """
import os, resource, sys
os.environ.pop("MIMALLOC_ARENA_RESERVE", None)
{preset}
_, hard = resource.getrlimit(resource.RLIMIT_AS)
{limit}
before = dict(os.environ)
import seqbalance
after = dict(os.environ)
for key in sorted(set(before) | set(after)):
    if before.get(key) != after.get(key):
        print(key if key not in after else f"{{key}}={{after[key]}}")
print("limit", resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY)
"""


def test_without_an_address_space_limit_the_import_leaves_os_environ_as_it_was() -> None:
    child = helpers.run_child(
        _ENVIRON_DIFF.format(
            preset="",
            limit="resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, hard))",
        )
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["limit False"]


def test_under_an_address_space_limit_the_import_bounds_mimallocs_arena_only() -> None:
    # The one documented import-time effect: under a finite RLIMIT_AS the import sets
    # MIMALLOC_ARENA_RESERVE (and nothing else); a value the user set wins.
    limit = (
        "used = next(int(line.split()[1]) * 1024 for line in open('/proc/self/status') "
        "if line.startswith('VmSize'))\n"
        "resource.setrlimit(resource.RLIMIT_AS, (used + 2**30, hard))"
    )
    child = helpers.run_child(_ENVIRON_DIFF.format(preset="", limit=limit))
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["MIMALLOC_ARENA_RESERVE=32MiB", "limit True"]
    preset = 'os.environ["MIMALLOC_ARENA_RESERVE"] = "64MiB"'
    child = helpers.run_child(_ENVIRON_DIFF.format(preset=preset, limit=limit))
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["limit True"]
