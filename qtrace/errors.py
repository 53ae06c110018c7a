"""Exceptions raised by qtrace."""


class TracerError(Exception):
    """An operation needs a concrete value (or a construct) that a traced function cannot have.

    Raised, for example, when a boolean mask indexes a tensor inside ``qt.jit``: the
    result's shape would depend on data. The message names the operation and suggests
    the traceable alternative (usually ``qt.where``).
    """


class AdstackOverflowError(RuntimeError):
    """A reverse-mode loop needed more stack than was sized for it.

    Sizing is exact, so this means a bug or data changed behind qtrace's back (or the
    debug cap ``qt.config.adstack_max_depth``). Nothing was written out of bounds; the
    message names the kernel and the loop (content hashes, stable across processes).
    """
