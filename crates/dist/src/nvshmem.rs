//! The symmetric heap allocated by NVSHMEM (`TILELANG_DIST_IPC=nvshmem`): NVSHMEM's host
//! library (`libnvshmem_host.so.3`, loaded at run time from the installation `tl_nvrtc`
//! finds) is initialised by a unique id that rank 0 makes and the rendezvous hands to every
//! rank, the heap is one `nvshmem_malloc`, and each peer's copy is where `nvshmem_ptr` says.
//!
//! Two kinds of kernels run on it: those built with peer tables (addresses from
//! `nvshmem_ptr`: peers NVLink or PCIe reaches), and those built with
//! `Kernel::with_nvshmem`, whose peer accesses are NVSHMEM calls — the route to ranks on
//! other hosts. Their modules are initialised as they load (`nvshmemx_cumodule_init`, through
//! the runtime's module hook, which this mapping sets while it lives).
//!
//! Environment, set where unset: `NVSHMEM_DISABLE_NVLS=1` (NVLink multicast stays off),
//! `NVSHMEM_SYMMETRIC_SIZE` (room for the heap asked for), and on one host
//! `NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo`.

use std::ffi::{c_int, c_uint, c_void};

use cudarc::driver::sys;

use crate::error::{DistError, Result};
use crate::rendezvous::Rendezvous;

/// `nvshmemx_uniqueid_t` (v1): 128 bytes, the version first.
type UniqueId = [u8; 128];
/// `nvshmemx_init_attr_t` (v1, NVSHMEM 3.x): 144 bytes.
type InitAttr = [u8; 144];
/// `NVSHMEMX_INIT_WITH_UNIQUEID`.
const INIT_WITH_UNIQUEID: c_uint = 1 << 3;

/// NVSHMEM's host functions this crate calls.
struct Host {
    get_uniqueid: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    set_attr_uniqueid_args:
        unsafe extern "C" fn(c_int, c_int, *const UniqueId, *mut InitAttr) -> c_int,
    hostlib_init_attr: unsafe extern "C" fn(c_uint, *mut InitAttr) -> c_int,
    hostlib_finalize: unsafe extern "C" fn(),
    malloc: unsafe extern "C" fn(usize) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void),
    ptr: unsafe extern "C" fn(*const c_void, c_int) -> *mut c_void,
    my_pe: unsafe extern "C" fn() -> c_int,
    n_pes: unsafe extern "C" fn() -> c_int,
    cumodule_init: unsafe extern "C" fn(sys::CUmodule) -> c_int,
    _lib: libloading::Library,
}

/// NVSHMEM's host library, loaded once per process.
fn host(me: usize) -> Result<&'static Host> {
    static HOST: std::sync::OnceLock<std::result::Result<Host, String>> =
        std::sync::OnceLock::new();
    HOST.get_or_init(load_host)
        .as_ref()
        .map_err(|why| DistError::Driver {
            me,
            op: "loading NVSHMEM's host library".into(),
            detail: why.clone(),
        })
}

fn load_host() -> std::result::Result<Host, String> {
    let home = tl_nvrtc::nvshmem::discover_home().map_err(|e| e.to_string())?;
    let path = home.host_library();
    // SAFETY: loading NVSHMEM's host library runs its initialisers, which only set up
    // NVSHMEM's own state.
    let lib = unsafe { libloading::Library::new(&path) }
        .map_err(|e| format!("{}: {e}", path.display()))?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the symbol is NVSHMEM's C function of this signature (nvshmemx_api.h,
            // nvshmem_api.h of NVSHMEM 3).
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("{} has no `{}`: {e}", path.display(), $name))?
        };
    }
    Ok(Host {
        get_uniqueid: sym!("nvshmemx_get_uniqueid"),
        set_attr_uniqueid_args: sym!("nvshmemx_set_attr_uniqueid_args"),
        hostlib_init_attr: sym!("nvshmemx_hostlib_init_attr"),
        hostlib_finalize: sym!("nvshmemx_hostlib_finalize"),
        malloc: sym!("nvshmem_malloc"),
        free: sym!("nvshmem_free"),
        ptr: sym!("nvshmem_ptr"),
        my_pe: sym!("nvshmem_my_pe"),
        n_pes: sym!("nvshmem_n_pes"),
        cumodule_init: sym!("nvshmemx_cumodule_init"),
        _lib: lib,
    })
}

/// Set `name` to `value` where the user has not set it.
fn default_env(name: &str, value: &str) {
    if std::env::var_os(name).is_none() {
        std::env::set_var(name, value);
    }
}

/// Whether `NVSHMEM_SYMMETRIC_SIZE` is ours (sized for the last heap), not the user's.
static SIZE_IS_OURS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// NVSHMEM's environment for a heap of `stride` bytes, where the user has not set it:
/// NVLink multicast off, room for the heap, and the loopback interface on one host.
fn set_environment(stride: u64) {
    use std::sync::atomic::Ordering::SeqCst;
    default_env("NVSHMEM_DISABLE_NVLS", "1");
    let size = "NVSHMEM_SYMMETRIC_SIZE";
    if std::env::var_os(size).is_none() || SIZE_IS_OURS.load(SeqCst) {
        std::env::set_var(size, (stride + stride / 8 + (64 << 20)).to_string());
        SIZE_IS_OURS.store(true, SeqCst);
    }
    let master = std::env::var("MASTER_ADDR").unwrap_or_default();
    if matches!(master.as_str(), "" | "127.0.0.1" | "localhost" | "::1") {
        default_env("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo");
    }
}

/// `nvshmemx_init_attr_t` with the versions `NVSHMEMX_INIT_ATTR_INITIALIZER` sets: the
/// attribute's (offset 0), its `args`' (offset 16) and their `uid_args`' (offset 24).
fn init_attr() -> InitAttr {
    let mut a = [0u8; 144];
    for (at, size) in [(0usize, 144u32), (16, 128), (24, 24)] {
        a[at..at + 4].copy_from_slice(&((1u32 << 16) + size).to_le_bytes());
    }
    a
}

/// Whether this process has an NVSHMEM heap: NVSHMEM is initialised once per process, and the
/// module hook serves one heap.
static ALIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Every rank's heap, as NVSHMEM mapped it.
pub(crate) struct NvshmemMapping {
    host: &'static Host,
    heap: *mut c_void,
    /// Where each rank's heap lies in this process; 0 where no load or store reaches it.
    bases: Vec<u64>,
}

// SAFETY: the heap pointer is a device address NVSHMEM owns; it is only passed back to
// NVSHMEM (free) and never dereferenced on the host.
unsafe impl Send for NvshmemMapping {}
// SAFETY: as above.
unsafe impl Sync for NvshmemMapping {}

impl NvshmemMapping {
    /// Initialise NVSHMEM across the job and allocate `stride` bytes of its symmetric heap
    /// (collective; the caller made the heap's context current).
    pub(crate) fn new(rv: &Rendezvous, stride: u64) -> Result<Self> {
        use std::sync::atomic::Ordering::SeqCst;
        let me = rv.rank();
        // Every rank reaches the exchange of the unique id, ready or not: a rank that cannot
        // take part then fails every rank by name, instead of leaving the others waiting in
        // NVSHMEM's bootstrap.
        let mut holds = false;
        let ready = (|| -> std::result::Result<(&'static Host, UniqueId), String> {
            let host = host(me).map_err(|e| e.to_string())?;
            if ALIVE.swap(true, SeqCst) {
                return Err("this process already has an NVSHMEM heap (NVSHMEM is initialised once per process): carve every buffer from that one, or drop it first".into());
            }
            holds = true;
            set_environment(stride);
            let mut uid: UniqueId = [0; 128];
            uid[..4].copy_from_slice(&((1u32 << 16) + 128).to_le_bytes());
            if me == 0 {
                // SAFETY: a valid out-pointer of the type's size.
                let rc = unsafe { (host.get_uniqueid)(&mut uid) };
                if rc != 0 {
                    return Err(format!("nvshmemx_get_uniqueid returned {rc}"));
                }
            }
            Ok((host, uid))
        })();
        let release = |holds: bool| {
            if holds {
                ALIVE.store(false, SeqCst);
            }
        };
        let mine: Vec<u8> = match &ready {
            Ok((_, uid)) => std::iter::once(1).chain(uid.iter().copied()).collect(),
            Err(why) => std::iter::once(0).chain(why.bytes()).collect(),
        };
        let all = rv.all_gather(&mine).inspect_err(|_| release(holds))?;
        if let Some((r, m)) = all.iter().enumerate().find(|(_, m)| m.first() != Some(&1)) {
            release(holds);
            return Err(DistError::Driver {
                me,
                op: format!("setting up NVSHMEM on rank {r}"),
                detail: String::from_utf8_lossy(m.get(1..).unwrap_or_default()).into_owned(),
            });
        }
        let (Ok((host, _)), Ok(uid)) = (ready, UniqueId::try_from(&all[0][1..])) else {
            release(holds);
            return Err(DistError::Protocol {
                me,
                detail: format!(
                    "rank 0 sent a {}-byte NVSHMEM unique id (128 expected)",
                    all[0].len().saturating_sub(1)
                ),
            });
        };
        Self::init(rv, stride, host, uid).inspect_err(|_| release(holds))
    }

    /// Initialise NVSHMEM from rank 0's `uid` and allocate the heap; NVSHMEM is finalised
    /// again on any failure after its initialisation.
    fn init(rv: &Rendezvous, stride: u64, host: &'static Host, uid: UniqueId) -> Result<Self> {
        let me = rv.rank();
        let fail = |op: &str, detail: String| DistError::Driver {
            me,
            op: op.into(),
            detail,
        };
        let mut attr = init_attr();
        // SAFETY: pointers to live values of NVSHMEM's types (sizes checked by the types).
        let rc = unsafe {
            (host.set_attr_uniqueid_args)(me as c_int, rv.world() as c_int, &uid, &mut attr)
        };
        if rc != 0 {
            return Err(fail(
                "nvshmemx_set_attr_uniqueid_args",
                format!("returned {rc}"),
            ));
        }
        // SAFETY: as above; NVSHMEM keeps no pointer into `attr` past the call.
        let rc = unsafe { (host.hostlib_init_attr)(INIT_WITH_UNIQUEID, &mut attr) };
        if rc != 0 {
            return Err(fail(
                "initialising NVSHMEM (nvshmemx_hostlib_init_attr)",
                format!("returned {rc}; NVSHMEM_DEBUG=INFO says why"),
            ));
        }
        // From here NVSHMEM is up: a failure finalises it again.
        let finalize = || {
            // SAFETY: NVSHMEM was initialised just above and nothing of it is kept.
            unsafe { (host.hostlib_finalize)() }
        };
        // SAFETY: NVSHMEM is initialised.
        let (pe, pes) = unsafe { ((host.my_pe)(), (host.n_pes)()) };
        if pe != me as c_int || pes != rv.world() as c_int {
            finalize();
            return Err(fail(
                "initialising NVSHMEM",
                format!(
                    "it made this rank PE {pe} of {pes}, not {me} of {}",
                    rv.world()
                ),
            ));
        }
        // SAFETY: collective allocation, every rank asks for the same size (agreed before).
        let heap = unsafe { (host.malloc)(stride as usize) };
        if heap.is_null() {
            finalize();
            return Err(fail(
                "nvshmem_malloc of the symmetric heap",
                format!("no {stride} bytes: raise NVSHMEM_SYMMETRIC_SIZE"),
            ));
        }
        let bases = (0..rv.world())
            // SAFETY: `heap` is a symmetric address; NVSHMEM returns null for peers that no
            // load or store reaches.
            .map(|r| unsafe { (host.ptr)(heap, r as c_int) } as u64)
            .collect();
        tl_runtime::cuda::set_nvshmem_module_init(Some(Box::new(move |m| {
            // SAFETY: a module just loaded in the current context, linked with NVSHMEM's
            // device archive.
            match unsafe { (host.cumodule_init)(m) } {
                0 => Ok(()),
                rc => Err(format!("nvshmemx_cumodule_init returned {rc} (is the kernel linked with the NVSHMEM this process loaded?)")),
            }
        })));
        Ok(NvshmemMapping { host, heap, bases })
    }

    /// Where rank `rank`'s heap starts in this process (0: no load or store reaches it; only
    /// kernels built with `with_nvshmem` reach that rank).
    pub(crate) fn base(&self, rank: usize) -> u64 {
        self.bases[rank]
    }
}

impl Drop for NvshmemMapping {
    fn drop(&mut self) {
        tl_runtime::cuda::set_nvshmem_module_init(None);
        // SAFETY: the heap `new` allocated, freed once (every rank drops its heap alike);
        // then NVSHMEM is finalised, once per initialisation.
        unsafe {
            (self.host.free)(self.heap);
            (self.host.hostlib_finalize)();
        }
        ALIVE.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_init_attribute_carries_nvshmem_3_versions() {
        let a = init_attr();
        let word = |at: usize| u32::from_le_bytes([a[at], a[at + 1], a[at + 2], a[at + 3]]);
        assert_eq!(word(0), (1 << 16) + 144);
        assert_eq!(word(16), (1 << 16) + 128);
        assert_eq!(word(24), (1 << 16) + 24);
    }
}
