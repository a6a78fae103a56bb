//! Warp shuffles: which lane each lane reads, exactly as PTX `shfl.sync` defines it for the
//! `c` operand CUDA's `__shfl_*_sync(mask, v, x, width)` passes (`((32 - width) << 8) | 0x1f`),
//! and as HIP's `__shfl_*(v, x, width)` computes it on a 64-lane AMD wave: the same rule with
//! the warp size `W` (32 or 64) in place of 32.
//!
//! With `segmask = W - width`, a lane's segment ends at
//! `maxLane = (lane & segmask) | ((W - 1) & !segmask)`; `bfly` reads `lane ^ x`, `down` reads
//! `lane + x`, `idx` reads `(lane & segmask) | (x & (width - 1))`, and a source past `maxLane`
//! makes the lane keep its own value. (So a `bfly` mask of `width` or more reaches *earlier*
//! segments but not later ones, as on hardware.)

use crate::bytecode::ShflKind;

/// The lane whose value `lane` receives in a warp of `warp_size` lanes (32 or 64; any other
/// size is taken as 32).
pub fn source_lane(warp_size: u32, kind: ShflKind, width: u32, lane: u32, arg: i64) -> u32 {
    let ws = if warp_size == 64 { 64 } else { 32 };
    let top = ws - 1;
    let lane = lane & top;
    let segmask = (ws - width.clamp(1, ws)) & top;
    let max_lane = (lane & segmask) | (top & !segmask);
    let b = (arg as u32) & top;
    let (j, ok) = match kind {
        ShflKind::Xor => {
            let j = lane ^ b;
            (j, j <= max_lane)
        }
        ShflKind::Down => {
            let j = lane + b;
            (j, j <= max_lane)
        }
        ShflKind::Idx => {
            let j = (lane & segmask) | (b & !segmask & top);
            (j, j <= max_lane)
        }
    };
    if ok {
        j
    } else {
        lane
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lane of a 32-lane warp.
    fn source_lane32(kind: ShflKind, width: u32, lane: u32, arg: i64) -> u32 {
        source_lane(32, kind, width, lane, arg)
    }

    #[test]
    fn xor_within_segments() {
        for w in [2u32, 4, 8, 16, 32] {
            for lane in 0..32 {
                for m in 0..w {
                    assert_eq!(source_lane32(ShflKind::Xor, w, lane, m as i64), lane ^ m);
                }
            }
        }
        // Past the segment: later segments are out of reach (own value), earlier ones are not.
        assert_eq!(source_lane32(ShflKind::Xor, 16, 3, 16), 3);
        assert_eq!(source_lane32(ShflKind::Xor, 16, 19, 16), 3);
    }

    #[test]
    fn down_stays_in_segment() {
        assert_eq!(source_lane32(ShflKind::Down, 32, 5, 3), 8);
        assert_eq!(source_lane32(ShflKind::Down, 32, 30, 3), 30);
        assert_eq!(source_lane32(ShflKind::Down, 8, 6, 1), 7);
        assert_eq!(source_lane32(ShflKind::Down, 8, 7, 1), 7);
        assert_eq!(source_lane32(ShflKind::Down, 8, 9, 4), 13);
        assert_eq!(source_lane32(ShflKind::Down, 8, 12, 4), 12);
    }

    #[test]
    fn idx_is_relative_to_the_segment() {
        for w in [1u32, 2, 4, 8, 16, 32] {
            for lane in 0..32 {
                for src in 0..40i64 {
                    let want = (lane & !(w - 1)) + (src as u32 % w);
                    assert_eq!(
                        source_lane32(ShflKind::Idx, w, lane, src),
                        want,
                        "w={w} lane={lane} src={src}"
                    );
                }
            }
        }
    }

    #[test]
    fn sixty_four_lane_waves() {
        let src = |kind, w, lane, arg| source_lane(64, kind, w, lane, arg);
        for w in [2u32, 4, 8, 16, 32, 64] {
            for lane in 0..64 {
                for m in 0..w {
                    assert_eq!(src(ShflKind::Xor, w, lane, m as i64), lane ^ m);
                }
                for s in 0..80i64 {
                    let want = (lane & !(w - 1)) + (s as u32 % w);
                    assert_eq!(src(ShflKind::Idx, w, lane, s), want, "w={w} lane={lane}");
                }
            }
        }
        // A 64-wide butterfly crosses the 32-lane halves.
        assert_eq!(src(ShflKind::Xor, 64, 5, 32), 37);
        assert_eq!(src(ShflKind::Xor, 64, 40, 32), 8);
        // Width 32 on a 64-lane wave: two segments; later ones out of reach, earlier ones not.
        assert_eq!(src(ShflKind::Xor, 32, 5, 32), 5);
        assert_eq!(src(ShflKind::Xor, 32, 37, 32), 5);
        assert_eq!(src(ShflKind::Down, 64, 30, 3), 33);
        assert_eq!(src(ShflKind::Down, 64, 62, 3), 62);
        assert_eq!(src(ShflKind::Down, 32, 30, 3), 30);
        assert_eq!(src(ShflKind::Down, 16, 45, 2), 47);
        assert_eq!(src(ShflKind::Down, 16, 47, 1), 47);
        // The 32-lane rule is unchanged.
        assert_eq!(source_lane(32, ShflKind::Xor, 32, 5, 32), 5);
        assert_eq!(source_lane(32, ShflKind::Down, 32, 30, 3), 30);
    }
}
