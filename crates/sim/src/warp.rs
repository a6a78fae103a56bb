//! Warp shuffles: which lane each lane reads, exactly as PTX `shfl.sync` defines it for the
//! `c` operand CUDA's `__shfl_*_sync(mask, v, x, width)` passes (`((32 - width) << 8) | 0x1f`).
//!
//! With `segmask = 32 - width`, a lane's segment ends at
//! `maxLane = (lane & segmask) | (31 & !segmask)`; `bfly` reads `lane ^ x`, `down` reads
//! `lane + x`, `idx` reads `(lane & segmask) | (x & (width - 1))`, and a source past `maxLane`
//! makes the lane keep its own value. (So a `bfly` mask of `width` or more reaches *earlier*
//! segments but not later ones, as on hardware.)

use crate::bytecode::ShflKind;

/// The lane whose value `lane` receives.
pub fn source_lane(kind: ShflKind, width: u32, lane: u32, arg: i64) -> u32 {
    let lane = lane & 31;
    let segmask = (32 - width.clamp(1, 32)) & 31;
    let max_lane = (lane & segmask) | (31 & !segmask);
    let b = (arg as u32) & 31;
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
            let j = (lane & segmask) | (b & !segmask & 31);
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

    #[test]
    fn xor_within_segments() {
        for w in [2u32, 4, 8, 16, 32] {
            for lane in 0..32 {
                for m in 0..w {
                    assert_eq!(source_lane(ShflKind::Xor, w, lane, m as i64), lane ^ m);
                }
            }
        }
        // Past the segment: later segments are out of reach (own value), earlier ones are not.
        assert_eq!(source_lane(ShflKind::Xor, 16, 3, 16), 3);
        assert_eq!(source_lane(ShflKind::Xor, 16, 19, 16), 3);
    }

    #[test]
    fn down_stays_in_segment() {
        assert_eq!(source_lane(ShflKind::Down, 32, 5, 3), 8);
        assert_eq!(source_lane(ShflKind::Down, 32, 30, 3), 30);
        assert_eq!(source_lane(ShflKind::Down, 8, 6, 1), 7);
        assert_eq!(source_lane(ShflKind::Down, 8, 7, 1), 7);
        assert_eq!(source_lane(ShflKind::Down, 8, 9, 4), 13);
        assert_eq!(source_lane(ShflKind::Down, 8, 12, 4), 12);
    }

    #[test]
    fn idx_is_relative_to_the_segment() {
        for w in [1u32, 2, 4, 8, 16, 32] {
            for lane in 0..32 {
                for src in 0..40i64 {
                    let want = (lane & !(w - 1)) + (src as u32 % w);
                    assert_eq!(
                        source_lane(ShflKind::Idx, w, lane, src),
                        want,
                        "w={w} lane={lane} src={src}"
                    );
                }
            }
        }
    }
}
