"""Planning toolkit: cost models, metrics, groups, micro-batches, the data-parallel plan, packing."""
