//! The runtime side of multi-rank kernels (docs/distributed.md): a rendezvous of the job's
//! ranks over loopback TCP ([`rendezvous`]), file descriptors passed between them
//! ([`fdpass`]), and the symmetric heap every rank maps alike ([`heap`]), whose address
//! arithmetic the kernels' peer accesses assume (`base + r·heap_stride`).
//!
//! One process per GPU is the main mode (torchrun's variables). The rendezvous and descriptor
//! passing are tested on the CPU (processes and threads on one machine); the heap needs a CUDA
//! driver and GPUs (its errors say so without them) and has run on 2–4 H100s.

pub mod error;
pub mod fdpass;
pub mod heap;
pub mod rendezvous;

pub use error::{DistError, Result};
pub use heap::{CopyStream, SymmetricBuffer, SymmetricHeap};
pub use rendezvous::{JobConfig, Rendezvous};
