//! What the owner is told of one released answer: how MUCH it carried of the body, never WHERE.
//!
//! [`released_coverage`] says which body words and which characters of each secret an answer
//! covers — one bit per body word. Sealed to the owner, that bitmap was a channel from the
//! caller to the owner: a hostile owner's body ("for bit i of the user's source, write phrase i
//! if the bit is 1") had the model pick body phrases by the caller's data, and the note gave the
//! selection back, hundreds of bits per call. The owner only needs amounts to refuse a peer
//! that takes too much over a day, so the box sends two quantities, each one of
//! [`LEVELS`] (sixteen, four bits): the share of the body's words the answer covers, and the
//! share of the most covered secret. Each is rounded UP to the next level, so any coverage
//! counts (one word of a long body is a level, not nothing) and small slices per call still add
//! up; the owner SUMS them per (peer, skill, day) rather than taking a union of positions. A sum
//! counts a passage given twice twice: stricter for the caller than the union, never looser —
//! the most covered secret's share of each answer is at least that secret's, so the day's sum is
//! at least any one secret's union, and likewise for the words.

use crate::check::Verdict;
use crate::coverage::{Coverage, CoverageError, coverage_with_words, released_coverage};
use crate::prepare::Prepared;

/// The levels a quantity is rounded up to, in 64ths of the whole. The smallest step (1/64,
/// 16 ‰) is small enough that an ordinary answer quoting a phrase of the body spends little of
/// the owner's daily limit; from 3/64 on each step is at most 1.5 times the one below, so a
/// rounded share is at most 1.5 times the share, and the steps are close around the default
/// limits (350 ‰ of the words, 500 ‰ of a secret): one 3-character slice of a 7- to
/// 11-character code counts 20/64 to 28/64, under half, as its share is. Eight levels (halving)
/// were considered: a bit fewer per quantity, but any share in (1/4, 1/2] counted as a half, so
/// one chance 3-character slice of such a code in an ordinary answer refused the peer for the
/// day.
pub const LEVELS: [u32; 16] = [0, 1, 2, 3, 4, 6, 8, 11, 16, 20, 24, 28, 32, 40, 48, 64];

/// The whole in [`LEVELS`]' unit.
pub const WHOLE: u32 = 64;

/// Form version of [`CoverageLevels::to_bytes`].
const FORM: u8 = 1;

/// One released answer's coverage as the owner is told it: the body's covered words and the
/// most covered secret's covered characters, each as an index into [`LEVELS`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoverageLevels {
    words: u8,
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

/// `parts` 64ths in per mille, rounded up (a level never reads as less than it is).
pub fn permille_of(parts: u64) -> u64 {
    (parts * 1000).div_ceil(WHOLE as u64)
}

impl CoverageLevels {
    /// Nothing covered: a withheld answer, or one that carried nothing of the body.
    pub const NONE: CoverageLevels = CoverageLevels {
        words: 0,
        canary: 0,
    };

    /// The bytes' length: form, words level, secret level.
    pub const LEN: usize = 3;

    /// `c` rounded up to levels: its covered words' share, and the largest covered share of
    /// one secret (each canary, and each PIN inside one, as `Coverage` tracks them).
    pub fn of(c: &Coverage) -> CoverageLevels {
        let count = |bits: &[bool]| bits.iter().filter(|&&b| b).count();
        CoverageLevels {
            words: level_of(count(c.words()), c.words().len()),
            canary: c
                .canaries()
                .iter()
                .map(|bits| level_of(count(bits), bits.len()))
                .max()
                .unwrap_or(0),
        }
    }

    /// The body's covered words, in 64ths of its words (one of [`LEVELS`]).
    pub fn words_parts(&self) -> u32 {
        LEVELS[self.words as usize]
    }

    /// The most covered secret's covered characters, in 64ths (one of [`LEVELS`]).
    pub fn canary_parts(&self) -> u32 {
        LEVELS[self.canary as usize]
    }

    /// Form, then the two level indexes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        [FORM, self.words, self.canary]
    }

    /// Parse [`CoverageLevels::to_bytes`]; anything else is refused.
    pub fn from_bytes(b: &[u8]) -> Result<CoverageLevels, CoverageError> {
        let (&form, rest) = b.split_first().ok_or(CoverageError::Short)?;
        if form != FORM {
            return Err(CoverageError::Form);
        }
        let [words, canary] = match rest {
            [w, c] => [*w, *c],
            [] | [_] => return Err(CoverageError::Short),
            _ => return Err(CoverageError::Trailing),
        };
        let level = |i: u8, what| {
            if (i as usize) < LEVELS.len() {
                Ok(i)
            } else {
                Err(CoverageError::Range(what))
            }
        };
        Ok(CoverageLevels {
            words: level(words, "words level")?,
            canary: level(canary, "secret level")?,
        })
    }
}

/// What the box tells the owner of a released `answer`: [`released_coverage`] rounded up to
/// [`LEVELS`]. Pure.
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
    let (verdict, words) = crate::check::check_covering(prepared, answer);
    if verdict.is_caught() {
        return (verdict, None);
    }
    let levels = match words {
        Some(words) => CoverageLevels::of(&coverage_with_words(prepared, answer, words)),
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
    fn an_answer_is_told_as_two_levels_of_its_coverage() {
        let body = "Open the shed first. The door code is [[secret:K7PM2Q]] for today.";
        let p = prepare(body, &GuardSpec::default_for(false)).expect("prepare");
        let half = released_levels(&p, "It starts with K7P.");
        assert_eq!((half.words_parts(), half.canary_parts()), (0, 32));
        assert_eq!(
            released_levels(&p, "Windy, then rain."),
            CoverageLevels::NONE
        );
        let words = released_levels(&p, "Open the shed first, said the note.");
        assert!(words.words_parts() > 0 && words.canary_parts() == 0);
    }

    #[test]
    fn bytes_round_trip_and_anything_else_is_refused() {
        for w in 0..16u8 {
            for c in 0..16u8 {
                let l = CoverageLevels {
                    words: w,
                    canary: c,
                };
                assert_eq!(CoverageLevels::from_bytes(&l.to_bytes()), Ok(l));
            }
        }
        assert_eq!(CoverageLevels::from_bytes(&[]), Err(CoverageError::Short));
        assert_eq!(
            CoverageLevels::from_bytes(&[1, 0]),
            Err(CoverageError::Short)
        );
        assert_eq!(
            CoverageLevels::from_bytes(&[2, 0, 0]),
            Err(CoverageError::Form)
        );
        assert_eq!(
            CoverageLevels::from_bytes(&[1, 16, 0]),
            Err(CoverageError::Range("words level"))
        );
        assert_eq!(
            CoverageLevels::from_bytes(&[1, 0, 200]),
            Err(CoverageError::Range("secret level"))
        );
        assert_eq!(
            CoverageLevels::from_bytes(&[1, 0, 0, 0]),
            Err(CoverageError::Trailing)
        );
    }
}
