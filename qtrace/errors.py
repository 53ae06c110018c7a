"""Exceptions raised by qtrace."""


class TracerError(Exception):
    """An operation needs a concrete value (or a construct) that a traced function cannot have.

    Raised, for example, when a boolean mask indexes a tensor inside ``qt.jit``: the
    result's shape would depend on data. The message names the operation and suggests
    the traceable alternative (usually ``qt.where``).
    """
