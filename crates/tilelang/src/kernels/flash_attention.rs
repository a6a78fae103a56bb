//! FlashAttention forward: O = softmax(Q Kᵀ · scale) V on [B, H, S, D] tensors, with the
//! log-sum-exp of every row saved (natural log) for a backward pass. One block per `bm` query
//! rows of one (batch, head); K and V stream through in `bn`-row tiles with an online softmax
//! in the exp2 domain. Causal blocks stop at the diagonal.

use crate::prelude::*;
use crate::Backend;

#[derive(Clone, Copy, Debug)]
pub struct AttnConfig {
    pub bm: i64,
    pub bn: i64,
    pub stages: u32,
    pub threads: u32,
    /// The matrix instruction of both gemms, overriding the compiler's choice (`None`: on
    /// sm_90a wgmma where the tiles allow it — Q·Kᵀ from shared tiles, P·V with P from registers
    /// and V MN-major, 64 query rows per 128 threads — else mma.sync; MFMA on AMD).
    pub instruction: Option<GemmInstruction>,
    /// Warp specialization (`TileScope::warp_specialize`): `None` lets the compiler choose.
    pub warp_specialize: Option<bool>,
    /// With warp specialization, the two consumer warpgroups take turns at the tensor cores
    /// (`TileScope::ping_pong`; off by default).
    pub ping_pong: bool,
    /// FlashAttention-3's overlap inside a warpgroup: step `j` issues Q·Kⱼᵀ and then P·V of
    /// step `j − 1` without waiting, so the softmax of step `j` runs while the tensor cores
    /// still multiply P·V; O is rescaled once that product is in (one extra P·V of zeros at
    /// step 0, and V's last tile after the loop). Needs the two gemms to run
    /// asynchronously (wgmma); elsewhere each gemm still completes in turn, correct but with
    /// nothing gained.
    pub overlap_pv: bool,
    /// With [`AttnConfig::overlap_pv`], keep the wait for P·V of step `j − 1` below the
    /// softmax of step `j` (`TileScope::wait_wgmma_pinned`); left alone, ptxas raises it above
    /// the exponentials and they run after the product instead of beside it. On for d128 on
    /// Hopper: non-causal 1.5% faster at 4·16·4096 and 2·32·8192 (ncu at base clocks,
    /// gpu-notes run 31b); causal ran 0–1% slower with it alone (31b, 31c, 39m) but 1.4%
    /// faster with it and the lazy rescale together (39m, 39n).
    pub pin_pv_wait: bool,
    /// A persistent grid on GPUs (`TileScope::persistent`): that many blocks (0: one per
    /// multiprocessor) each loop over query tiles; `None`, one block per query tile. The
    /// default for non-causal d128 on Hopper, whose producer loads the next tile's Q while the
    /// consumers finish this one (`pipeline::preload`): 1.8% faster at 4·16·4096 at base
    /// clocks, level at 2·32·8192 (gpu-notes run 30f, 30g). Off elsewhere: the fixed
    /// round-robin unbalances causal grids (22% slower at 4·16·4096), and one block per SM
    /// halves d64's two resident blocks (gpu-notes run 19j).
    pub persistent: Option<u32>,
    /// Causal, one block a query tile: the grid is dealt heaviest query tile first over a
    /// group of heads at a time (about [`CAUSAL_GROUP_TILES`] tiles a group;
    /// `ops::ranks_in_item_groups`), so the hardware's in-order dispatch ends the grid on the
    /// lightest tiles. `false` deals it head by head (each head heaviest first), which ends on
    /// the last head's heaviest tile: a list schedule of 4·16·4096 (32 tiles a head, 132
    /// blocks at once) then runs 6.8% over the balanced time, against 0.2% grouped.
    pub group_heads: bool,
    /// FlashAttention-4's lazy rescale: a row keeps its running maximum until a new key tile
    /// raises it by more than this many powers of two (the scores' exponentials then reach
    /// at most 2^threshold, harmless in f32 sums and bf16 probabilities), and O is rescaled
    /// only in the steps where some row of the thread moved its maximum. `None` rescales every
    /// step. The result is the same up to rounding: O and the row sums share whichever
    /// maximum the row keeps.
    pub rescale_threshold: Option<f64>,
}

/// About how many query tiles (of several heads) a causal grid deals heaviest first before the
/// next group of heads: near one wave of blocks, so the blocks running at once read the keys of
/// no more heads than dealing head by head does.
pub const CAUSAL_GROUP_TILES: i64 = 128;

/// The lazy rescale's threshold on Hopper's warp-specialized d128 kernel
/// ([`AttnConfig::rescale_threshold`]; FlashAttention-4's 8). On an H200 (gpu-notes run 39):
/// non-causal 1.9–2.0% faster at 4·16·4096 and 1·32·16384, noisier but ahead on average at
/// 2·32·8192; causal 1.4% faster at both sizes together with the pinned wait for P·V
/// ([`AttnConfig::pin_pv_wait`]), which it ran 0.8–1.3% slower without. The d64 kernels,
/// whose rescale sits inside the softmax, ran 0–4% slower with it and keep the rescale every
/// step.
pub const LAZY_RESCALE_THRESHOLD: f64 = 8.0;

/// `default`, or what `TILELANG_ATTN_RESCALE_THRESHOLD` asks: a threshold (a number from 0),
/// or `off` for the rescale every step.
fn lazy_rescale(default: Option<f64>) -> Option<f64> {
    match std::env::var("TILELANG_ATTN_RESCALE_THRESHOLD") {
        Ok(v) if v.trim() == "off" => None,
        Ok(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|t| t.is_finite() && *t >= 0.0)
            .or(default),
        Err(_) => default,
    }
}

impl AttnConfig {
    /// `bm` query rows × `bn` keys per step, on the mma.sync path.
    pub fn tiles(bm: i64, bn: i64, stages: u32, threads: u32) -> AttnConfig {
        AttnConfig {
            bm,
            bn,
            stages,
            threads,
            instruction: None,
            warp_specialize: None,
            ping_pong: false,
            overlap_pv: false,
            pin_pv_wait: false,
            persistent: None,
            group_heads: true,
            rescale_threshold: None,
        }
    }

    /// Tensor-core tiles: 128 query rows over 8 warps (16 rows each), 64-key tiles, 2 stages.
    pub fn gpu() -> AttnConfig {
        AttnConfig::tiles(128, 64, 2, 256)
    }

    /// Hopper (sm_90a, 16-bit inputs): tiles for the warpgroup MMA, 128 query rows over two
    /// warpgroups, 128-key tiles, 2 stages.
    pub fn hopper() -> AttnConfig {
        AttnConfig::tiles(128, 128, 2, 256)
    }

    /// The Hopper tiles for this head dim and masking, measured on an H100 (docs/gpu-notes.md
    /// runs 6c, 6g, 9a, 9c and 18): for d128, FlashAttention-3's arrangement — a producer
    /// warpgroup, 128-key tiles, P·V left running under the next softmax
    /// ([`AttnConfig::overlap_pv`]), persistent when not causal ([`AttnConfig::persistent`])
    /// — which needs the consumers' 232 registers (`setmaxnreg`);
    /// with `TILELANG_WS=0` (no producer warpgroup, so no registers to move) the earlier
    /// choice, 64-key tiles (128-key from CUDA C++ when causal). For d64 no producer
    /// warpgroup (it lost 6–20% there, run 20i): [`AttnConfig::hopper`], and when causal its
    /// tiles in 3 stages.
    pub fn hopper_for(head_dim: i64, causal: bool) -> AttnConfig {
        let cuda_cpp = matches!(Backend::from_env(), Ok(Backend::CudaCpp));
        let no_ws = std::env::var("TILELANG_WS").is_ok_and(|v| v == "0");
        let tiles = match (head_dim, causal) {
            (128, _) if !no_ws => AttnConfig {
                warp_specialize: Some(true),
                overlap_pv: true,
                pin_pv_wait: true,
                persistent: (!causal).then_some(0),
                ..AttnConfig::hopper()
            },
            (128, true) if cuda_cpp => AttnConfig::hopper(),
            (128, _) => AttnConfig {
                bn: 64,
                ..AttnConfig::hopper()
            },
            // 128×128 in 3 stages: 408.8 / 463.3 TFLOP/s at 4·16·4096 / 2·32·8192 against
            // 390.3 / 436.4 for the earlier 64×64×2 on 128 threads (gpu-notes run 20i).
            (64, true) => AttnConfig::tiles(128, 128, 3, 256),
            _ => AttnConfig::hopper(),
        };
        // The lazy rescale where it measured faster: the warp-specialized d128 kernel
        // ([`LAZY_RESCALE_THRESHOLD`]).
        let lazy = tiles.overlap_pv;
        AttnConfig {
            rescale_threshold: lazy_rescale(lazy.then_some(LAZY_RESCALE_THRESHOLD)),
            ..tiles
        }
    }

    /// AMD tiles (64-lane waves; on MFMA 16 query rows per wave): 128 query rows over 8 waves
    /// with 64-key tiles where the LDS holds them (gfx950's 160 KiB), else 64 rows over 4
    /// waves, then narrower key tiles and a single stage (gfx942's 64 KiB, wide heads, f32).
    pub fn amd(target: &tl_target::Target, head_dim: i64, dtype: DType) -> AttnConfig {
        AttnConfig::first_fitting(
            target,
            head_dim,
            dtype,
            &[
                AttnConfig::tiles(128, 64, 2, 512),
                AttnConfig::tiles(64, 64, 2, 256),
                AttnConfig::tiles(64, 32, 2, 256),
                AttnConfig::tiles(64, 32, 1, 256),
                AttnConfig::tiles(32, 32, 1, 256),
            ],
        )
    }

    /// The first of `candidates` whose shared memory fits the target: Q, the stages of K and V,
    /// and off the tensor cores P staged for the second gemm, the reductions' scratch and the
    /// output's staging tile.
    fn first_fitting(
        target: &tl_target::Target,
        head_dim: i64,
        dtype: DType,
        candidates: &[AttnConfig],
    ) -> AttnConfig {
        let limit = target.max_shared_bytes() as i64;
        let e = dtype.bytes() as i64;
        let tensor_cores = matches!(dtype, DType::F16 | DType::BF16);
        let bytes = |c: &AttnConfig| {
            let simt = if tensor_cores {
                0
            } else {
                c.bm * c.bn * e + 4 * c.bm * 8 + c.bm * head_dim * e
            };
            (c.bm * head_dim + 2 * c.stages as i64 * c.bn * head_dim) * e + simt
        };
        candidates
            .iter()
            .copied()
            .find(|c| bytes(c) <= limit)
            .unwrap_or(AttnConfig::tiles(32, 16, 1, 128))
    }

    /// The default tiles for a target, head dim and masking.
    pub fn for_target(
        target: &tl_target::Target,
        head_dim: i64,
        causal: bool,
        dtype: DType,
    ) -> AttnConfig {
        match target {
            tl_target::Target::Cpu => AttnConfig::cpu(),
            tl_target::Target::Hip { .. } => AttnConfig::amd(target, head_dim, dtype),
            _ if target.has_wgmma()
                && matches!(dtype, DType::F16 | DType::BF16)
                && head_dim % 64 == 0 =>
            {
                AttnConfig::hopper_for(head_dim, causal)
            }
            _ => AttnConfig::first_fitting(
                target,
                head_dim,
                dtype,
                &[
                    AttnConfig::gpu(),
                    AttnConfig::tiles(64, 64, 2, 128),
                    AttnConfig::tiles(64, 32, 1, 128),
                    AttnConfig::tiles(32, 32, 1, 128),
                ],
            ),
        }
    }

    pub fn cpu() -> AttnConfig {
        AttnConfig::tiles(64, 64, 1, 128)
    }
}

pub fn flash_attention(dtype: DType, head_dim: i64, causal: bool, cfg: AttnConfig) -> Kernel {
    let AttnConfig {
        bm,
        bn,
        stages,
        threads,
        instruction,
        warp_specialize,
        ping_pong,
        overlap_pv,
        pin_pv_wait,
        persistent,
        group_heads,
        rescale_threshold,
    } = cfg;
    let d = head_dim;
    let sm_scale = 1.0 / (d as f64).sqrt();
    let scale = sm_scale * std::f64::consts::LOG2_E;
    let name = if causal {
        "flash_attn_fwd_causal"
    } else {
        "flash_attn_fwd"
    };
    Kernel::build(name, |k| {
        let (b, h, s) = (k.dim("B"), k.dim("H"), k.dim("S"));
        let q = k.input("Q", (&b, &h, &s, d), dtype);
        let kk = k.input("K", (&b, &h, &s, d), dtype);
        let v = k.input("V", (&b, &h, &s, d), dtype);
        let o = k.output("O", (&b, &h, &s, d), dtype);
        let lse = k.output("LSE", [&b, &h, &s], F32);
        k.launch(
            [ceildiv(&s, bm), h.clone(), b.clone()],
            threads,
            |t, [bx_launch, by_launch, bz_launch]| {
                if let Some(on) = warp_specialize {
                    t.warp_specialize(on);
                }
                if ping_pong {
                    t.ping_pong(true);
                }
                if let Some(blocks) = persistent {
                    t.persistent(blocks);
                }
                // Causal: the query blocks near the end of the sequence see the most keys, so
                // they launch first and the light ones fill the tail of the grid.
                let q_tiles = ceildiv(&s, bm);
                let (bx, by, bz) = match causal {
                    true if group_heads && persistent.is_none() => {
                        let linear = &bx_launch + &q_tiles * (&by_launch + &h * &bz_launch);
                        let group = max(1, CAUSAL_GROUP_TILES / &q_tiles);
                        let [rank, head] =
                            ranks_in_item_groups(linear, q_tiles.clone(), &h * &b, group);
                        (&q_tiles - 1 - rank, &head % &h, &head / &h)
                    }
                    true => (&q_tiles - 1 - &bx_launch, by_launch, bz_launch),
                    false => (bx_launch, by_launch, bz_launch),
                };
                let q_s = t.alloc_shared_named("Q_s", [bm, d], dtype);
                let k_s = t.alloc_shared_named("K_s", [bn, d], dtype);
                let v_s = t.alloc_shared_named("V_s", [bn, d], dtype);
                let scores = t.alloc_fragment_named("scores", [bm, bn], F32);
                let probs = t.alloc_fragment_named("probs", [bm, bn], dtype);
                let acc_o = t.alloc_fragment_named("acc_o", [bm, d], F32);
                let m_i = t.alloc_fragment_named("m_i", [bm], F32);
                let m_prev = t.alloc_fragment_named("m_prev", [bm], F32);
                let rescale = t.alloc_fragment_named("rescale", [bm], F32);
                let row_sum = t.alloc_fragment_named("row_sum", [bm], F32);
                let l_i = t.alloc_fragment_named("l_i", [bm], F32);
                let m_scaled = t.alloc_fragment_named("m_scaled", [bm], F32);

                let kv_tiles = if causal {
                    min(ceildiv(&s, bn), ceildiv((&bx + 1) * bm, bn))
                } else {
                    ceildiv(&s, bn)
                };
                t.copy(q.tile((&bz, &by, &bx * bm, 0)), &q_s);
                // With P·V overlapped, V's last tile goes in its own shared tile, loaded here
                // beside Q: after the loop its load stalled every block for a memory latency.
                let v_last = overlap_pv.then(|| {
                    let v_last = t.alloc_shared_named("V_last", [bn, d], dtype);
                    t.copy(v.tile((&bz, &by, (kv_tiles.clone() - 1) * bn, 0)), &v_last);
                    v_last
                });
                t.clear(&acc_o);
                t.clear(&l_i);
                t.fill(&m_i, f64::NEG_INFINITY);
                // The scores of key tile `kt` (in `K_s`): Q·Kᵀ into a cleared accumulator (on
                // wgmma the first k-step simply does not add: no zeroing instructions);
                // `pending` leaves the gemm running (`wg_wait(-1)`).
                let scores_of = |t: &mut TileScope, pending: bool| {
                    let mut qk = t.gemm(&q_s, &k_s, &scores).transpose_b().clear_accum();
                    if let Some(inst) = instruction {
                        qk = qk.instruction(inst);
                    }
                    if pending {
                        qk.wg_wait(-1);
                    }
                };
                // Then -inf where a key is masked (past the sequence, or after the query when
                // causal), once the gemm is in.
                let mask_scores = |t: &mut TileScope, kt: &Expr| {
                    // Only tiles that cross the sequence end or the diagonal need the mask.
                    let tile_end = kt * bn + bn;
                    let needs_mask = if causal {
                        tile_end.gt(&s).or(tile_end.gt(&bx * bm + 1))
                    } else {
                        tile_end.gt(&s)
                    };
                    t.if_(needs_mask, |t| {
                        t.parallel([bm, bn], |t, [i, j]| {
                            // A key is visible below min(S, query + 1): one bound per row and
                            // one compare per score, not two compares and an `and`. (The key,
                            // not j, is compared: j alone is loop-invariant, and values hoisted
                            // out of the loop cost registers.)
                            let key = kt * bn + &j;
                            let end = if causal {
                                min(&s, &bx * bm + &i + 1)
                            } else {
                                s.clone()
                            };
                            let visible = key.lt(end);
                            t.store(
                                &scores,
                                [&i, &j],
                                select(visible, scores.at([&i, &j]), f64::NEG_INFINITY),
                            );
                        });
                    });
                };
                // With the lazy rescale: its threshold, and whether some row of this thread
                // moved its maximum in this step (else every factor is 1 and O is left alone).
                let lazy = rescale_threshold.map(|tau| (tau, t.alloc_var(I32)));
                let rescale_o = |t: &mut TileScope| {
                    let all = |t: &mut TileScope| {
                        t.parallel([bm, d], |t, [i, j]| {
                            t.store(&acc_o, [&i, &j], acc_o.at([&i, &j]) * rescale.at([&i]));
                        });
                    };
                    match &lazy {
                        Some((_, moved)) => {
                            t.if_(moved.at([0]).gt(0), all);
                        }
                        None => all(t),
                    }
                };
                // The online softmax of the scores: the new row maxima, the factor the old
                // sums and O scale by (O too with `with_o`), the exponentials in place, the
                // row sums.
                let softmax = |t: &mut TileScope, with_o: bool| {
                    t.copy(&m_i, &m_prev);
                    t.reduce_max(&scores, &m_i, 1).accumulate();
                    if let Some((_, moved)) = &lazy {
                        t.store(moved, [0], 0);
                    }
                    t.parallel([bm], |t, [i]| {
                        // Lazily, a row keeps its maximum unless the tile raised it by more
                        // than tau in the exp2 domain, a factor of 2^tau (the first tile
                        // always moves it, from -inf).
                        let grown = lazy
                            .as_ref()
                            .map(|(tau, _)| ((m_i.at([&i]) - m_prev.at([&i])) * scale).gt(*tau));
                        let kept = match &grown {
                            Some(g) => {
                                let kept = select(g.clone(), m_i.at([&i]), m_prev.at([&i]));
                                t.store(&m_i, [&i], kept.clone());
                                kept
                            }
                            None => m_i.at([&i]),
                        };
                        t.store(
                            &rescale,
                            [&i],
                            exp2((m_prev.at([&i]) - kept.clone()) * scale),
                        );
                        t.store(&m_scaled, [&i], kept * scale);
                        if let (Some(g), Some((_, moved))) = (grown, &lazy) {
                            t.store(moved, [0], moved.at([0]) | g.cast(I32));
                        }
                    });
                    if with_o {
                        rescale_o(t);
                    }
                    // One fused multiply-add per score: s·scale − m·scale.
                    t.parallel([bm, bn], |t, [i, j]| {
                        t.store(
                            &scores,
                            [&i, &j],
                            exp2(scores.at([&i, &j]) * scale - m_scaled.at([&i])),
                        );
                    });
                    t.reduce_sum(&scores, &row_sum, 1);
                    t.parallel([bm], |t, [i]| {
                        t.store(
                            &l_i,
                            [&i],
                            l_i.at([&i]) * rescale.at([&i]) + row_sum.at([&i]),
                        );
                    });
                };
                let pv = |t: &mut TileScope, v_tile: &Buffer, pending: bool| {
                    let mut pv = t.gemm(&probs, v_tile, &acc_o);
                    if let Some(inst) = instruction {
                        pv = pv.instruction(inst);
                    }
                    if pending {
                        pv.wg_wait(-1);
                    }
                };
                if overlap_pv {
                    // Step j: Q·Kⱼᵀ, and P·V of step j − 1 — at j = 0 a product of zeros (P
                    // starts cleared, with V tile 0), so every step is the same body (peeling
                    // step 0 instead doubled the code, and the compile time). V's last tile
                    // is in `v_last`.
                    t.clear(&probs);
                    t.pipelined(kv_tiles.clone(), stages, |t, j| {
                        t.copy(kk.tile((&bz, &by, &j * bn, 0)), &k_s);
                        let prev = max(&j - 1, 0);
                        t.copy(v.tile((&bz, &by, prev * bn, 0)), &v_s);
                        scores_of(t, true);
                        pv(t, &v_s, true);
                        // Q·Kⱼᵀ is in once at most one group (P·V) is pending.
                        t.wait_wgmma(1);
                        mask_scores(t, &j);
                        softmax(t, false);
                        if pin_pv_wait {
                            t.wait_wgmma_pinned(0);
                        } else {
                            t.wait_wgmma(0);
                        }
                        rescale_o(t);
                        t.copy(&scores, &probs);
                    });
                    if let Some(v_last) = &v_last {
                        pv(t, v_last, false);
                    }
                } else {
                    t.pipelined(kv_tiles, stages, |t, kt| {
                        t.copy(kk.tile((&bz, &by, &kt * bn, 0)), &k_s);
                        scores_of(t, false);
                        mask_scores(t, &kt);
                        softmax(t, true);
                        t.copy(&scores, &probs);
                        t.copy(v.tile((&bz, &by, &kt * bn, 0)), &v_s);
                        pv(t, &v_s, false);
                    });
                }
                // One division per row, then multiplies: a division per element is a call to
                // the slow-path routine each time, and code the compiler has to schedule.
                t.parallel([bm], |t, [i]| {
                    t.store(&rescale, [&i], 1.0 / l_i.at([&i]));
                });
                t.parallel([bm, d], |t, [i, j]| {
                    t.store(&acc_o, [&i, &j], acc_o.at([&i, &j]) * rescale.at([&i]));
                });
                t.copy(&acc_o, o.tile((&bz, &by, &bx * bm, 0)));
                // Natural-log LSE of the scaled scores: m·sm_scale + ln(l).
                t.parallel([bm], |t, [i]| {
                    t.store(&m_prev, [&i], m_i.at([&i]) * sm_scale + log(l_i.at([&i])));
                });
                t.copy(&m_prev, lse.tile((&bz, &by, &bx * bm)));
            },
        );
    })
}
