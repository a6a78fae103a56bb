//! NVIDIA's asynchronous copies (cp.async): the copies of an iteration past the loop's end are
//! not issued at all — their group is committed empty, and empty groups complete at once. One
//! barrier per iteration: wait for this iteration's group, barrier (its tiles are visible, and
//! everyone is done with the previous iteration's stage), refill that stage, compute.

use tl_ir::{Expr, Span, Stmt};

use super::{Issue, Steady};
use crate::tile_util::if_then;

pub struct CpAsync;

impl Issue for CpAsync {
    fn issue(&self, copies: Stmt, valid: Expr, span: Span) -> Stmt {
        if_then(Some(valid), copies, span)
    }

    fn steady(&self, it: Steady) -> Vec<Stmt> {
        vec![
            (it.wait)(it.ahead_by - 1),
            it.fence,
            it.barrier,
            it.fetch,
            it.commit,
            it.consume,
        ]
    }
}
