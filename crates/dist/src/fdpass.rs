//! Passing file descriptors between the ranks of one host: each rank binds a Unix datagram
//! socket in the abstract namespace (nothing to clean up on disk), and sends its descriptor to
//! every other rank with `SCM_RIGHTS` — how the CUDA driver's shareable memory handles
//! (`CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`) travel between processes, as PyTorch's
//! symmetric memory and NCCL do. `pidfd_getfd` would need ptrace rights between siblings;
//! `SCM_RIGHTS` does not.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Instant;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr};

use crate::error::{DistError, Result};
use crate::rendezvous::Rendezvous;

/// The abstract socket name of `rank` in job `job`.
fn name(job: &str, rank: usize) -> String {
    format!("tilelang-dist-{job}-{rank}")
}

/// Every rank's descriptor, by rank (collective): this rank's own is a duplicate of `mine`.
/// `job` must be the same on every rank and unique to the job on this host (the rendezvous
/// address is a good one).
pub fn exchange_fds(rv: &Rendezvous, job: &str, mine: BorrowedFd<'_>) -> Result<Vec<OwnedFd>> {
    let me = rv.rank();
    let world = rv.world();
    let io = |op: String| move |source| DistError::Io { me, op, source };
    let addr = SocketAddr::from_abstract_name(name(job, me).as_bytes())
        .map_err(io("an abstract socket name".into()))?;
    let sock = UnixDatagram::bind_addr(&addr).map_err(io(format!(
        "binding the descriptor socket {:?}",
        name(job, me)
    )))?;
    sock.set_read_timeout(Some(rv.config().timeout))
        .map_err(io("a read timeout".into()))?;
    // Every socket is bound before anyone sends.
    rv.barrier()?;
    for peer in (0..world).filter(|&p| p != me) {
        let to = UnixAddr::new_abstract(name(job, peer).as_bytes())
            .map_err(|e| io(format!("the address of rank {peer}"))(e.into()))?;
        let payload = (me as u32).to_le_bytes();
        let fds = [mine.as_raw_fd()];
        sendmsg(
            sock.as_raw_fd(),
            &[IoSlice::new(&payload)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            Some(&to),
        )
        .map_err(|e| io(format!("sending a descriptor to rank {peer}"))(e.into()))?;
    }
    let mut got: Vec<Option<OwnedFd>> = (0..world).map(|_| None).collect();
    got[me] = Some(
        mine.try_clone_to_owned()
            .map_err(io("duplicating this rank's descriptor".into()))?,
    );
    let deadline = Instant::now() + rv.config().timeout;
    while got.iter().any(|g| g.is_none()) {
        let mut payload = [0u8; 4];
        let mut iov = [IoSliceMut::new(&mut payload)];
        let mut cmsg = nix::cmsg_space!([RawFd; 1]);
        let msg = recvmsg::<UnixAddr>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::empty(),
        );
        let msg = match msg {
            Ok(m) => m,
            Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR)
                if Instant::now() < deadline =>
            {
                continue
            }
            Err(nix::errno::Errno::EAGAIN) => {
                let missing = (0..world).filter(|&r| got[r].is_none()).collect();
                return Err(DistError::Timeout {
                    me,
                    missing,
                    what: "send its memory handle",
                    addr: format!("abstract socket {:?}", name(job, me)),
                    timeout: rv.config().timeout,
                });
            }
            Err(e) => return Err(io("receiving a descriptor".into())(e.into())),
        };
        let mut fd = None;
        for c in msg
            .cmsgs()
            .map_err(|e| io("reading a control message".into())(e.into()))?
        {
            if let ControlMessageOwned::ScmRights(fds) = c {
                for raw in fds {
                    // SAFETY: the kernel installed this descriptor in our table for this
                    // message; we take sole ownership of it here.
                    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                    fd.get_or_insert(owned);
                }
            }
        }
        let from = u32::from_le_bytes(payload) as usize;
        let Some(fd) = fd else {
            return Err(DistError::Protocol {
                me,
                detail: format!("rank {from} sent a message without a descriptor"),
            });
        };
        match got.get_mut(from) {
            Some(slot @ None) => *slot = Some(fd),
            _ => {
                return Err(DistError::Protocol {
                    me,
                    detail: format!("a descriptor from rank {from}, twice or out of range"),
                })
            }
        }
    }
    // Nobody closes its socket while another may still send to it.
    rv.barrier()?;
    Ok(got.into_iter().flatten().collect())
}
