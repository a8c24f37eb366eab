"""Planning toolkit: costs, metrics, groups, micro-batches, the DP plan, packing and streaming."""
