"""Frontends that build graphs of registered operators from a framework's program
(shared/ARCHITECTURE.md): ``torch`` (``from_torch``, PyTorch capture through torch.export)
with its aten table ``aten``.  A frontend imports its framework only when it runs.
``registrar`` makes the decorator by which each translation table is filled."""


def registrar(table: dict, label: str, **defaults):
    """``entry(*names, **marks)``, a decorator putting a translation into ``table`` under each
    of ``names``, with ``defaults`` updated by ``marks`` set as attributes of the function;
    a name translated twice is a ValueError naming ``label``."""
    def entry(*names, **marks):
        def register(fn):
            for key, value in {**defaults, **marks}.items():
                setattr(fn, key, value)
            for name in names:
                if name in table:
                    raise ValueError(f"{label}: {name} is already translated")
                table[name] = fn
            return fn
        return register
    return entry
