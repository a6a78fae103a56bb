//! The rendezvous: every rank of a job meets rank 0 over loopback TCP (the machines here have
//! no other network), then exchanges small messages through it — the sizes and addresses that
//! setting up the symmetric heap needs, and barriers. torchrun-style: `RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`.
//!
//! Every wait has a deadline: a rank that never joins, or dies mid-job, makes the others fail
//! with an error that names it, never hang.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::error::{DistError, Result};

const MAGIC: &[u8; 4] = b"TLRV";
/// The default for `TILELANG_DIST_TIMEOUT` (seconds).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Who this process is in the job.
#[derive(Clone, Debug)]
pub struct JobConfig {
    pub rank: usize,
    pub world: usize,
    /// The GPU this rank drives (torchrun's `LOCAL_RANK`).
    pub local_rank: usize,
    /// Where rank 0 listens.
    pub addr: String,
    /// How long any rank waits for another.
    pub timeout: Duration,
}

impl JobConfig {
    /// From torchrun's variables: `RANK`, `WORLD_SIZE`, `LOCAL_RANK` (default: `RANK`),
    /// `MASTER_ADDR` (default 127.0.0.1), `MASTER_PORT`, and `TILELANG_DIST_TIMEOUT` (seconds,
    /// default 60).
    pub fn from_env() -> Result<JobConfig> {
        let var = |k: &str| std::env::var(k).ok();
        let num = |k: &str| -> Result<Option<usize>> {
            var(k)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| {
                        DistError::Config(format!("{k}={v:?} is not a non-negative integer"))
                    })
                })
                .transpose()
        };
        let rank = num("RANK")?.ok_or_else(|| {
            DistError::Config(
                "RANK is not set: start every rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (as torchrun does)"
                    .into(),
            )
        })?;
        let world =
            num("WORLD_SIZE")?.ok_or_else(|| DistError::Config("WORLD_SIZE is not set".into()))?;
        let port = num("MASTER_PORT")?
            .ok_or_else(|| DistError::Config("MASTER_PORT is not set".into()))?;
        let host = var("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
        let timeout = match var("TILELANG_DIST_TIMEOUT") {
            Some(v) => Duration::from_secs_f64(v.trim().parse::<f64>().map_err(|_| {
                DistError::Config(format!(
                    "TILELANG_DIST_TIMEOUT={v:?} is not a number of seconds"
                ))
            })?),
            None => DEFAULT_TIMEOUT,
        };
        let cfg = JobConfig {
            rank,
            world,
            local_rank: num("LOCAL_RANK")?.unwrap_or(rank),
            addr: format!("{host}:{port}"),
            timeout,
        };
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<()> {
        if self.world == 0 || self.rank >= self.world {
            return Err(DistError::Config(format!(
                "rank {} of a world of {}: ranks run from 0 to WORLD_SIZE - 1",
                self.rank, self.world
            )));
        }
        if self.world > 1024 {
            return Err(DistError::Config(format!(
                "a world of {} ranks (at most 1024)",
                self.world
            )));
        }
        Ok(())
    }
}

/// A job's connections: rank 0 holds one to every other rank, the others one to rank 0.
pub struct Rendezvous {
    cfg: JobConfig,
    /// Rank 0: `peers[r]` is rank `r`'s stream (`None` for itself). Others: `peers[0]`.
    peers: Vec<Option<TcpStream>>,
}

impl Rendezvous {
    pub fn rank(&self) -> usize {
        self.cfg.rank
    }
    pub fn world(&self) -> usize {
        self.cfg.world
    }
    pub fn config(&self) -> &JobConfig {
        &self.cfg
    }

    /// Meet every rank of the job (collective: every rank calls it).
    pub fn join(cfg: JobConfig) -> Result<Rendezvous> {
        cfg.check()?;
        if cfg.world == 1 {
            return Ok(Rendezvous {
                peers: vec![None],
                cfg,
            });
        }
        if cfg.rank == 0 {
            Self::host(cfg)
        } else {
            Self::guest(cfg)
        }
    }

    fn io(&self, op: impl Into<String>) -> impl FnOnce(std::io::Error) -> DistError {
        let me = self.cfg.rank;
        let op = op.into();
        move |source| DistError::Io { me, op, source }
    }

    fn host(cfg: JobConfig) -> Result<Rendezvous> {
        let io = |op: &str| {
            let op = op.to_string();
            move |source| DistError::Io { me: 0, op, source }
        };
        let listener = TcpListener::bind(resolve(&cfg.addr, 0)?).map_err(io(&format!(
            "listening at {} for the other ranks",
            cfg.addr
        )))?;
        listener
            .set_nonblocking(true)
            .map_err(io("a non-blocking listener"))?;
        let deadline = Instant::now() + cfg.timeout;
        let mut peers: Vec<Option<TcpStream>> = (0..cfg.world).map(|_| None).collect();
        let mut joined = 1;
        while joined < cfg.world {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).map_err(io("a blocking stream"))?;
                    s.set_read_timeout(Some(cfg.timeout))
                        .map_err(io("a read timeout"))?;
                    s.set_nodelay(true).ok();
                    let mut hello = [0u8; 12];
                    if s.read_exact(&mut hello).is_err() || &hello[..4] != MAGIC {
                        // Not one of ours (a port scanner, another job): ignore it.
                        continue;
                    }
                    let rank =
                        u32::from_le_bytes(hello[4..8].try_into().unwrap_or_default()) as usize;
                    let world =
                        u32::from_le_bytes(hello[8..12].try_into().unwrap_or_default()) as usize;
                    if world != cfg.world {
                        return Err(DistError::Protocol {
                            me: 0,
                            detail: format!(
                                "rank {rank} says the world has {world} ranks, rank 0 says {}; start every rank with the same WORLD_SIZE",
                                cfg.world
                            ),
                        });
                    }
                    if rank == 0 || rank >= cfg.world || peers[rank].is_some() {
                        return Err(DistError::Protocol {
                            me: 0,
                            detail: format!(
                                "a second rank {rank} joined; every rank needs its own RANK"
                            ),
                        });
                    }
                    peers[rank] = Some(s);
                    joined += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        let missing = (1..cfg.world).filter(|&r| peers[r].is_none()).collect();
                        return Err(DistError::Timeout {
                            me: 0,
                            missing,
                            what: "join",
                            addr: cfg.addr.clone(),
                            timeout: cfg.timeout,
                        });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(io("accepting a rank")(e)),
            }
        }
        let rv = Rendezvous { cfg, peers };
        // Tell every rank that all have joined.
        rv.broadcast(&[])?;
        Ok(rv)
    }

    fn guest(cfg: JobConfig) -> Result<Rendezvous> {
        let me = cfg.rank;
        let addr = resolve(&cfg.addr, me)?;
        let deadline = Instant::now() + cfg.timeout;
        let mut s = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(_) => {
                    return Err(DistError::Timeout {
                        me,
                        missing: vec![0],
                        what: "answer",
                        addr: cfg.addr.clone(),
                        timeout: cfg.timeout,
                    })
                }
            }
        };
        let io = |op: &'static str| {
            move |source| DistError::Io {
                me,
                op: op.into(),
                source,
            }
        };
        s.set_read_timeout(Some(cfg.timeout))
            .map_err(io("a read timeout"))?;
        s.set_nodelay(true).ok();
        let mut hello = MAGIC.to_vec();
        hello.extend((me as u32).to_le_bytes());
        hello.extend((cfg.world as u32).to_le_bytes());
        s.write_all(&hello).map_err(io("greeting rank 0"))?;
        let mut peers: Vec<Option<TcpStream>> = (0..cfg.world).map(|_| None).collect();
        peers[0] = Some(s);
        let rv = Rendezvous { cfg, peers };
        // Rank 0's go-ahead: every rank has joined.
        rv.recv_from(0, "confirm that every rank joined")?;
        Ok(rv)
    }

    /// Every rank's `mine`, by rank (collective).
    pub fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let world = self.cfg.world;
        if world == 1 {
            return Ok(vec![mine.to_vec()]);
        }
        if self.cfg.rank == 0 {
            let mut all = vec![mine.to_vec()];
            for r in 1..world {
                match self.recv_from(r, "send its part of a collective") {
                    Ok(part) => all.push(part),
                    Err(e) => {
                        // The others wait for rank 0's answer: tell them who failed, so
                        // every rank names the same culprit (not rank 0, which leaves next).
                        self.broadcast_failure(&e);
                        return Err(e);
                    }
                }
            }
            let mut packed = vec![];
            for part in &all {
                packed.extend((part.len() as u64).to_le_bytes());
                packed.extend(part);
            }
            self.broadcast(&packed)?;
            Ok(all)
        } else {
            self.send_to(0, mine)?;
            let packed = self.recv_from(0, "send the collective's result")?;
            if let Some(why) = packed.strip_prefix(&FAILURE) {
                return Err(DistError::Protocol {
                    me: self.cfg.rank,
                    detail: format!("rank 0 stopped the job: {}", String::from_utf8_lossy(why)),
                });
            }
            unpack(&packed, world).ok_or_else(|| DistError::Protocol {
                me: self.cfg.rank,
                detail: "a garbled collective from rank 0".into(),
            })
        }
    }

    /// Every rank arrives before any leaves (collective).
    pub fn barrier(&self) -> Result<()> {
        self.all_gather(&[]).map(|_| ())
    }

    /// Rank 0's answer to a collective that failed: [`FAILURE`] and the error, to every rank
    /// still connected (best effort: some may be gone too).
    fn broadcast_failure(&self, e: &DistError) {
        let mut msg = FAILURE.to_vec();
        msg.extend(e.to_string().as_bytes());
        for r in 1..self.cfg.world {
            let _ = self.send_to(r, &msg);
        }
    }

    fn broadcast(&self, data: &[u8]) -> Result<()> {
        for r in 1..self.cfg.world {
            self.send_to(r, data)?;
        }
        Ok(())
    }

    fn stream(&self, r: usize) -> Result<&TcpStream> {
        self.peers
            .get(r)
            .and_then(|s| s.as_ref())
            .ok_or_else(|| DistError::Protocol {
                me: self.cfg.rank,
                detail: format!("no connection to rank {r}"),
            })
    }

    fn send_to(&self, r: usize, data: &[u8]) -> Result<()> {
        let mut s = self.stream(r)?;
        let mut msg = (data.len() as u64).to_le_bytes().to_vec();
        msg.extend(data);
        s.write_all(&msg)
            .map_err(self.io(format!("sending to rank {r} (has it exited?)")))
    }

    fn recv_from(&self, r: usize, what: &'static str) -> Result<Vec<u8>> {
        let mut s = self.stream(r)?;
        let timeout = |e: &std::io::Error| {
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )
        };
        let lost = |e: std::io::Error| -> DistError {
            if timeout(&e) {
                DistError::Timeout {
                    me: self.cfg.rank,
                    missing: vec![r],
                    what,
                    addr: self.cfg.addr.clone(),
                    timeout: self.cfg.timeout,
                }
            } else {
                DistError::Protocol {
                    me: self.cfg.rank,
                    detail: format!("rank {r} closed its connection (it exited or crashed): {e}"),
                }
            }
        };
        let mut len = [0u8; 8];
        s.read_exact(&mut len).map_err(lost)?;
        let len = u64::from_le_bytes(len) as usize;
        if len > 1 << 30 {
            return Err(DistError::Protocol {
                me: self.cfg.rank,
                detail: format!("rank {r} sent a {len}-byte message"),
            });
        }
        let mut buf = vec![0u8; len];
        s.read_exact(&mut buf).map_err(lost)?;
        Ok(buf)
    }
}

/// How rank 0's answer to a collective starts when the collective failed: a part length no
/// real answer has (the packed parts start with the first part's length).
const FAILURE: [u8; 8] = u64::MAX.to_le_bytes();

fn resolve(addr: &str, me: usize) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| DistError::Config(format!("rank {me}: cannot resolve the rendezvous address {addr:?} (MASTER_ADDR:MASTER_PORT)")))
}

fn unpack(packed: &[u8], world: usize) -> Option<Vec<Vec<u8>>> {
    let mut out = vec![];
    let mut at = 0usize;
    for _ in 0..world {
        let len = u64::from_le_bytes(packed.get(at..at + 8)?.try_into().ok()?) as usize;
        at += 8;
        out.push(packed.get(at..at + len)?.to_vec());
        at += len;
    }
    (at == packed.len()).then_some(out)
}
