//! The box's day book: how much of a skill's body a caller's released answers carried in a
//! day, kept by the box itself, so the owner learns one thing only — that the day is spent.
//!
//! The owner's note used to carry each released answer's coverage levels (16 region bits and a
//! 4-bit secret level) for the owner's node to add up. A hostile owner's body put one codebook
//! phrase in each region ("write phrase i iff bit i of the user's source is 1") and read 16
//! bits of the caller's sources per call off the note. Now the owner puts its limits in its
//! stake ([`DAY_LIMITS_ENTRY`], [`DayLimits`]); the box adds the levels up per (owner, caller,
//! skill, UTC day) and refuses a run past them with the closed code `coverage_exceeded`.

use crate::error::{JcError, Result};

/// The owner stake's optional entry carrying its [`DayLimits`]. Absent (an older owner node):
/// the box applies no day limit to the run.
pub const DAY_LIMITS_ENTRY: &str = "day_limits";

/// The owner's thresholds for one (caller, skill) a day, in per mille, as its `[guard]`
/// config has them; 0 turns that limit off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DayLimits {
    /// Covered regions (of `skillbox_guard::REGIONS`) of the body, unioned over the day.
    pub coverage_permille: u32,
    /// The released answers' most covered secret's share, summed over the day (64ths of
    /// `skillbox_guard::WHOLE`).
    pub canary_coverage_permille: u32,
}

impl DayLimits {
    /// The entry's only length: two u32, big-endian.
    pub const LEN: usize = 8;

    /// What the entry takes of the owner's stake, framed (`Program::stake_limit` counts it).
    pub const FRAMED: u64 =
        Self::LEN as u64 + crate::seal::ENTRY_OVERHEAD + DAY_LIMITS_ENTRY.len() as u64;

    pub fn to_bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&self.coverage_permille.to_be_bytes());
        b[4..].copy_from_slice(&self.canary_coverage_permille.to_be_bytes());
        b
    }

    /// The limits an entry carries; any length but [`Self::LEN`] is refused (a cut or padded
    /// entry is not read as some other limit).
    pub fn from_bytes(b: &[u8]) -> Result<DayLimits> {
        let b: &[u8; 8] = b
            .try_into()
            .map_err(|_| JcError::DayLimitsInvalid { size: b.len() })?;
        let [a0, a1, a2, a3, c0, c1, c2, c3] = *b;
        Ok(DayLimits {
            coverage_permille: u32::from_be_bytes([a0, a1, a2, a3]),
            canary_coverage_permille: u32::from_be_bytes([c0, c1, c2, c3]),
        })
    }

    /// Both limits off: nothing to keep or refuse.
    pub fn off(&self) -> bool {
        self.coverage_permille == 0 && self.canary_coverage_permille == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_limits_read_back_and_any_other_length_is_refused_by_name() {
        let l = DayLimits {
            coverage_permille: 500,
            canary_coverage_permille: 0x0102_0304,
        };
        assert_eq!(l.to_bytes(), [0, 0, 1, 244, 1, 2, 3, 4]);
        assert_eq!(DayLimits::from_bytes(&l.to_bytes()).expect("8 bytes"), l);
        for len in [0, 7, 9, 16] {
            let e = DayLimits::from_bytes(&vec![0; len]).expect_err("not 8 bytes");
            assert!(matches!(e, JcError::DayLimitsInvalid { size } if size == len));
            assert!(e.to_string().contains("day_limits"), "{e}");
        }
    }
}
