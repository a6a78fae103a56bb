//! What can go wrong between ranks. Every error says which rank (or ranks) it is about and what
//! to change: a multi-rank job that fails must say who is missing, never hang.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// The environment does not describe a job (torchrun-style variables).
    #[error("{0}")]
    Config(String),

    /// Ranks that did not join (or answer) within the timeout.
    #[error("rank {me}: {} did not {what} within {:.1} s (rendezvous at {addr}); check that every rank of the job was started with the same MASTER_ADDR/MASTER_PORT and WORLD_SIZE, or raise TILELANG_DIST_TIMEOUT", describe_ranks(.missing), .timeout.as_secs_f64())]
    Timeout {
        me: usize,
        missing: Vec<usize>,
        what: &'static str,
        addr: String,
        timeout: Duration,
    },

    /// A rank that broke the protocol (another job on the port, a different world size, a rank
    /// given twice).
    #[error("rank {me}: {detail}")]
    Protocol { me: usize, detail: String },

    /// Ranks that disagree about a collective allocation.
    #[error("ranks disagree on {what}: {detail}; every rank must make the same symmetric allocations, with the same sizes, in the same order")]
    Mismatch { what: String, detail: String },

    #[error("rank {me}: {op}: {source}")]
    Io {
        me: usize,
        op: String,
        #[source]
        source: std::io::Error,
    },

    /// The CUDA driver refused a step of setting up the symmetric heap.
    #[error("rank {me}: {op} failed: {detail}")]
    Driver {
        me: usize,
        op: String,
        detail: String,
    },

    /// The heap cannot be used for what was asked.
    #[error("{0}")]
    Heap(String),
}

pub type Result<T> = std::result::Result<T, DistError>;

/// "rank 2" or "ranks 1, 3".
pub fn describe_ranks(r: &[usize]) -> String {
    let list: Vec<String> = r.iter().map(|x| x.to_string()).collect();
    match r.len() {
        1 => format!("rank {}", list[0]),
        _ => format!("ranks {}", list.join(", ")),
    }
}
