"""Optional bridges to other frameworks.

Nothing here is imported by ``import seqbalance``; each submodule imports its framework only when
it is itself imported, so seqbalance never depends on those frameworks.

* :mod:`seqbalance.integrations.transfer_queue`: samplers accepted by TransferQueue's controller.
"""
