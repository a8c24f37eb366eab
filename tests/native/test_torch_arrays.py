"""Real torch tensors at the array boundary: the red-team repros of issue 23, where torch is installed.

The stand-in producers of ``test_array_boundary.py`` cover the same logic without torch (CI);
these run the tensors themselves: expanded bfloat16 tensors of ``2**29`` to ``2**62`` elements
(child processes: a regression aborts or ignores Ctrl-C), torch's lazy negative bit, tensors that
require grad (alone, in a list, and through verl's function after ``install()``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests import helpers

torch = pytest.importorskip("torch")

import seqbalance  # noqa: E402
from seqbalance import reference  # noqa: E402

pytestmark = pytest.mark.integration

MAX_ITEMS = 2**32 - 2

CHILD = textwrap.dedent(
    """
    import resource, signal, sys, time
    import torch
    import seqbalance
    from seqbalance import reference, _arrays
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def report(call):
        try:
            call()
        except (ValueError, TypeError, MemoryError) as error:
            print(type(error).__name__, "|", error, flush=True)
        else:
            print("returned", flush=True)
    """
)


def run_child(body: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS")
def test_expanded_bfloat16_beyond_the_item_limit_is_a_value_error_under_a_memory_limit():
    """``expand(2**40)`` under ``ulimit -v 16000000`` aborted; ``expand(2**62)`` panicked."""
    child = run_child(
        """
        limit = 16_000_000 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
        for length in (2**40, 2**62):
            t = torch.ones(1, dtype=torch.bfloat16).expand(length)
            report(lambda: seqbalance.partition_ids(t, 2))
            report(lambda: seqbalance.refine_partitions(t, [[0]]))
            report(lambda: seqbalance.group_balanced_partitions([1, 2], [0, 1], 2, cost=lambda x: t))
            report(lambda: reference.karmarkar_karp(t, 2, False))
        for dtype in (torch.int64, torch.float32, torch.float16):
            report(lambda: seqbalance.partition_ids(torch.ones(1, dtype=dtype).expand(2**40), 2))
        print(seqbalance.partition_ids(torch.ones(4, dtype=torch.bfloat16), 2).tolist())
        """
    )
    assert child.returncode == 0, child.stderr[-2000:]
    lines = child.stdout.splitlines()
    assert len(lines) == 12, child.stdout
    for line, length in zip(lines[:11], [2**40] * 4 + [2**62] * 4 + [2**40] * 3, strict=True):
        assert line.startswith("ValueError | "), line
        assert f"has {length} elements, more than the {MAX_ITEMS} items" in line
    assert sorted(eval(lines[-1])) == [0, 0, 1, 1]
    assert "PanicException" not in child.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals")
def test_ctrl_c_during_an_expanded_bfloat16_read_is_prompt():
    """``expand(2**29)``: SIGINT took 5.4 s before the reader polled for signals."""
    latency, _, rest = helpers.interrupt_child(
        CHILD
        + textwrap.dedent(
            """
                t = torch.ones(1, dtype=torch.bfloat16).expand(2**29)
                print("started", flush=True)
                try:
                    for _ in range(20):
                        _arrays.host_array(t, "seqlen_list")
                    print("finished", flush=True)
                except KeyboardInterrupt:
                    print("interrupted", time.monotonic(), flush=True)
                print(seqbalance.partition_ids([5, 4, 3, 2], 2, equal_size=True).tolist())
                """
        ),
        delay=0.5,
        timeout=120,
    )
    (second,) = rest
    helpers.assert_prompt(latency, 2.0)
    assert second == "[1, 0, 0, 1]"


def test_within_the_limit_an_expanded_bfloat16_tensor_reads_as_its_values():
    t = torch.full((1,), 3.0, dtype=torch.bfloat16).expand(1000)
    assert seqbalance.partition_ids(t, 4).tolist() == (
        seqbalance.partition_ids(np.full(1000, 3.0, np.float32), 4).tolist()
    )


def test_the_negative_bit_is_resolved():
    """``tensor([1+1j, ...]).conj().imag`` holds -1, -2, ...: refused as negative, not answered."""
    w = torch.tensor([1 + 1j, 1 + 2j, 1 + 3j, 1 + 4j]).conj().imag
    assert w.is_neg()
    with pytest.raises(ValueError, match=r"seqlen_list\[0\] must be finite and >= 0, got -1.0"):
        seqbalance.get_seqlen_balanced_partitions(w, 2, True)
    with pytest.raises(ValueError, match=r"must be finite and >= 0"):
        reference.get_seqlen_balanced_partitions(w, 2, True)
    # Memory holding -values, meaning +values: the values' answer.
    held = [1.0, 2.0, 5.0, 3.0, 0.5, 8.0]
    v = torch.tensor([complex(0.0, -x) for x in held]).conj().imag
    assert v.is_neg() and v.tolist() == held
    expected = seqbalance.get_seqlen_balanced_partitions(np.array(held, np.float32), 2, True)
    assert seqbalance.get_seqlen_balanced_partitions(v, 2, True) == expected
    assert seqbalance.get_seqlen_balanced_partitions([x for x in v], 2, True) == expected


def test_tensors_requiring_grad_read_as_their_values():
    values = [3.5, 1.0, 2.25, 7.0, 0.5, 4.0]
    expected = seqbalance.karmarkar_karp(np.array(values, np.float32), 2, False)
    whole = torch.tensor(values, requires_grad=True)
    assert seqbalance.karmarkar_karp(whole, 2, False) == expected
    items = [torch.tensor(v, requires_grad=True) for v in values]
    assert seqbalance.karmarkar_karp(items, 2, False) == expected
    assert reference.karmarkar_karp(items, 2, False) == expected
    assert seqbalance.partition_ids(items, 2).tolist() == (
        seqbalance.partition_ids(np.array(values, np.float32), 2).tolist()
    )


def test_verl_after_install_answers_lists_of_tensors_requiring_grad(tmp_path, monkeypatch):
    """verl's own function took them; after install() the call must not fail where it did not."""
    from tests.integrations._trainer_standins import StandIn, purge

    purge("verl")
    monkeypatch.syspath_prepend(str(tmp_path))
    standin = StandIn(tmp_path, "verl")
    try:
        items = [torch.tensor(v, requires_grad=True) for v in (3.5, 1.0, 2.25, 7.0, 0.5, 4.0)]
        before = standin.module.get_seqlen_balanced_partitions(items, 2, True)
        standin.integration.install()
        after = standin.module.get_seqlen_balanced_partitions(items, 2, True)
        assert sorted(i for part in after for i in part) == list(range(6))
        assert after == before
    finally:
        standin.integration.uninstall()
        purge("verl")
