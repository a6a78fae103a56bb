//! CuTe-semantics layout algebra (placeholder; being written).
