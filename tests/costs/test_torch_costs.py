"""Real torch tensors as the planners' costs, where torch is installed (the integration job):
verl's SFT path hands ``plan_micro_batches`` a float32 workload tensor, which 0.1 refused."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import seqbalance as sb  # noqa: E402

pytestmark = pytest.mark.integration

LENGTHS = [300, 200, 100, 400, 250, 50, 700, 20]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_a_float_tensor_cost_plans_as_its_values(dtype):
    workload = torch.tensor(sb.calculate_workload(LENGTHS), dtype=torch.float64).to(dtype)
    # The tensor's own values, read as the partitioners read them (bfloat16 widened to float32).
    values = workload.to(torch.float32 if dtype == torch.bfloat16 else dtype).numpy()
    for plan in (
        lambda cost: sb.plan_micro_batches(LENGTHS, 800, cost=cost),
        lambda cost: sb.plan_dp_micro_batches(LENGTHS, 2, 800, cost=cost),
        lambda cost: [sb.min_num_micro_batches_for(LENGTHS, 800, cost=cost)],
        lambda cost: sb.plan_packed_steps(LENGTHS, 2, 2, 800, cost=cost),
    ):
        assert plan(workload) == plan(values)


def test_a_cost_callable_returning_a_tensor_that_requires_grad():
    def cost(lengths: np.ndarray):
        return torch.tensor(lengths, dtype=torch.float32, requires_grad=True) * 2.5

    plan = sb.plan_micro_batches(LENGTHS, 800, cost=cost, max_sequences=2)
    assert sorted(i for mb in plan for i in mb) == list(range(len(LENGTHS)))
    assert all(len(mb) <= 2 and sum(LENGTHS[i] for i in mb) <= 800 for mb in plan)
