//! Code objects on a HIP device: loading, launching, timing with events.

use std::ffi::CString;

use super::ffi::{EventHandle, FunctionHandle, ModuleHandle};
use super::HipDevice;
use crate::cuda::ResourceUsage;
use crate::error::{Result, RuntimeError};
use crate::exec::ParamBlock;

/// A loaded kernel: its module (unloaded on drop) and function.
pub struct HipKernel {
    dev: &'static HipDevice,
    module: ModuleHandle,
    func: FunctionHandle,
    name: String,
    /// What the compiler reported (registers, spills, scratch, LDS), when it reported it.
    usage: Option<ResourceUsage>,
}

impl Drop for HipKernel {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            let _ = self.dev.hip().module_unload(&self.module);
        }
    }
}

impl HipKernel {
    /// Load `code_object` (an AMDGPU ELF) on `dev` and find `entry` in it.
    pub(crate) fn load(
        dev: &'static HipDevice,
        code_object: &[u8],
        entry: &str,
        kernel: &str,
    ) -> Result<HipKernel> {
        let cname = CString::new(entry).map_err(|_| {
            RuntimeError::Launch(format!(
                "kernel `{kernel}`: entry name `{entry}` contains a NUL byte"
            ))
        })?;
        dev.bind()?;
        let hip = dev.hip();
        let module = hip.module_load_data(code_object).map_err(|c| {
            dev.err(
                format!(
                    "loading the code object of kernel `{kernel}` on hip:{} ({}, {})",
                    dev.ordinal(),
                    dev.props().name,
                    dev.props().gcn_arch_name
                ),
                c,
            )
        })?;
        let func = match hip.module_get_function(&module, &cname) {
            Ok(f) => f,
            Err(c) => {
                let _ = hip.module_unload(&module);
                return Err(dev.err(
                    format!("finding `{entry}` in the code object of kernel `{kernel}` (is it `extern \"C\" __global__`?)"),
                    c,
                ));
            }
        };
        Ok(HipKernel {
            dev,
            module,
            func,
            name: kernel.to_string(),
            usage: None,
        })
    }

    /// The kernel with the compiler's resource report attached.
    pub(crate) fn with_usage(mut self, usage: Option<ResourceUsage>) -> HipKernel {
        self.usage = usage;
        self
    }

    /// Registers, spills, scratch and LDS as the compiler reported them (from clang's
    /// assembly, kept in the disk cache beside the code object), when it reported them.
    pub fn usage(&self) -> Option<&ResourceUsage> {
        self.usage.as_ref()
    }

    pub fn device(&self) -> &'static HipDevice {
        self.dev
    }
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Check the launch shape against the device's limits. HIP also requires each grid
    /// dimension times the block's extent in it to fit in 32 bits (it launches by total
    /// work-items).
    pub(crate) fn check_shape(&self, grid: [i64; 3], threads: u32) -> Result<()> {
        check_launch_shape(
            &self.name,
            grid,
            threads,
            self.dev.props().max_threads_per_block,
            self.dev.props().max_grid,
        )
    }

    /// Queue one launch on the null stream: grid from the signature, block `(threads, 1, 1)`,
    /// no dynamic LDS. A zero-size grid is a no-op.
    pub(crate) fn launch(
        &self,
        params: &mut ParamBlock,
        grid: [i64; 3],
        threads: u32,
    ) -> Result<()> {
        self.launch_on(params, grid, threads, crate::external::Stream::Runtime)
    }

    /// [`launch`](Self::launch) on `stream`: the runtime's (the null stream) or a caller's
    /// `hipStream_t` of this device.
    pub(crate) fn launch_on(
        &self,
        params: &mut ParamBlock,
        grid: [i64; 3],
        threads: u32,
        stream: crate::external::Stream,
    ) -> Result<()> {
        let raw = match stream {
            crate::external::Stream::Runtime => std::ptr::null_mut(),
            crate::external::Stream::Raw(s) => s as *mut std::ffi::c_void,
        };
        self.check_shape(grid, threads)?;
        if grid.contains(&0) {
            return Ok(());
        }
        self.dev.bind()?;
        let mut ptrs = params.pointers();
        self.dev.note_launch(&self.name);
        self.dev
            .hip()
            .launch(
                &self.func,
                [grid[0] as u32, grid[1] as u32, grid[2] as u32],
                [threads, 1, 1],
                raw,
                &mut ptrs,
            )
            .map_err(|c| {
                self.dev.err(
                    format!(
                        "launching kernel `{}` on hip:{} (grid {:?}, {} threads)",
                        self.name,
                        self.dev.ordinal(),
                        grid,
                        threads
                    ),
                    c,
                )
            })?;
        if super::sync_launches() {
            self.dev.synchronize()?;
        }
        Ok(())
    }

    /// Time `reps` windows of `back_to_back` launches each with HIP events after `warmup`
    /// untimed launches, optionally evicting L2 and the Infinity Cache before each window
    /// (outside the timed region); each sample is the window's time over `back_to_back`.
    #[allow(clippy::too_many_arguments)] // one per BenchConfig field, and the launch's own
    pub(crate) fn bench(
        &self,
        params: &mut ParamBlock,
        grid: [i64; 3],
        threads: u32,
        warmup: usize,
        reps: usize,
        flush: bool,
        back_to_back: usize,
    ) -> Result<Vec<f64>> {
        let reps = reps.max(1);
        let window = back_to_back.max(1);
        for _ in 0..warmup {
            self.launch(params, grid, threads)?;
        }
        self.dev.synchronize()?;
        let mut events = Vec::with_capacity(2 * reps);
        for _ in 0..2 * reps {
            events.push(Event::new(self.dev)?);
        }
        for r in 0..reps {
            if flush {
                self.dev.flush_caches()?;
            }
            events[2 * r].record()?;
            for _ in 0..window {
                self.launch(params, grid, threads)?;
            }
            events[2 * r + 1].record()?;
        }
        if let Some(last) = events.last() {
            last.synchronize()?;
        }
        self.dev.synchronize()?;
        (0..reps)
            .map(|r| {
                events[2 * r]
                    .elapsed_ms(&events[2 * r + 1])
                    .map(|ms| ms / window as f64)
            })
            .collect()
    }
}

/// Grid and block limits: `max_grid` per dimension (from the device), at most
/// `min(max_threads, 1024)` threads, and grid × block within 32 bits in every dimension.
pub fn check_launch_shape(
    kernel: &str,
    grid: [i64; 3],
    threads: u32,
    max_threads: u32,
    max_grid: [u32; 3],
) -> Result<()> {
    let block = [threads as i64, 1, 1];
    for d in 0..3 {
        let (g, lim) = (grid[d], max_grid[d].max(1) as i64);
        let axis = ["x", "y", "z"][d];
        if g < 0 || g > lim {
            return Err(RuntimeError::Launch(format!(
                "kernel `{kernel}`: grid dimension {axis} is {g}, outside 0..={lim} (this HIP device's limit); launch fewer, larger blocks"
            )));
        }
        if g * block[d] > u32::MAX as i64 {
            return Err(RuntimeError::Launch(format!(
                "kernel `{kernel}`: grid dimension {axis} of {g} blocks × {} threads is past the 2^32 work-items HIP launches in one dimension",
                block[d]
            )));
        }
    }
    let max = max_threads.clamp(1, 1024);
    if threads == 0 || threads > max {
        return Err(RuntimeError::Launch(format!(
            "kernel `{kernel}`: {threads} threads per block, but this HIP device runs at most {max}"
        )));
    }
    Ok(())
}

/// A timing event on the null stream of a device, destroyed on drop.
struct Event {
    ev: EventHandle,
    dev: &'static HipDevice,
}

impl Event {
    fn new(dev: &'static HipDevice) -> Result<Event> {
        dev.bind()?;
        let ev = dev
            .hip()
            .event_create()
            .map_err(|c| dev.err("hipEventCreate", c))?;
        Ok(Event { ev, dev })
    }
    fn record(&self) -> Result<()> {
        self.dev.bind()?;
        self.dev
            .hip()
            .event_record(&self.ev)
            .map_err(|c| self.dev.err("hipEventRecord", c))
    }
    fn synchronize(&self) -> Result<()> {
        self.dev
            .hip()
            .event_synchronize(&self.ev)
            .map_err(|c| self.dev.err("hipEventSynchronize", c))
    }
    fn elapsed_ms(&self, end: &Event) -> Result<f64> {
        self.dev
            .hip()
            .event_elapsed_ms(&self.ev, &end.ev)
            .map(|v| v as f64)
            .map_err(|c| self.dev.err("hipEventElapsedTime", c))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            let _ = self.dev.hip().event_destroy(&self.ev);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_shape_limits() {
        let g = [i32::MAX as u32, 65536, 65536];
        assert!(check_launch_shape("k", [1, 1, 1], 256, 1024, g).is_ok());
        assert!(check_launch_shape("k", [0, 1, 1], 256, 1024, g).is_ok());
        let e = check_launch_shape("k", [1, 70000, 1], 256, 1024, g)
            .unwrap_err()
            .to_string();
        assert!(e.contains("grid dimension y") && e.contains("`k`"), "{e}");
        // 2^24 blocks of 256 threads are 2^32 work-items: one too many.
        let e = check_launch_shape("k", [1 << 24, 1, 1], 256, 1024, g)
            .unwrap_err()
            .to_string();
        assert!(e.contains("2^32"), "{e}");
        assert!(check_launch_shape("k", [(1 << 24) - 1, 1, 1], 256, 1024, g).is_ok());
        assert!(check_launch_shape("k", [1, 1, 1], 0, 1024, g).is_err());
        assert!(check_launch_shape("k", [1, 1, 1], 2048, 4096, g).is_err());
    }
}
