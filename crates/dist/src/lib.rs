//! The runtime side of multi-rank kernels (docs/distributed.md): a rendezvous of the job's
//! ranks over loopback TCP ([`rendezvous`]), file descriptors passed between them
//! ([`fdpass`]), and the symmetric heap every rank maps alike ([`heap`]): by CUDA virtual
//! memory, at the address arithmetic the kernels' peer accesses assume
//! (`base + r·heap_stride`), or by legacy CUDA IPC for kernels with peer tables; transfers by
//! the copy engines instead of SM stores ([`copy_engine`]).
//!
//! One process per GPU is the main mode (torchrun's variables). The rendezvous and descriptor
//! passing are tested on the CPU (processes and threads on one machine); the heap needs a CUDA
//! driver and GPUs (its errors say so without them) and has run on 2–4 H100s.

pub mod copy_engine;
pub mod error;
pub mod fdpass;
pub mod heap;
mod legacy_ipc;
pub mod local;
mod nvshmem;
pub mod rendezvous;
mod vmm;

pub use copy_engine::{CopyEngineAllGather, CopyStream, GatherBuffers};
pub use error::{DistError, Result};
pub use heap::{with_tables, HeapMapping, SymmetricBuffer, SymmetricHeap};
pub use local::LocalJob;
pub use rendezvous::{JobConfig, Rendezvous};
