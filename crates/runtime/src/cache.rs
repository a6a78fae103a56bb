//! The disk cache of compiled kernels: content-addressed files, safe under many processes.
//!
//! - Every entry is written to a temporary file of its own (named by process, thread and a
//!   counter) and renamed into place, so no reader ever sees a partial file.
//! - Every entry ends with a 40-byte trailer, `tlcache1` and the SHA-256 of what precedes it.
//!   [`Cache::read`] and [`Cache::get`] check it: a truncated or corrupted entry (or one written
//!   by a version without trailers) is reported with a warning on stderr, removed, and treated
//!   as a miss, so the caller rebuilds it. Shared objects keep the trailer (the loader ignores
//!   bytes past the ELF segments); bytes handed to a driver are read through [`Cache::read`],
//!   which strips it.
//! - [`Cache::lock`] takes an exclusive advisory lock per entry (released when the process
//!   ends, however it ends): the builders lock, look again and compile only if the entry is
//!   still missing, so processes that race on an empty cache compile each kernel once.
//! - A cache directory that cannot be written (read-only, missing and not creatable, or a
//!   `TILELANG_CACHE_DIR` that names a file) is not an error: entries are written to a
//!   directory of this process under the system temp directory instead, i.e. compiled without
//!   caching, with one warning per directory and process. Entries already in a read-only cache
//!   are still used.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::error::{Result, RuntimeError};

const MAGIC: &[u8; 8] = b"tlcache1";
/// Bytes after the payload: the magic and the SHA-256 of the payload.
pub const TRAILER_LEN: usize = 8 + 32;

#[derive(Clone, Debug)]
pub struct Cache {
    dir: PathBuf,
}

/// Held while an entry is built: an exclusive `flock` on `<entry>.lock`.
#[derive(Debug)]
pub struct EntryLock {
    _file: File,
}

fn trailer(payload: &[u8]) -> [u8; TRAILER_LEN] {
    let mut t = [0u8; TRAILER_LEN];
    t[..8].copy_from_slice(MAGIC);
    t[8..].copy_from_slice(&Sha256::digest(payload));
    t
}

/// The payload of a stored entry, or what is wrong with it.
fn verify(bytes: &[u8]) -> std::result::Result<&[u8], &'static str> {
    if bytes.len() < TRAILER_LEN {
        return Err("shorter than its checksum trailer (truncated)");
    }
    let (payload, t) = bytes.split_at(bytes.len() - TRAILER_LEN);
    if &t[..8] != MAGIC {
        return Err("no checksum trailer (truncated, or written by an older tilelang)");
    }
    if t[8..] != Sha256::digest(payload)[..] {
        return Err("checksum mismatch (corrupted)");
    }
    Ok(payload)
}

/// Warn once per process for `what` (a directory that cannot hold the cache).
fn warn_once(what: &Path, message: String) {
    static WARNED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned
        .get_or_insert_with(HashSet::new)
        .insert(what.to_path_buf())
    {
        eprintln!("{message}");
    }
}

impl Cache {
    /// `TILELANG_CACHE_DIR`, else `<user cache dir>/tilelang`, else a temp directory.
    pub fn from_env() -> Cache {
        let dir = std::env::var_os("TILELANG_CACHE_DIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| dirs::cache_dir().map(|d| d.join("tilelang")))
            .unwrap_or_else(|| std::env::temp_dir().join("tilelang-cache"));
        Cache { dir }
    }

    pub fn at(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A hex SHA-256 of the parts, separated so that ("ab","c") and ("a","bc") differ.
    pub fn key(parts: &[&str]) -> String {
        let mut h = Sha256::new();
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p.as_bytes());
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Where the entry for `key` lives in the cache directory (whether or not it is there).
    pub fn path(&self, key: &str, ext: &str) -> PathBuf {
        Self::path_in(&self.dir, key, ext)
    }

    fn path_in(dir: &Path, key: &str, ext: &str) -> PathBuf {
        let (a, b) = key.split_at(2.min(key.len()));
        dir.join(a).join(format!("{b}.{ext}"))
    }

    /// Where entries go when the cache directory cannot be written: a directory of this
    /// process, so nothing is shared with (or read back by) another run.
    fn scratch_dir() -> PathBuf {
        std::env::temp_dir().join(format!("tilelang-uncached-{}", std::process::id()))
    }

    /// Remove the scratch directories of processes that have ended (Linux: by `/proc/<pid>`).
    fn remove_dead_scratch_dirs() {
        if !cfg!(target_os = "linux") || !Path::new("/proc/self").exists() {
            return;
        }
        let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("tilelang-uncached-"))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    /// The stored payload for `key`, checked against its checksum. A damaged entry is
    /// removed with a warning and reads as missing.
    pub fn read(&self, key: &str, ext: &str) -> Option<Vec<u8>> {
        let p = self.path(key, ext);
        let mut bytes = std::fs::read(&p).ok()?;
        match verify(&bytes) {
            Ok(payload) => {
                let n = payload.len();
                bytes.truncate(n);
                Some(bytes)
            }
            Err(why) => {
                self.discard(&p, why);
                None
            }
        }
    }

    /// The stored payload for `key` as UTF-8 text (see [`Cache::read`]).
    pub fn read_string(&self, key: &str, ext: &str) -> Option<String> {
        String::from_utf8(self.read(key, ext)?).ok()
    }

    /// The path of the entry for `key` once its checksum is checked (for files used in place,
    /// like shared objects; the file still ends with the trailer). A damaged entry is removed
    /// with a warning and reads as missing.
    pub fn get(&self, key: &str, ext: &str) -> Option<PathBuf> {
        let p = self.path(key, ext);
        let bytes = std::fs::read(&p).ok()?;
        match verify(&bytes) {
            Ok(_) => Some(p),
            Err(why) => {
                self.discard(&p, why);
                None
            }
        }
    }

    fn discard(&self, p: &Path, why: &str) {
        eprintln!(
            "tilelang: warning: kernel cache entry {} is damaged: {why}; removing it and compiling again",
            p.display()
        );
        let _ = std::fs::remove_file(p);
    }

    /// Lock the entry for `key` against other builders (blocking while another process or
    /// thread holds it). `None` where no lock file can be made (a cache that cannot be
    /// written): then each builder compiles on its own, which is still correct.
    pub fn lock(&self, key: &str, ext: &str) -> Option<EntryLock> {
        let p = self.path(key, &format!("{ext}.lock"));
        std::fs::create_dir_all(p.parent()?).ok()?;
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .ok()?;
        f.lock().ok()?;
        Some(EntryLock { _file: f })
    }

    /// A fresh temporary file beside `dest` (made, empty, to prove the directory writable).
    fn temp_beside(dest: &Path, ext: &str) -> std::io::Result<PathBuf> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let parent = dest
            .parent()
            .ok_or_else(|| std::io::Error::other("entry without a directory"))?;
        std::fs::create_dir_all(parent)?;
        let name = dest
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = parent.join(format!(
            ".tmp-{}-{:?}-{}-{name}.{ext}",
            std::process::id(),
            std::thread::current().id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        Ok(tmp)
    }

    /// Produce the file for `key` with `write` (given a temporary path to write, in the same
    /// directory as the entry), append the checksum trailer, then rename it into place. Where
    /// the cache directory cannot be written, the entry goes to this process's scratch
    /// directory instead (one warning); the returned path is where it is.
    pub fn put(
        &self,
        key: &str,
        ext: &str,
        write: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<PathBuf> {
        let mut dest = self.path(key, ext);
        let tmp = match Self::temp_beside(&dest, ext) {
            Ok(t) => t,
            Err(e) => {
                warn_once(
                    &self.dir,
                    format!(
                        "tilelang: warning: kernel cache directory {} cannot be written ({e}); \
                         compiling without caching (set TILELANG_CACHE_DIR to a writable directory)",
                        self.dir.display()
                    ),
                );
                Self::remove_dead_scratch_dirs();
                dest = Self::path_in(&Self::scratch_dir(), key, ext);
                Self::temp_beside(&dest, ext).map_err(|e| RuntimeError::Cache {
                    path: dest.clone(),
                    reason: e.to_string(),
                })?
            }
        };
        let io = |e: std::io::Error| RuntimeError::Cache {
            path: tmp.clone(),
            reason: e.to_string(),
        };
        let finish = || -> Result<()> {
            write(&tmp)?;
            let payload = std::fs::read(&tmp).map_err(io)?;
            let mut f = OpenOptions::new().append(true).open(&tmp).map_err(io)?;
            f.write_all(&trailer(&payload)).map_err(io)?;
            f.sync_data().map_err(io)?;
            drop(f);
            std::fs::rename(&tmp, &dest).map_err(|e| RuntimeError::Cache {
                path: dest.clone(),
                reason: e.to_string(),
            })
        };
        if let Err(e) = finish() {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(dest)
    }

    /// [`Cache::put`] of bytes already in memory.
    pub fn put_bytes(&self, key: &str, ext: &str, bytes: &[u8]) -> Result<PathBuf> {
        self.put(key, ext, |tmp| {
            std::fs::write(tmp, bytes).map_err(|e| RuntimeError::Cache {
                path: tmp.to_path_buf(),
                reason: e.to_string(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is done to an entry, and how.
    type Damage = (&'static str, fn(&mut Vec<u8>));

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tl-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn keys_separate_parts() {
        assert_ne!(Cache::key(&["ab", "c"]), Cache::key(&["a", "bc"]));
        assert_eq!(Cache::key(&["x"]).len(), 64);
    }

    #[test]
    fn put_then_get() {
        let dir = temp("put");
        let c = Cache::at(&dir);
        let k = Cache::key(&["hello"]);
        assert!(c.get(&k, "txt").is_none());
        let p = c
            .put(&k, "txt", |tmp| {
                std::fs::write(tmp, "x").map_err(|e| RuntimeError::Launch(e.to_string()))
            })
            .unwrap();
        assert_eq!(c.get(&k, "txt"), Some(p.clone()));
        assert_eq!(c.read(&k, "txt").as_deref(), Some(&b"x"[..]));
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 1 + TRAILER_LEN as u64);
        // No temporary file is left behind.
        let left: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Every way of damaging an entry reads as a miss and removes the entry; a rebuild is
    /// then stored and read back.
    #[test]
    fn damaged_entries_are_misses_and_removed() {
        let dir = temp("damaged");
        let c = Cache::at(&dir);
        let k = Cache::key(&["payload"]);
        let payload = b"the compiled kernel".repeat(10);
        let damage: [Damage; 5] = [
            ("truncated in the payload", |b| b.truncate(10)),
            ("truncated in the trailer", |b| {
                let n = b.len();
                b.truncate(n - 5)
            }),
            ("a flipped payload bit", |b| b[3] ^= 0x10),
            ("a flipped checksum bit", |b| {
                let n = b.len();
                b[n - 1] ^= 1
            }),
            ("empty", |b| b.clear()),
        ];
        for (what, f) in damage {
            let p = c.put_bytes(&k, "bin", &payload).unwrap();
            assert_eq!(c.read(&k, "bin").as_deref(), Some(&payload[..]), "{what}");
            let mut bytes = std::fs::read(&p).unwrap();
            f(&mut bytes);
            std::fs::write(&p, &bytes).unwrap();
            assert!(c.read(&k, "bin").is_none(), "{what}");
            assert!(!p.exists(), "{what}: the damaged entry is removed");
            std::fs::write(&p, &bytes).unwrap();
            assert!(c.get(&k, "bin").is_none(), "{what}");
            assert!(!p.exists(), "{what}");
        }
        // An entry of an older version (no trailer) is a miss as well.
        let p = c.path(&k, "bin");
        std::fs::write(&p, &payload).unwrap();
        assert!(c.read(&k, "bin").is_none());
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A cache "directory" that is a file: entries go to the scratch directory, nothing is
    /// read back from the cache, and the file is untouched.
    #[test]
    fn a_file_as_cache_dir_falls_back() {
        let dir = temp("file");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("not-a-dir");
        std::fs::write(&file, "mine").unwrap();
        let c = Cache::at(&file);
        let k = Cache::key(&["f"]);
        let p = c.put_bytes(&k, "bin", b"abc").unwrap();
        assert!(p.starts_with(Cache::scratch_dir()), "{}", p.display());
        assert_eq!(std::fs::read(&p).unwrap().len(), 3 + TRAILER_LEN);
        assert!(c.read(&k, "bin").is_none() && c.get(&k, "bin").is_none());
        assert!(c.lock(&k, "bin").is_none());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
        let _ = std::fs::remove_file(p);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Threads with caches of their own on one directory: each gets the whole entry, and
    /// under the entry lock only the first builds.
    #[test]
    fn threads_build_once_under_the_lock() {
        let dir = temp("threads");
        let builds = std::sync::atomic::AtomicUsize::new(0);
        let k = Cache::key(&["shared"]);
        let payload = vec![7u8; 1 << 16];
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let c = Cache::at(&dir);
                    let got = match c.read(&k, "bin") {
                        Some(b) => b,
                        None => {
                            let _l = c.lock(&k, "bin").expect("lock");
                            match c.read(&k, "bin") {
                                Some(b) => b,
                                None => {
                                    builds.fetch_add(1, Ordering::SeqCst);
                                    std::thread::sleep(std::time::Duration::from_millis(20));
                                    c.put_bytes(&k, "bin", &payload).unwrap();
                                    c.read(&k, "bin").unwrap()
                                }
                            }
                        }
                    };
                    assert_eq!(got, payload);
                });
            }
        });
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        let _ = std::fs::remove_dir_all(dir);
    }
}
