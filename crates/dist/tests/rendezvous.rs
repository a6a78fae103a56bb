//! The rendezvous and descriptor passing, with ranks as threads on loopback (the same kernel
//! paths as processes): collectives, a rank that never joins (an error that names it within
//! the timeout, not a hang), a world-size mismatch, and memory handles passed as descriptors.

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use tl_dist::fdpass::exchange_fds;
use tl_dist::{DistError, JobConfig, Rendezvous};

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("address").to_string()
}

fn cfg(rank: usize, world: usize, addr: &str, timeout: Duration) -> JobConfig {
    JobConfig {
        rank,
        world,
        local_rank: rank,
        addr: addr.into(),
        timeout,
    }
}

/// Run `f` on ranks `0..world` (threads), each with its joined rendezvous.
fn with_ranks<T: Send + 'static>(
    world: usize,
    f: impl Fn(Rendezvous) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let addr = free_addr();
    let handles: Vec<_> = (0..world)
        .map(|r| {
            let (f, addr) = (f.clone(), addr.clone());
            std::thread::spawn(move || {
                let rv = Rendezvous::join(cfg(r, world, &addr, Duration::from_secs(20)))
                    .unwrap_or_else(|e| panic!("rank {r}: {e}"));
                f(rv)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("a rank panicked"))
        .collect()
}

#[test]
fn all_gather_and_barrier_on_1_2_and_5_ranks() {
    for world in [1usize, 2, 5] {
        let got = with_ranks(world, |rv| {
            let mine = vec![rv.rank() as u8; rv.rank() + 1];
            let all = rv.all_gather(&mine).expect("all_gather");
            rv.barrier().expect("barrier");
            let again = rv.all_gather(&[7, rv.rank() as u8]).expect("second");
            (all, again)
        });
        for (r, (all, again)) in got.iter().enumerate() {
            for (q, part) in all.iter().enumerate() {
                assert_eq!(part, &vec![q as u8; q + 1], "rank {r}'s view of rank {q}");
            }
            assert_eq!(again.len(), world);
            assert_eq!(again[world - 1], vec![7, (world - 1) as u8]);
        }
    }
}

/// Rank 2 of 3 never starts: rank 0 fails within the timeout, naming it.
#[test]
fn a_missing_rank_is_named_within_the_timeout() {
    let addr = free_addr();
    let t = Duration::from_millis(800);
    let a2 = addr.clone();
    let one = std::thread::spawn(move || Rendezvous::join(cfg(1, 3, &a2, t)).err());
    let start = Instant::now();
    let e = Rendezvous::join(cfg(0, 3, &addr, t))
        .err()
        .expect("rank 2 is missing");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(
        matches!(e, DistError::Timeout { ref missing, .. } if missing == &[2]),
        "{e}"
    );
    assert!(e.to_string().contains("rank 2 did not join"), "{e}");
    // Rank 1, left waiting for the go-ahead, fails too instead of hanging.
    let e1 = one.join().expect("rank 1").expect("rank 1 fails");
    println!("rank 0: {e}\nrank 1: {e1}");
}

/// A rank that cannot reach rank 0 fails with an error that names rank 0.
#[test]
fn an_absent_rank_0_is_named() {
    let addr = free_addr();
    let e = Rendezvous::join(cfg(1, 2, &addr, Duration::from_millis(300)))
        .err()
        .expect("nobody listens");
    assert!(e.to_string().contains("rank 0 did not answer"), "{e}");
}

#[test]
fn ranks_that_disagree_on_the_world_size_are_refused() {
    let addr = free_addr();
    let a2 = addr.clone();
    let t = Duration::from_secs(5);
    let one = std::thread::spawn(move || Rendezvous::join(cfg(1, 3, &a2, t)).err());
    let e = Rendezvous::join(cfg(0, 2, &addr, t))
        .err()
        .expect("3 against 2");
    assert!(
        e.to_string()
            .contains("the world has 3 ranks, rank 0 says 2"),
        "{e}"
    );
    let _ = one.join();
}

#[test]
fn bad_configurations_are_refused() {
    let e = Rendezvous::join(cfg(3, 2, "127.0.0.1:1", Duration::from_secs(1)))
        .err()
        .expect("rank 3 of 2");
    assert!(
        e.to_string().contains("ranks run from 0 to WORLD_SIZE - 1"),
        "{e}"
    );
}

/// Every rank passes a descriptor of its own file; every rank reads every rank's file through
/// the descriptor it received (as a CUDA memory handle's descriptor travels).
#[test]
fn descriptors_reach_every_rank() {
    let dir = std::env::temp_dir();
    let tag = std::process::id();
    let got = with_ranks(4, move |rv| {
        let path = dir.join(format!("tl-dist-fd-{tag}-{}", rv.rank()));
        let mut f = std::fs::File::create(&path).expect("file");
        write!(f, "rank {} here", rv.rank()).expect("write");
        let f = std::fs::File::open(&path).expect("reopen");
        let job = format!("test-{tag}");
        let fds = exchange_fds(&rv, &job, f.as_fd()).expect("exchange");
        let texts: Vec<String> = fds
            .into_iter()
            .map(|fd| {
                let file = std::fs::File::from(fd);
                let mut buf = vec![0u8; 64];
                let n = file.read_at(&mut buf, 0).expect("read");
                String::from_utf8_lossy(&buf[..n]).into_owned()
            })
            .collect();
        rv.barrier().expect("barrier");
        let _ = std::fs::remove_file(&path);
        texts
    });
    for (r, texts) in got.iter().enumerate() {
        for (q, t) in texts.iter().enumerate() {
            assert_eq!(
                t,
                &format!("rank {q} here"),
                "rank {r} reading rank {q}'s file"
            );
        }
    }
}

/// Without a GPU, setting up the heap fails with an error that names the device.
#[test]
fn the_heap_without_a_gpu_is_a_clear_error() {
    if tl_runtime::Device::cuda_count() > 0 {
        return;
    }
    let rv = Rendezvous::join(cfg(0, 1, "127.0.0.1:1", Duration::from_secs(1))).expect("world 1");
    let e = tl_dist::SymmetricHeap::new(&rv, 0, 1 << 20)
        .err()
        .expect("no GPU");
    assert!(e.to_string().contains("cuda:0"), "{e}");
}

fn dist_run(n: &str, cmd: &[&str]) -> std::process::Output {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/dist-run.sh");
    std::process::Command::new("bash")
        .arg(script)
        .arg(n)
        .args(cmd)
        .env_remove("MASTER_PORT")
        .output()
        .expect("bash runs")
}

/// The launcher gives every rank its variables, and when one rank fails it stops the others
/// (one would otherwise wait forever) and exits with the failure's status.
#[test]
fn the_launcher_sets_ranks_and_stops_the_job_on_a_failure() {
    let ok = dist_run(
        "3",
        &[
            "sh",
            "-c",
            "echo $RANK/$WORLD_SIZE/$LOCAL_RANK $MASTER_ADDR",
        ],
    );
    assert!(ok.status.success());
    let out = String::from_utf8_lossy(&ok.stdout);
    for r in 0..3 {
        assert!(
            out.contains(&format!("[rank {r}] {r}/3/{r} 127.0.0.1")),
            "{out}"
        );
    }
    let t = Instant::now();
    let bad = dist_run(
        "2",
        &["sh", "-c", "if [ $RANK = 1 ]; then exit 3; fi; sleep 60"],
    );
    assert_eq!(bad.status.code(), Some(3));
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "the sleeping rank was not stopped"
    );
}

/// Rank 1 of 3 leaves mid-job: rank 0 names it, and rank 2 (waiting on rank 0's answer) is
/// told the same instead of blaming rank 0, which leaves right after.
#[test]
fn a_rank_that_leaves_mid_job_is_named_by_every_other_rank() {
    let got = with_ranks(3, |rv| {
        rv.barrier().expect("everyone is here");
        if rv.rank() == 1 {
            drop(rv);
            return None;
        }
        Some(rv.barrier().expect_err("rank 1 left").to_string())
    });
    for (r, e) in got.iter().enumerate() {
        if let Some(e) = e {
            assert!(e.contains("rank 1 closed its connection"), "rank {r}: {e}");
        }
    }
    assert!(got[2]
        .as_deref()
        .is_some_and(|e| e.contains("rank 0 stopped the job")));
}

/// `TILELANG_DIST_IPC` names the heap's mapping; ranks that disagree on it (or on the size) are
/// refused before anything is mapped, naming the rank that differs and the variable.
#[test]
fn ranks_must_agree_on_the_heap_mapping() {
    use tl_dist::heap::agree;
    use tl_dist::HeapMapping;
    assert_eq!(HeapMapping::parse("legacy"), Some(HeapMapping::LegacyIpc));
    assert_eq!(HeapMapping::parse("vmm"), Some(HeapMapping::Vmm));
    assert_eq!(HeapMapping::parse(""), Some(HeapMapping::Vmm));
    assert_eq!(HeapMapping::parse("nvshmem"), Some(HeapMapping::Nvshmem));
    assert_eq!(HeapMapping::parse("nvlink"), None);
    let same = with_ranks(3, |rv| agree(&rv, 2 << 20, HeapMapping::LegacyIpc).is_ok());
    assert_eq!(same, [true, true, true]);
    let mixed = with_ranks(2, |rv| {
        let m = if rv.rank() == 1 {
            HeapMapping::LegacyIpc
        } else {
            HeapMapping::Vmm
        };
        agree(&rv, 2 << 20, m).err().map(|e| e.to_string())
    });
    let e0 = mixed[0].clone().expect("rank 0 refused");
    assert!(
        e0.contains("rank 0 maps it by vmm and rank 1 by legacy")
            && e0.contains("TILELANG_DIST_IPC"),
        "{e0}"
    );
    // Any pair of the three is named as it is.
    let mixed = with_ranks(2, |rv| {
        let m = if rv.rank() == 1 {
            HeapMapping::Nvshmem
        } else {
            HeapMapping::LegacyIpc
        };
        agree(&rv, 2 << 20, m).err().map(|e| e.to_string())
    });
    let e0 = mixed[0].clone().expect("rank 0 refused");
    assert!(
        e0.contains("rank 0 maps it by legacy and rank 1 by nvshmem"),
        "{e0}"
    );
    let sizes = with_ranks(2, |rv| {
        agree(&rv, (rv.rank() as u64 + 1) << 21, HeapMapping::Vmm)
            .err()
            .map(|e| e.to_string())
    });
    for e in sizes {
        let e = e.expect("refused");
        assert!(e.contains("different size"), "{e}");
    }
}

/// Without a GPU, the legacy-IPC heap fails as clearly as the default one.
#[test]
fn the_legacy_heap_without_a_gpu_is_a_clear_error() {
    if tl_runtime::Device::cuda_count() > 0 {
        return;
    }
    let rv = Rendezvous::join(cfg(0, 1, "127.0.0.1:1", Duration::from_secs(1))).expect("world 1");
    let e = tl_dist::SymmetricHeap::with_mapping(&rv, 0, 1 << 20, tl_dist::HeapMapping::LegacyIpc)
        .err()
        .expect("no GPU");
    assert!(e.to_string().contains("cuda:0"), "{e}");
}

/// A job whose ranks all live in this process: no ranks is a configuration error, and without
/// a GPU the error names the device.
#[test]
fn a_local_job_needs_ranks_and_gpus() {
    let e = tl_dist::LocalJob::new(&[], 1 << 20)
        .err()
        .expect("no ranks");
    assert!(e.to_string().contains("no ranks"), "{e}");
    if tl_runtime::Device::cuda_count() > 0 {
        return;
    }
    let e = tl_dist::LocalJob::new(&[0, 0], 1 << 20)
        .err()
        .expect("no GPU");
    assert!(e.to_string().contains("cuda:0"), "{e}");
}
