//! The disk cache of compiled kernels: content-addressed files, written atomically (a temp
//! file renamed into place) so concurrent compiles of the same kernel never see a torn file.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Result, RuntimeError};

#[derive(Clone, Debug)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// `TILELANG_CACHE_DIR`, else `<user cache dir>/tilelang`, else a temp directory.
    pub fn from_env() -> Cache {
        let dir = std::env::var_os("TILELANG_CACHE_DIR")
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

    pub fn path(&self, key: &str, ext: &str) -> PathBuf {
        let (a, b) = key.split_at(2.min(key.len()));
        self.dir.join(a).join(format!("{b}.{ext}"))
    }

    /// The cached file for `key`, if there is one.
    pub fn get(&self, key: &str, ext: &str) -> Option<PathBuf> {
        let p = self.path(key, ext);
        p.is_file().then_some(p)
    }

    /// Produce the file for `key` with `write` (given a temporary path to write), then move it
    /// into place.
    pub fn put(
        &self,
        key: &str,
        ext: &str,
        write: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<PathBuf> {
        let dest = self.path(key, ext);
        let parent = dest.parent().unwrap_or(&self.dir).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(|e| RuntimeError::Cache {
            path: parent.clone(),
            reason: e.to_string(),
        })?;
        let tmp = parent.join(format!(
            ".tmp-{}-{:?}-{}.{ext}",
            std::process::id(),
            std::thread::current().id(),
            key
        ));
        let result = write(&tmp);
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, &dest).map_err(|e| RuntimeError::Cache {
            path: dest.clone(),
            reason: e.to_string(),
        })?;
        Ok(dest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_separate_parts() {
        assert_ne!(Cache::key(&["ab", "c"]), Cache::key(&["a", "bc"]));
        assert_eq!(Cache::key(&["x"]).len(), 64);
    }

    #[test]
    fn put_then_get() {
        let dir = std::env::temp_dir().join(format!("tl-cache-test-{}", std::process::id()));
        let c = Cache::at(&dir);
        let k = Cache::key(&["hello"]);
        assert!(c.get(&k, "txt").is_none());
        let p = c
            .put(&k, "txt", |tmp| {
                std::fs::write(tmp, "x").map_err(|e| RuntimeError::Launch(e.to_string()))
            })
            .unwrap();
        assert_eq!(c.get(&k, "txt"), Some(p));
        let _ = std::fs::remove_dir_all(dir);
    }
}
