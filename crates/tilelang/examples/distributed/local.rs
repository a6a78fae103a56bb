//! `--local-ranks N`: every rank in this one process (`tl_dist::LocalJob`), rank `r` on GPU
//! `r mod gpus`, each launching on a stream of its own: call 1 checked on every rank, then
//! `--reps` calls queued back to back on every rank (the kernels' entry handshakes order them),
//! the host clock over all of them per call, and the last call checked again.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tilelang::prelude::*;
use tilelang::runtime::external::{ExternalTensor, Stream};

use super::{check, heap_bytes, kernel, plan, rows_to_check, summary, Args, Buf, Measured, Plan};

pub fn run_local(a: &Args, world: usize) -> anyhow::Result<ExitCode> {
    if a.kernel == "all-gather-ce" {
        anyhow::bail!(
            "--kernel all-gather-ce with --local-ranks: the copy engines' all-gather runs one process per rank (torchrun-style, scripts/dist-run.sh)"
        );
    }
    if a.nvshmem {
        anyhow::bail!(
            "--nvshmem with --local-ranks: NVSHMEM runs one process per rank (torchrun-style, scripts/dist-run.sh)"
        );
    }
    let gpus = Device::cuda_count();
    if gpus == 0 {
        anyhow::bail!(
            "--local-ranks {world}: no CUDA device ({}); without a GPU run the simulator: --device sim --ranks {world}",
            Device::cuda_unavailable_reason().unwrap_or_default()
        );
    }
    let ordinals: Vec<usize> = (0..world).map(|r| r % gpus).collect();
    let plans: Vec<Plan> = (0..world)
        .map(|r| plan(a, false, r, world))
        .collect::<anyhow::Result<_>>()?;
    let mut job = tl_dist::LocalJob::new(&ordinals, heap_bytes(&plans[0]))?;
    let mut k = kernel(a, false)?;
    if a.peer_tables {
        k = k.with_peer_tables();
    }
    // One executable per GPU of the job.
    let mut exes: Vec<(usize, Executable)> = vec![];
    for &o in &ordinals {
        if exes.iter().all(|(d, _)| *d != o) {
            let exe = k
                .compile(&Device::Cuda(o))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            exes.push((o, exe));
        }
    }
    // Buffers: each rank's local tensors and its copies of the symmetric ones, carved alike.
    let mut locals: Vec<Vec<Option<Tensor>>> = (0..world).map(|_| vec![]).collect();
    let mut syms: Vec<Vec<Option<(tl_dist::SymmetricBuffer, ExternalTensor)>>> =
        (0..world).map(|_| vec![]).collect();
    for (i, b) in plans[0].bufs.iter().enumerate() {
        let sym = match b {
            Buf::Symmetric { shape, dtype, .. } => {
                let n = shape.iter().product::<usize>();
                Some(job.alloc((n * dtype.bytes()) as u64)?)
            }
            Buf::Local { .. } => None,
        };
        for r in 0..world {
            let dev = Device::Cuda(ordinals[r]);
            match (&plans[r].bufs[i], sym) {
                (Buf::Local { shape, dtype, init }, _) => {
                    locals[r].push(Some(Tensor::from_f64(shape, *dtype, init, &dev)?));
                    syms[r].push(None);
                }
                (Buf::Symmetric { shape, dtype, init }, Some(buf)) => {
                    let heap = job.heap(r);
                    let mut bytes = vec![0u8; init.len() * dtype.bytes()];
                    for (j, v) in init.iter().enumerate() {
                        tilelang::runtime::dtype_io::write(&mut bytes, *dtype, j, *v);
                    }
                    heap.write(buf, &bytes)?;
                    syms[r].push(Some((buf, heap.tensor(buf, *dtype, shape)?)));
                    locals[r].push(None);
                }
                _ => anyhow::bail!("rank {r}'s buffer {i} differs from rank 0's"),
            }
        }
    }
    for &o in &ordinals {
        Device::Cuda(o).synchronize()?;
    }
    let streams: Vec<tl_dist::CopyStream> = (0..world)
        .map(|r| tl_dist::CopyStream::new(job.heap(r)))
        .collect::<tl_dist::Result<_>>()?;
    let args_of = |r: usize, epoch: i64| -> anyhow::Result<Vec<Arg>> {
        let mut args: Vec<Arg> = vec![];
        for (l, s) in locals[r].iter().zip(&syms[r]) {
            match (l, s) {
                (Some(t), _) => args.push(Arg::Tensor(t)),
                (None, Some((_, e))) => args.push(Arg::External(e)),
                _ => anyhow::bail!("a buffer with no memory"),
            }
        }
        if plans[r].epoch {
            args.push(Arg::Int(epoch));
        }
        let heap = job.heap(r);
        args.extend([
            Arg::Int(r as i64),
            Arg::Int(world as i64),
            Arg::Int(heap.stride() as i64),
        ]);
        Ok(args)
    };
    let tables: Vec<Vec<ExternalTensor>> = (0..world)
        .map(|r| -> anyhow::Result<Vec<ExternalTensor>> {
            Ok(if a.peer_tables {
                job.heap(r).peer_tables_for(k.ir(), &args_of(r, 1)?)?
            } else {
                vec![]
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let exe_of = |r: usize| -> anyhow::Result<&Executable> {
        exes.iter()
            .find(|(d, _)| *d == ordinals[r])
            .map(|(_, e)| e)
            .ok_or_else(|| anyhow::anyhow!("no executable for cuda:{}", ordinals[r]))
    };
    // Queue call `epoch` on every rank's stream.
    let call = |epoch: i64| -> anyhow::Result<()> {
        for r in 0..world {
            let args = tl_dist::with_tables(&args_of(r, epoch)?, &tables[r]);
            exe_of(r)?.run_args_on(&args, Stream::Raw(streams[r].handle()))?;
        }
        Ok(())
    };
    // A call still running after the limit waits on a rank that cannot run: say so instead
    // of hanging (exiting, as unwinding would unmap the heap under the running kernels).
    let limit = Duration::from_secs_f64(a.call_timeout.max(0.001));
    let finish = |what: &str, calls: u32| -> anyhow::Result<()> {
        for (r, s) in streams.iter().enumerate() {
            if !s.synchronize_within(limit * calls)? {
                eprintln!(
                    "error: rank {r}: {what} still runs after {:.1} s: its kernel waits for a rank that cannot run beside it — ranks sharing a GPU in one process must fit on it together (fewer or smaller blocks, --local-ranks at most the GPU count, or one process per rank with scripts/dist-run.sh); set --call-timeout to wait longer",
                    a.call_timeout * f64::from(calls)
                );
                std::process::exit(3)
            }
        }
        Ok(())
    };
    let outputs = |who: &str| -> anyhow::Result<f64> {
        let mut err: f64 = 0.0;
        for r in 0..world {
            let p = &plans[r];
            let got = match (&locals[r][p.out], &syms[r][p.out], &p.bufs[p.out]) {
                (Some(t), _, _) => t.to_f64_vec()?,
                (None, Some((buf, _)), Buf::Symmetric { dtype, shape, .. }) => {
                    let bytes = job.heap(r).read(*buf)?;
                    let n = shape.iter().product::<usize>();
                    (0..n)
                        .map(|i| tilelang::runtime::dtype_io::read(&bytes, *dtype, i))
                        .collect()
                }
                _ => anyhow::bail!("no output"),
            };
            err = err.max(check(
                p,
                &got,
                a.check_rows,
                a.tolerance(),
                &format!("rank {r}, {who}"),
            )?);
        }
        Ok(err)
    };
    call(1)?;
    finish("call 1", 1)?;
    let mut err = outputs("call 1")?;
    let reps = a.reps.max(1);
    let t = Instant::now();
    for e in 0..reps {
        call(2 + e as i64)?;
    }
    finish("the timed calls", reps as u32)?;
    let ms = t.elapsed().as_secs_f64() * 1e3 / reps as f64;
    err = err.max(outputs("last call")?);
    let p = &plans[0];
    Ok(summary(
        a,
        world,
        &Measured {
            err,
            ms,
            flops: p.flops,
            bus_bytes: p.bus_bytes,
        },
        &format!(
            "device=cuda local_ranks={world} gpus={} peers={} checked_rows={} back_to_back={reps}",
            ordinals.iter().max().map_or(0, |m| m + 1),
            if a.peer_tables { "tables" } else { "stride" },
            rows_to_check(p.rows, a.check_rows).len()
        ),
    ))
}
