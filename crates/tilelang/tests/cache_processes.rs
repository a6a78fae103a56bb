//! The kernel cache under processes: many processes compiling the same kernels into one empty
//! cache, damaged entries, and cache directories that cannot be written. Each run is an example
//! binary on the CPU backend (its own reference check must pass); `cargo test` builds the
//! examples next to this test binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let path = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target profile directory")
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} was not built: run the whole `cargo test` or `cargo build --examples`",
        path.display()
    );
    path
}

fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tl-cache-proc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn command(name: &str, args: &[&str], cache: &Path) -> Command {
    let mut c = Command::new(example(name));
    c.args(args)
        .args(["--reps", "1", "--device", "cpu"])
        .env("TILELANG_CACHE_DIR", cache)
        .env("TILELANG_CPU_THREADS", "1");
    c
}

/// Whether the run passed its reference check, and whether its kernel came from the cache.
fn outcome(what: &str, out: &Output) -> bool {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.contains(" err="), "{what}: {last}");
    if last.contains("cached=true") {
        true
    } else {
        assert!(last.contains("cached=false"), "{what}: {last}");
        false
    }
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// What is done to an entry, and how.
type Damage = (&'static str, fn(&mut Vec<u8>));

const RUNS: [(&str, &[&str]); 2] = [
    ("elementwise", &["--n", "1001"]),
    ("softmax", &["--rows", "5", "--cols", "77"]),
];

/// 8 processes per kernel, all started before any finishes, on one empty cache: every one
/// passes its check, each kernel is compiled by exactly one of them (the others wait on the
/// entry's lock and load what it stored), nothing warns, and no temporary file is left.
#[test]
fn many_processes_compile_each_kernel_once() {
    let dir = fresh_dir("many");
    let cache = dir.join("cache");
    let mut children = vec![];
    for _ in 0..8 {
        for (name, args) in RUNS {
            let child = command(name, args, &cache)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn");
            children.push((name, child));
        }
    }
    let mut misses = std::collections::HashMap::new();
    for (name, child) in children {
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!stderr.contains("warning"), "{name}: {stderr}");
        if !outcome(name, &out) {
            *misses.entry(name).or_insert(0) += 1;
        }
    }
    for (name, _) in RUNS {
        assert_eq!(
            misses.get(name),
            Some(&1),
            "{name} compiled once: {misses:?}"
        );
    }
    let all = files(&cache);
    assert!(
        all.iter()
            .all(|p| !p.file_name().unwrap().to_string_lossy().starts_with(".tmp")),
        "temporary files left: {all:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Truncated, bit-flipped and emptied entries (the shared object and the kept source alike):
/// the next run warns, compiles again and passes; the run after it is a clean cache hit.
#[test]
fn damaged_entries_are_rebuilt_with_a_warning() {
    let dir = fresh_dir("damaged");
    let cache = dir.join("cache");
    let (name, args) = RUNS[0];
    let run = || command(name, args, &cache).output().expect("runs");
    assert!(!outcome("fill", &run()));
    let damages: [Damage; 3] = [
        ("truncated", |b| {
            let n = b.len() / 2;
            b.truncate(n)
        }),
        ("bit-flipped", |b| {
            let n = b.len() / 3;
            b[n] ^= 0x40
        }),
        ("emptied", |b| b.clear()),
    ];
    for (what, damage) in damages {
        let entries: Vec<PathBuf> = files(&cache)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "so"))
            .collect();
        assert_eq!(entries.len(), 1, "{entries:?}");
        let mut bytes = std::fs::read(&entries[0]).expect("entry");
        damage(&mut bytes);
        std::fs::write(&entries[0], &bytes).expect("damage");
        let out = run();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!outcome(what, &out), "{what}: a damaged entry is a miss");
        assert!(
            stderr.contains("warning") && stderr.contains("damaged"),
            "{what}: {stderr}"
        );
        let out = run();
        assert!(outcome(what, &out), "{what}: rebuilt, then a hit");
        assert!(out.stderr.is_empty(), "{what}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A `TILELANG_CACHE_DIR` that names a file, a directory that cannot be made (under a file,
/// under /proc), and a read-only directory: the run passes, compiling without caching, and
/// says so in exactly one warning, however many entries it writes.
#[test]
fn unusable_cache_dirs_fall_back_with_one_warning() {
    let dir = fresh_dir("unusable");
    let file = dir.join("a-file");
    std::fs::write(&file, "not a cache").expect("file");
    let read_only = dir.join("read-only");
    std::fs::create_dir_all(&read_only).expect("dir");
    let mut perms = std::fs::metadata(&read_only).expect("meta").permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&read_only, perms).expect("chmod");
    // Root writes into a mode-555 directory anyway; /proc refuses even root.
    let read_only = if std::fs::write(read_only.join("probe"), "x").is_ok() {
        PathBuf::from("/proc")
    } else {
        read_only
    };
    for cache in [
        file.clone(),
        file.join("sub"),
        PathBuf::from("/proc/tilelang-cache"),
        read_only.clone(),
    ] {
        for round in 0..2 {
            for (name, args) in RUNS {
                let out = command(name, args, &cache).output().expect("runs");
                let what = format!("{name} with cache {}", cache.display());
                assert!(!outcome(&what, &out), "{what}: nothing is cached");
                let stderr = String::from_utf8_lossy(&out.stderr).to_string();
                assert_eq!(
                    stderr.matches("warning").count(),
                    1,
                    "{what} (round {round}): {stderr}"
                );
                assert!(
                    stderr.contains("compiling without caching")
                        && stderr.contains(&cache.display().to_string()),
                    "{what}: {stderr}"
                );
            }
        }
    }
    assert_eq!(
        std::fs::read_to_string(&file).expect("file"),
        "not a cache",
        "the file is untouched"
    );
    let mut perms = std::fs::metadata(dir.join("read-only"))
        .expect("meta")
        .permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    let _ = std::fs::set_permissions(dir.join("read-only"), perms);
    let _ = std::fs::remove_dir_all(dir);
}
