"""Frontends that build graphs of registered operators from a framework's program
(shared/ARCHITECTURE.md): ``torch`` (``from_torch``, PyTorch capture through torch.export)
with its aten table ``aten``.  A frontend imports its framework only when it runs."""
