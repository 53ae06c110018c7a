"""Lowering range tasks to LLVM IR and compiling them for a target."""
