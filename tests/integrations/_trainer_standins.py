"""Stand-in trainer packages (verl, OpenRLHF) written to disk for the integration tests.

A stand-in holds the partitioner module with upstream's function names and signatures and
upstream's behaviour written out in plain Python, a helper that calls the partitioner through the
module (like verl's ``rearrange_micro_batches``), trainer modules that import it by name (like
``verl/trainer/ppo/ray_trainer.py``), a module imported only later, and a module outside the
package. Not a test module: ``test_integrations.py`` and ``test_integrations_ray.py`` import it.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path
from typing import Any

from seqbalance.integrations import openrlhf as sb_openrlhf
from seqbalance.integrations import verl as sb_verl

PARTITIONERS = ("karmarkar_karp", "greedy_partition", "get_seqlen_balanced_partitions")

# The partitioner module: upstream's names and parameters, and upstream's behaviour written out in
# plain Python (largest differencing as in partition-spec.md, with upstream's arithmetic: sums
# advanced item by item from the int 0, so floats and NumPy scalars round as they do upstream; no
# input checks, so more parts than items gives empty parts).
SEQLEN_MODULE = '''
"""Stand-in for {package}.utils.seqlen_balancing (upstream's function names and signatures)."""
import heapq

import numpy


def _set_key(s):
    return (s[0], len(s[1]), s[1])


class _State:
    def __init__(self, sets):
        self.sets = sorted(sets, key=_set_key, reverse=True)

    def spread(self):
        return self.sets[0][0] - self.sets[-1][0]

    def __lt__(self, other):
        if self.spread() != other.spread():
            return self.spread() > other.spread()
        return _set_key(self.sets[0]) > _set_key(other.sets[0])


def karmarkar_karp(seqlen_list, k_partitions, equal_size):
    pairs = sorted((value, index) for index, value in enumerate(seqlen_list))
    if equal_size:
        assert len(pairs) % k_partitions == 0
        chunks = [pairs[i : i + k_partitions] for i in range(0, len(pairs), k_partitions)]
    else:
        chunks = [[pair] for pair in pairs]
    queue = []
    for chunk in chunks:
        sets = [[0, []] for _ in range(k_partitions)]
        for position, (value, index) in enumerate(chunk):
            sets[position][0] += value
            sets[position][1].append((index, value))
        heapq.heappush(queue, _State(sets))
    while len(queue) > 1:
        first, second = heapq.heappop(queue), heapq.heappop(queue)
        for i in range(k_partitions):
            for index, value in second.sets[k_partitions - 1 - i][1]:
                first.sets[i][0] += value
                first.sets[i][1].append((index, value))
        first.sets = sorted(first.sets, key=_set_key, reverse=True)
        heapq.heappush(queue, first)
    return [[index for index, _ in s[1]] for s in queue[0].sets]


def greedy_partition(seqlen_list, k_partitions, equal_size):
    bias = sum(seqlen_list) + 1 if equal_size else 0
    parts = [[] for _ in range(k_partitions)]
    sums = [0] * k_partitions
    for index, value in enumerate(seqlen_list):
        target = 0
        for j in range(1, k_partitions):
            if sums[j] < sums[target]:
                target = j
        parts[target].append(index)
        sums[target] += value + bias
    if equal_size:
        assert all(len(p) * k_partitions == len(seqlen_list) for p in parts)
    return parts


def get_seqlen_balanced_partitions(seqlen_list, k_partitions, equal_size):
    assert len(seqlen_list) >= k_partitions
    # Upstream calls karmarkar_karp through the module, by keyword, then sorts each part.
    parts = karmarkar_karp(seqlen_list=seqlen_list, k_partitions=k_partitions, equal_size=equal_size)
    assert all(parts)
    return [sorted(part) for part in parts]


def calculate_workload(seqlen_list):
    # verl's (a tensor there; NumPy here, the same int64 arithmetic).
    seqlen_list = numpy.asarray(seqlen_list)
    return 24576 * seqlen_list + seqlen_list**2


def rearrange_micro_batches(seqlens, num_micro_batches):
    # Like verl's: workloads of the int64 lengths, as a list, balanced through the module global.
    workloads = calculate_workload(numpy.asarray(seqlens, dtype=numpy.int64)).tolist()
    return get_seqlen_balanced_partitions(workloads, num_micro_batches, equal_size=False)
'''

# verl's group balancing: consecutive equal uids form a group weighing the sum of its samples'
# workloads; groups balanced with equal_size=True; each part's sample indexes sorted.
GROUP_FUNCTION = """

def get_group_balanced_partitions(seqlen_list, uid_list, k_partitions):
    assert len(seqlen_list) == len(uid_list), "seqlen_list and uid_list must have same length"
    groups = []
    for index, uid in enumerate(uid_list):
        if groups and uid_list[groups[-1][0]] == uid:
            groups[-1].append(index)
        else:
            groups.append([index])
    assert len(groups) >= k_partitions
    weights = [sum(int(calculate_workload(seqlen_list[i])) for i in group) for group in groups]
    parts = get_seqlen_balanced_partitions(
        seqlen_list=weights, k_partitions=k_partitions, equal_size=True
    )
    return [sorted(i for g in part for i in groups[g]) for part in parts]
"""

# A trainer module that imports the partitioner (and verl's workload) by name, as verl's
# ray_trainer.py does.
TRAINER_MODULE = """
from {package}.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions
from {package}.utils import seqlen_balancing as _seqlen_balancing
kk_alias = getattr(_seqlen_balancing, "karmarkar_karp", None)  # another name for a copy
from seqbalance import get_seqlen_balanced_partitions as chosen_on_purpose


def balance_batch(seqlens, world_size):
    return get_seqlen_balanced_partitions(seqlens, k_partitions=world_size, equal_size=True)


def balance_by_workload(seqlens, world_size):
    # verl's _balance_batch: the workload of each sample, balanced with equal counts.
    workloads = calculate_workload(seqlens)
    return get_seqlen_balanced_partitions(workloads, k_partitions=world_size, equal_size=True)
"""

LATE_MODULE = """
from {package}.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions
"""

# A module outside the package that imported the partitioner by name: install() leaves it be.
OUTSIDE_MODULE = """
from {package}.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions
"""

# OpenRLHF's count of a step's micro-batches (first fit under the cap, utils/seqlen_balancing.py)
# and its dynamic batching (trainer/ppo_utils/replay_buffer.py): the count of a step's lengths,
# then their split into that many, both through names imported from the module.
OPENRLHF_COUNT = """

def get_minimum_num_micro_batch_size(total_lengths, max_tokens_per_gpu, ring_attn_size, ds_tensor_parallel_size):
    max_tokens_per_gpu *= ring_attn_size * ds_tensor_parallel_size
    batches = []
    for l in total_lengths:
        for i in range(len(batches)):
            if batches[i] + l <= max_tokens_per_gpu:
                batches[i] += l
                break
        else:
            batches.append(l)
    return len(batches)
"""

OPENRLHF_TRAINER = """
from {package}.utils.seqlen_balancing import get_minimum_num_micro_batch_size


def dynamic_batches(sample_lengths, max_tokens_per_gpu):
    num_mbs = get_minimum_num_micro_batch_size(sample_lengths, max_tokens_per_gpu, 1, 1)
    return get_seqlen_balanced_partitions(sample_lengths, num_mbs, equal_size=False)
"""

INTEGRATIONS = {
    "verl": (sb_verl, "verl.trainer.ppo.ray_trainer"),
    "openrlhf": (sb_openrlhf, "openrlhf.trainer.ppo_utils.experience_maker"),
}


def purge(package: str) -> None:
    """Forget every imported module of the stand-in ``package``."""
    for name in list(sys.modules):
        if name in (package, f"{package}_outside") or name.startswith(package + "."):
            del sys.modules[name]


def fresh_root(root: Path, monkeypatch: Any, package: str) -> None:
    """Forget every imported module of ``package``, put ``root`` first on sys.path, and unset
    ``SEQBALANCE_COST`` and ``SEQBALANCE_STEP``: where a stand-in of ``package`` is written."""
    purge(package)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv("SEQBALANCE_COST", raising=False)
    monkeypatch.delenv("SEQBALANCE_STEP", raising=False)


class StandIn:
    """A stand-in package tree on sys.path, its modules imported, the integration at hand."""

    def __init__(self, root: Path, package: str, replace: dict[str, str | None] | None = None):
        self.package = package
        self.integration, self.trainer_name = INTEGRATIONS[package]
        source = SEQLEN_MODULE + (GROUP_FUNCTION if package == "verl" else OPENRLHF_COUNT)
        trainer = TRAINER_MODULE + (OPENRLHF_TRAINER if package == "openrlhf" else "")
        for name, body in (replace or {}).items():
            source = _replace_function(source, name, body)
        files = {
            f"{package}/__init__.py": "",
            f"{package}/utils/__init__.py": "",
            f"{package}/utils/seqlen_balancing.py": source.format(package=package),
            f"{package}/trainer/__init__.py": "",
            f"{self.trainer_name.replace('.', '/')}.py": trainer.format(package=package),
            f"{package}/trainer/late.py": LATE_MODULE.format(package=package),
            f"{package}_outside.py": OUTSIDE_MODULE.format(package=package),
        }
        for path, text in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        for parent in Path(self.trainer_name.replace(".", "/")).parents:
            init = root / parent / "__init__.py"
            if parent != Path(".") and not init.exists():
                init.write_text("")
        importlib.invalidate_caches()
        self.module = importlib.import_module(f"{package}.utils.seqlen_balancing")
        self.trainer = importlib.import_module(self.trainer_name)
        self.outside = importlib.import_module(f"{package}_outside")
        self.originals = {
            name: getattr(self.module, name)
            for name in (*PARTITIONERS, "get_group_balanced_partitions")
            if hasattr(self.module, name)
        }
        self.workload = self.module.calculate_workload


def _replace_function(source: str, name: str, body: str | None) -> str:
    """The module source with function ``name`` replaced by ``body`` (or removed for None)."""
    start = source.index(f"\ndef {name}(")
    end = source.find("\ndef ", start + 1)
    end = len(source) if end == -1 else end
    return source[:start] + ("\n" + textwrap.dedent(body) if body else "\n") + source[end:]
