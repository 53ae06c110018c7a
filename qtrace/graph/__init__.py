"""The dataflow graph: hash-consed nodes, primitives, partition into tasks, plans."""
