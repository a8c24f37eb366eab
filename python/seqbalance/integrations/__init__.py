"""Optional bridges to other frameworks.

Nothing here is imported by ``import seqbalance``; each submodule imports its framework only when
it is itself imported, so seqbalance never depends on those frameworks.

* `seqbalance.integrations.transfer_queue`: samplers accepted by TransferQueue's controller.
* `seqbalance.integrations.verl`: ``install()`` runs verl's partitioners on seqbalance.
* `seqbalance.integrations.openrlhf`: ``install()`` does the same for OpenRLHF.

The last two import their trainer only when ``install()`` is called.
"""
