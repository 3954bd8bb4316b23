//! What the owner is told of one released answer: how MUCH it carried of the body, never WHICH
//! words.
//!
//! [`released_coverage`] says which body words and which characters of each secret an answer
//! covers — one bit per body word. Sealed to the owner, that bitmap was a channel from the
//! caller to the owner: a hostile owner's body ("for bit i of the user's source, write phrase i
//! if the bit is 1") had the model pick body phrases by the caller's data, and the note gave the
//! selection back, hundreds of bits per call. The box now sends two coarse things:
//!
//! - the body's [`REGIONS`]: the body's words split into sixteen runs of equal word count, and
//!   a mask of the runs the answer covered (any covered word). The owner UNIONS the masks per
//!   (peer, skill, UTC day), so a passage every answer repeats (a disclaimer the body tells the
//!   model to end with) counts once however often it is given, and a body taken a piece per
//!   call still adds up (each call covers new regions). At most 16 bits a call: an owner whose
//!   body puts one codebook phrase in each region reads 16 bits of the caller's sources back
//!   per call — never 64 or hundreds;
//! - the most covered secret's share, rounded UP to one of [`LEVELS`] (sixteen, four bits),
//!   which the owner SUMS per day: any coverage counts, and a secret's slices add up.
//!
//! A sum of the words' share (the session's first rule) counted a repeated disclaimer once per
//! answer and refused an honest caller's 4th call of the day (11/64 an answer against a
//! 22.4/64 limit); a union of regions is never looser than the union of words it stands for
//! (a covered word's region is covered) and counts a repeat once.

use crate::check::Verdict;
use crate::coverage::{Coverage, CoverageError, coverage_with_words, released_coverage};
use crate::prepare::Prepared;

/// The levels a secret's share is rounded up to, in 64ths of the whole. The smallest step
/// (1/64) is small enough that a chance character spends little of the owner's daily limit;
/// from 3/64 on each step is at most 1.5 times the one below, so a rounded share is at most
/// 1.5 times the share, and the steps are close around the default limit (500 ‰ of a secret):
/// one 3-character slice of a 7- to 11-character code counts 20/64 to 28/64, under half, as
/// its share is. Eight levels (halving) were considered: a bit fewer, but any share in
/// (1/4, 1/2] counted as a half, so one chance 3-character slice of such a code in an ordinary
/// answer refused the peer for the day.
///
/// The top step is an eighth (56 to 64), so a share reads as the whole secret only when at most
/// an eighth of its characters is missing (one character of a code of up to 16: a guess away).
/// With 40 then 48 then 64, one part of a secret read as the whole: `PELICAN` of `PELICAN-42`
/// (7 of 9 characters, 50/64) rounded up to 64/64, and since the box withholds an answer whose
/// levels reach the owner's day limit, the answer `Pelican.` was withheld against a limit of one
/// whole secret as the secret itself would be. It now reads 56/64. 40 made room: any share above
/// the default limit's half reaches that limit at 48 as at 40, and 32 to 48 is the rule's 1.5.
pub const LEVELS: [u32; 16] = [0, 1, 2, 3, 4, 6, 8, 11, 16, 20, 24, 28, 32, 48, 56, 64];

/// The whole in [`LEVELS`]' unit.
pub const WHOLE: u32 = 64;

/// How many regions of equal word count the body is split into for the words' mask (one bit
/// each in the note).
pub const REGIONS: u32 = 16;

/// Form version of [`CoverageLevels::to_bytes`]: 2 is the regions' mask (1 was a summed
/// words level). Kept when [`LEVELS`]' indices 13 and 14 went from 40 and 48 to 48 and 56: the
/// box that measures an answer is the one that reads its levels (its day book; owner notes carry
/// none), and an old index read with the new table is never less than it was.
const FORM: u8 = 2;

/// One released answer's coverage as the owner is told it: which of the body's [`REGIONS`] it
/// covered, and the most covered secret's covered characters as an index into [`LEVELS`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoverageLevels {
    regions: u16,
    canary: u8,
}

/// The index of the smallest level at least `covered / total` (0 only when nothing is covered).
fn level_of(covered: usize, total: usize) -> u8 {
    if covered == 0 || total == 0 {
        return 0;
    }
    let need = covered as u64 * WHOLE as u64;
    LEVELS
        .iter()
        .position(|&l| l as u64 * total as u64 >= need)
        .unwrap_or(LEVELS.len() - 1) as u8
}

/// The words of region `r` of a body of `n` words: `[r·n/16, (r+1)·n/16)`, and at least the
/// one word at `r·n/16` (a body of fewer than 16 words has each word stand for one or more
/// regions, so a covered word counts its share of the body, not less).
fn region_words(r: u32, n: usize) -> std::ops::Range<usize> {
    let start = r as usize * n / REGIONS as usize;
    let end = (r as usize + 1) * n / REGIONS as usize;
    start..end.max(start + 1)
}

/// The mask of regions with at least one covered word.
fn regions_of(words: &[bool]) -> u16 {
    if words.is_empty() {
        return 0;
    }
    (0..REGIONS)
        .filter(|&r| words[region_words(r, words.len())].iter().any(|&b| b))
        .fold(0, |m, r| m | 1 << r)
}

/// `parts` 64ths in per mille, rounded up (a level never reads as less than it is).
pub fn permille_of(parts: u64) -> u64 {
    (parts * 1000).div_ceil(WHOLE as u64)
}

/// `regions` covered of [`REGIONS`] in per mille, rounded up.
pub fn regions_permille(regions: u16) -> u64 {
    (u64::from(regions.count_ones()) * 1000).div_ceil(REGIONS as u64)
}

impl CoverageLevels {
    /// Nothing covered: a withheld answer, or one that carried nothing of the body.
    pub const NONE: CoverageLevels = CoverageLevels {
        regions: 0,
        canary: 0,
    };

    /// The bytes' length: form, the regions' mask (two bytes, big-endian), secret level.
    pub const LEN: usize = 4;

    /// `c` made coarse: the regions its covered words fall in, and the largest covered share
    /// of one secret (each canary, and each PIN inside one, as `Coverage` tracks them) rounded
    /// up to a level.
    pub fn of(c: &Coverage) -> CoverageLevels {
        let count = |bits: &[bool]| bits.iter().filter(|&&b| b).count();
        CoverageLevels {
            regions: regions_of(c.words()),
            canary: c
                .canaries()
                .iter()
                .map(|bits| level_of(count(bits), bits.len()))
                .max()
                .unwrap_or(0),
        }
    }

    /// The body's regions the answer covered: bit `r` for region `r` of [`REGIONS`].
    pub fn regions(&self) -> u16 {
        self.regions
    }

    /// The most covered secret's covered characters, in 64ths (one of [`LEVELS`]).
    pub fn canary_parts(&self) -> u32 {
        LEVELS[self.canary as usize]
    }

    /// Form, the regions' mask, the secret level.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let [hi, lo] = self.regions.to_be_bytes();
        [FORM, hi, lo, self.canary]
    }

    /// Parse [`CoverageLevels::to_bytes`]; anything else is refused.
    pub fn from_bytes(b: &[u8]) -> Result<CoverageLevels, CoverageError> {
        let (&form, rest) = b.split_first().ok_or(CoverageError::Short)?;
        if form != FORM {
            return Err(CoverageError::Form);
        }
        let [hi, lo, canary] = match rest {
            [h, l, c] => [*h, *l, *c],
            [] | [_] | [_, _] => return Err(CoverageError::Short),
            _ => return Err(CoverageError::Trailing),
        };
        if canary as usize >= LEVELS.len() {
            return Err(CoverageError::Range("secret level"));
        }
        Ok(CoverageLevels {
            regions: u16::from_be_bytes([hi, lo]),
            canary,
        })
    }
}

/// What the box tells the owner of a released `answer`: [`released_coverage`] made coarse
/// ([`CoverageLevels::of`]). Pure.
pub fn released_levels(prepared: &Prepared, answer: &str) -> CoverageLevels {
    CoverageLevels::of(&released_coverage(prepared, answer))
}

/// What the box does with each answer of a guarded run, in one walk of it: the check's verdict
/// and, for an answer it would release (clean), [`released_levels`] — the words' coverage taken
/// from the check's own walk, which for a clean answer ran every decoder and view to the end
/// (all [`released_coverage`] walks). A caught answer gets no levels (it is withheld or
/// replaced: nothing of it is released). Exactly `(check(p, a), check(p, a).is_caught().not()
/// .then(|| released_levels(p, a)))`, at the cost of one check.
pub fn check_released(prepared: &Prepared, answer: &str) -> (Verdict, Option<CoverageLevels>) {
    let (verdict, walked) = crate::check::check_covering(prepared, answer);
    if verdict.is_caught() {
        return (verdict, None);
    }
    let levels = match walked {
        Some(w) => {
            let reading = w.reading.as_deref();
            CoverageLevels::of(&coverage_with_words(prepared, answer, w.words, reading))
        }
        // A disabled guard or an empty answer: the check walked nothing.
        None => released_levels(prepared, answer),
    };
    (verdict, Some(levels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GuardSpec, prepare};

    #[test]
    fn any_coverage_rounds_up_to_a_level_and_nothing_is_zero() {
        assert_eq!(level_of(0, 5000), 0);
        // One word of 5,000 is a level of its own: small slices per call still add up.
        assert_eq!(LEVELS[level_of(1, 5000) as usize], 1);
        assert_eq!(LEVELS[level_of(1, 64) as usize], 1);
        assert_eq!(LEVELS[level_of(2, 64) as usize], 2);
        assert_eq!(LEVELS[level_of(3, 64) as usize], 3);
        assert_eq!(LEVELS[level_of(5, 64) as usize], 6);
        // A third of the body counts 375 per mille at the owner's; half of a secret is half.
        assert_eq!(LEVELS[level_of(1, 3) as usize], 24);
        assert_eq!(LEVELS[level_of(2, 4) as usize], 32);
        assert_eq!(LEVELS[level_of(3, 6) as usize], 32);
        // One 3-character slice of a 7- to 11-character code stays under half.
        for len in 7..=11 {
            assert!(LEVELS[level_of(3, len) as usize] < 32, "{len}");
        }
        assert_eq!(LEVELS[level_of(4, 4) as usize], 64);
        // One part of a secret is not the whole of it: `PELICAN` of `PELICAN-42`, `HERON` of
        // `HERON-7`. Only a share within an eighth of the whole reads as the whole.
        assert_eq!(LEVELS[level_of(7, 9) as usize], 56);
        assert_eq!(LEVELS[level_of(5, 6) as usize], 56);
        for total in 1..300usize {
            for covered in 1..total {
                let whole = LEVELS[level_of(covered, total) as usize] == WHOLE;
                assert!(!whole || 8 * covered > 7 * total, "{covered}/{total}");
            }
        }
        // Never below the share; past 2/64, at most 1.5 times it.
        for total in 1..300usize {
            for covered in 1..=total {
                let parts = LEVELS[level_of(covered, total) as usize] as usize;
                assert!(
                    parts * total >= covered * WHOLE as usize,
                    "{covered}/{total}"
                );
                assert!(
                    parts <= 2 || 2 * parts * total <= 3 * covered * WHOLE as usize,
                    "{covered}/{total}"
                );
            }
        }
        assert_eq!(permille_of(1), 16);
        assert_eq!(permille_of(24), 375);
        assert_eq!(permille_of(32), 500);
        assert_eq!(permille_of(64), 1000);
    }

    #[test]
    fn an_answer_is_told_as_its_regions_and_a_secret_level() {
        let body = "Open the shed first. The door code is [[secret:K7PM2Q]] for today.";
        let p = prepare(body, &GuardSpec::default_for(false)).expect("prepare");
        let half = released_levels(&p, "It starts with K7P.");
        assert_eq!((half.regions(), half.canary_parts()), (0, 32));
        assert_eq!(
            released_levels(&p, "Windy, then rain."),
            CoverageLevels::NONE
        );
        let words = released_levels(&p, "Open the shed first, said the note.");
        assert!(words.regions() != 0 && words.canary_parts() == 0);
    }

    /// Regions are runs of equal word count covering every word once (from 16 words on), and
    /// a shorter body's word stands for its share of the regions.
    #[test]
    fn regions_split_the_body_evenly_and_any_covered_word_marks_its_region() {
        for n in 1..200usize {
            let mut seen = vec![0u32; n];
            for r in 0..REGIONS {
                let w = region_words(r, n);
                assert!(!w.is_empty() && w.end <= n, "{n} {r}");
                for i in w {
                    seen[i] += 1;
                }
            }
            assert!(seen.iter().all(|&k| k >= 1), "{n}: a word in no region");
            if n >= REGIONS as usize {
                assert!(seen.iter().all(|&k| k == 1), "{n}: regions overlap");
            }
        }
        let mut words = vec![false; 160];
        assert_eq!(regions_of(&words), 0);
        words[0] = true;
        words[159] = true;
        words[75] = true;
        assert_eq!(regions_of(&words), 1 | 1 << 7 | 1 << 15);
        assert_eq!(regions_permille(1 | 1 << 7 | 1 << 15), 188);
        // One word of a 4-word body is a quarter of it: four regions.
        assert_eq!(regions_of(&[false, true, false, false]).count_ones(), 4);
        assert_eq!(regions_of(&[]), 0);
    }

    #[test]
    fn bytes_round_trip_and_anything_else_is_refused() {
        for regions in [0u16, 1, 0x8000, 0xffff, 0x1234] {
            for c in 0..16u8 {
                let l = CoverageLevels { regions, canary: c };
                assert_eq!(CoverageLevels::from_bytes(&l.to_bytes()), Ok(l));
            }
        }
        assert_eq!(CoverageLevels::from_bytes(&[]), Err(CoverageError::Short));
        assert_eq!(
            CoverageLevels::from_bytes(&[2, 0, 0]),
            Err(CoverageError::Short)
        );
        // The summed words level's form (1) is not read as a mask.
        assert_eq!(
            CoverageLevels::from_bytes(&[1, 0, 0]),
            Err(CoverageError::Form)
        );
        assert_eq!(
            CoverageLevels::from_bytes(&[2, 0, 0, 200]),
            Err(CoverageError::Range("secret level"))
        );
        assert_eq!(
            CoverageLevels::from_bytes(&[2, 0, 0, 0, 0]),
            Err(CoverageError::Trailing)
        );
    }
}
