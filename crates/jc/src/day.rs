//! The box's day book: how much of a skill's body a caller's released answers carried in a
//! day, kept by the box itself, so the owner learns one thing only — that the day is spent.
//!
//! The owner's note used to carry each released answer's coverage levels (16 region bits and a
//! 4-bit secret level) for the owner's node to add up. A hostile owner's body put one codebook
//! phrase in each region ("write phrase i iff bit i of the user's source is 1") and read 16
//! bits of the caller's sources per call off the note. Now the owner puts its limits in its
//! stake ([`DAY_LIMITS_ENTRY`], [`DayLimits`]); the box adds the levels up per (owner, caller,
//! skill, UTC day) and refuses a run past them with the closed code `coverage_exceeded`.

use skillbox_guard::{CoverageLevels, REGIONS, WHOLE};

use crate::error::{JcError, Result};

/// The owner stake's optional entry carrying its [`DayLimits`]. Absent from a guarded
/// program's owner stake (an owner node from before `day_limits`, whose thresholds the box's
/// notes no longer feed): the box applies [`DayLimits::DEFAULT`]; an owner that wants no day
/// limit stakes 0/0.
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

    /// What a guarded run gets when its owner staked no limits: the owner node's `[guard]`
    /// defaults (`crates/node/src/config.rs`, `DEFAULT_COVERAGE_PERMILLE` — which is
    /// `skillbox_guard::DEFAULT_THRESHOLD_PERMILLE` — and `DEFAULT_CANARY_COVERAGE_PERMILLE`).
    /// An owner node from before `day_limits` enforced these from the notes' levels; new notes
    /// carry none, so without a default it silently lost every cross-call limit.
    pub const DEFAULT: DayLimits = DayLimits {
        coverage_permille: skillbox_guard::DEFAULT_THRESHOLD_PERMILLE,
        canary_coverage_permille: 500,
    };

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

    /// The least a caught secret is charged, in 64ths: half of the owner's secret limit
    /// (rounded up), so two catches of a secret spend the caller's day of the skill. The
    /// guard's own measure of a caught list of guesses is the whole secret when the guess is
    /// written as is (a 4-digit PIN: 64/64, the day spent at once), but 0 when the caller had
    /// the model repeat its guesses in a form the check decodes and the measure does not
    /// (hex, base64); the floor is what such a catch costs. A quarter (four catches a day) let
    /// a search that avoids catches find a 4-digit PIN in one day from one peer id (100 calls
    /// with at most 3 catches tell sum C(100, <=3) = 166,751 outcomes apart, past 10,000);
    /// with two (5,051 outcomes a day) it takes two days or two peer ids.
    pub fn catch_floor(&self) -> u64 {
        (u64::from(self.canary_coverage_permille) * u64::from(WHOLE)).div_ceil(2000)
    }
}

/// The UTC day `secs` (unix seconds) falls in: the box's own clock decides the day.
pub fn day_of(secs: u64) -> u64 {
    secs / 86_400
}

/// Whose tally: the owner's and the caller's node keys, the skill, and the box's UTC day.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DayKey {
    pub owner: [u8; 32],
    pub caller: [u8; 32],
    pub skill: String,
    pub day: u64,
}

impl DayKey {
    /// The key of a run of `program` at `now` (unix seconds).
    pub fn of(program: &crate::Program, now: u64) -> Result<DayKey> {
        Ok(DayKey {
            owner: program.owner_node_key()?,
            caller: program.caller_node_key()?,
            skill: program.skill.name.clone(),
            day: day_of(now),
        })
    }

    /// owner, caller, day (u64 big-endian), skill: fixed widths first, so no two keys encode
    /// alike.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(72 + self.skill.len());
        out.extend_from_slice(&self.owner);
        out.extend_from_slice(&self.caller);
        out.extend_from_slice(&self.day.to_be_bytes());
        out.extend_from_slice(self.skill.as_bytes());
        out
    }

    /// [`Self::to_bytes`] back; anything else is `store_tampered` (only the box writes these).
    pub fn from_bytes(b: &[u8]) -> Result<DayKey> {
        let part = |r: std::ops::Range<usize>| b.get(r).ok_or(JcError::StoreTampered);
        let owner = part(0..32)?
            .try_into()
            .map_err(|_| JcError::StoreTampered)?;
        let caller = part(32..64)?
            .try_into()
            .map_err(|_| JcError::StoreTampered)?;
        let day = part(64..72)?
            .try_into()
            .map_err(|_| JcError::StoreTampered)?;
        let skill = std::str::from_utf8(&b[72..]).map_err(|_| JcError::StoreTampered)?;
        Ok(DayKey {
            owner,
            caller,
            skill: skill.to_owned(),
            day: u64::from_be_bytes(day),
        })
    }
}

/// A day of answers for one key: the UNION of their region masks (a passage every answer
/// repeats counts once, a body taken a piece per call still adds up) and the SUM of their most
/// covered secret's share in 64ths (a secret's slices add up) — the arithmetic the owner's node
/// kept when the notes carried the levels. Also what one run adds to it ([`Tally::of_run`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub regions: u16,
    pub canary: u64,
}

/// An answer of a guarded run the guard caught (withheld, or the first round `regenerate`
/// replaced), as the day book charges it (review 24b G4). Had catches counted nothing, the
/// guard was a free guess oracle: a caller had the model repeat a list of candidate codes and
/// read from `WITHHELD_ANSWER` (or, under `regenerate`, the neutral round repeating the same
/// list and caught too) whether the secret was in it — a 4-digit PIN in about 23 calls, the
/// day book never moved. So a catch is charged the secret share the caught answer carried as
/// the guard measured it (as if released), a caught secret at least
/// [`DayLimits::catch_floor`]: guessing spends the day as reading does. Canary text the request already held is not exempt: the
/// caller would list its candidates and ask for "only the right one".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caught {
    /// The caught answer's most covered secret's share in 64ths, as
    /// `skillbox_guard::released_levels` measures it (0 for a form the measure does not read,
    /// e.g. hex the check decoded). Its body regions are not charged: a guess long enough to
    /// be caught as a passage is text the caller already holds, and charging it would end an
    /// honest caller's day for a model that quoted its instructions at length.
    pub canary: u32,
    /// The catch was of a secret (a canary, or a line marked `secret`): charged at least the
    /// floor.
    pub secret: bool,
    /// The body regions charged: none for the guard's catch (see `canary`), the answer's own
    /// for one withheld because its levels reach the day's limits ([`Caught::past_limits`]).
    pub regions: u16,
}

impl Caught {
    /// `measured` (the caught answer's `released_levels`), `secret` as the verdict's reason says.
    pub fn of(measured: &CoverageLevels, secret: bool) -> Caught {
        Caught {
            canary: measured.canary_parts(),
            secret,
            regions: 0,
        }
    }

    /// An answer the guard passed but the box withholds because, released, it would take the
    /// caller's day to the owner's limits ([`Allowance::reached_by`]): charged all it carried,
    /// regions and secret share, as had it been released — which takes the day to the limits,
    /// so no floor is needed, and the next run is refused `coverage_exceeded` as it would have
    /// been after the release.
    pub fn past_limits(levels: &CoverageLevels) -> Caught {
        Caught {
            canary: levels.canary_parts(),
            secret: false,
            regions: levels.regions(),
        }
    }

    /// Both rounds of one `regenerate` run caught: one catch, as much as either measured (the
    /// run is charged the floor once, as a `withhold` run is).
    pub fn and(self, other: Caught) -> Caught {
        Caught {
            canary: self.canary.max(other.canary),
            secret: self.secret || other.secret,
            regions: self.regions | other.regions,
        }
    }
}

impl Tally {
    /// The stored form's length: regions (u16) and canary (u64), big-endian.
    pub const LEN: usize = 10;

    /// What one released answer's `levels` add to a day.
    pub fn released(levels: &CoverageLevels) -> Tally {
        Tally {
            regions: levels.regions(),
            canary: u64::from(levels.canary_parts()),
        }
    }

    /// What one run adds to its day under `limits`: the levels of the answer it released (a
    /// withheld run: none) and its catch, if the guard caught an answer, charged as [`Caught`]
    /// says.
    pub fn of_run(released: &CoverageLevels, caught: Option<&Caught>, limits: &DayLimits) -> Tally {
        let mut run = Tally::released(released);
        if let Some(c) = caught {
            let floor = if c.secret { limits.catch_floor() } else { 0 };
            run.canary = run.canary.saturating_add(u64::from(c.canary).max(floor));
            run.regions |= c.regions;
        }
        run
    }

    /// `run` counted in: regions unioned, secret shares summed.
    pub fn add(&mut self, run: &Tally) {
        self.regions |= run.regions;
        self.canary = self.canary.saturating_add(run.canary);
    }

    /// Whether the day passes `limits` (a limit of 0 is off): `parts` of `whole` reach `limit`
    /// per mille, compared exactly — covered regions of 16, summed 64ths of the secret.
    pub fn exceeds(&self, limits: &DayLimits) -> bool {
        let over = |parts: u64, whole: u32, limit: u32| {
            limit > 0 && u128::from(parts) * 1000 >= u128::from(limit) * u128::from(whole)
        };
        over(
            u64::from(self.regions.count_ones()),
            REGIONS,
            limits.coverage_permille,
        ) || over(self.canary, WHOLE, limits.canary_coverage_permille)
    }

    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..2].copy_from_slice(&self.regions.to_be_bytes());
        b[2..].copy_from_slice(&self.canary.to_be_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Result<Tally> {
        let b: &[u8; Self::LEN] = b.try_into().map_err(|_| JcError::StoreTampered)?;
        let [r0, r1, c @ ..] = *b;
        Ok(Tally {
            regions: u16::from_be_bytes([r0, r1]),
            canary: u64::from_be_bytes(c),
        })
    }
}

/// What a run of a guarded program may still release today (review 24b G0): the caller's
/// tally when the run's turn came (`BoxCore::day_turn`, which holds the parties' mark until the
/// run is counted, so no other run of theirs moves it meanwhile) and the owner's limits.
/// Checked only before the run, a day's limits held for every answer but the last: one answer
/// whose own levels reached them — the secret in a form the guard's check misses but its levels
/// count — was released whole and refused only the next run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allowance {
    pub tally: Tally,
    pub limits: DayLimits,
}

impl Allowance {
    /// Whether an answer of `levels`, released, would take the day to the limits: the day's
    /// tally with the answer added as a release adds it (regions unioned, secret shares
    /// summed), compared as [`Tally::exceeds`] compares — the same test that refuses the next
    /// run, so an answer is released only if the day after it is still open.
    pub fn reached_by(&self, levels: &CoverageLevels) -> bool {
        let mut day = self.tally;
        day.add(&Tally::released(levels));
        day.exceeds(&self.limits)
    }
}

/// What one [`DayBook::add`] changed, for the store to write: the key's new tally and its
/// update stamp, and the keys the book let go of (older days, or the least recently updated
/// entry past the cap), whose rows go too.
#[derive(Debug, PartialEq, Eq)]
pub struct DayChange {
    pub key: DayKey,
    pub tally: Tally,
    pub stamp: u64,
    pub dropped: Vec<DayKey>,
}

/// The box's day book, in memory and without I/O (the run store writes each [`DayChange`]).
/// Only today's and yesterday's days are kept (a run that started before midnight and
/// released after counts on the day it released; older days are over for everyone), and at
/// most `cap` entries. Past it one entry is let go, which resets that one caller's partial
/// tally for that skill: first an entry that carries nothing (a zero tally: letting it go
/// loses nothing), then yesterday's (its day is over for new runs), then today's least
/// recently updated. So a flood of fresh keys whose answers carry nothing (a caller's Sybil
/// keys against a colluding owner's skill) cannot push a caller's live tally out; what
/// remains is a flood of keys whose answers each carry something of a colluding owner's
/// body — as many released runs as the cap, each paid at the box's rate limits — which can
/// push out the least recently updated live entry, never make anyone refused.
pub struct DayBook {
    entries: std::collections::HashMap<DayKey, (Tally, u64)>,
    /// Entries in the order they are let go past the cap ([`Self::rank`]).
    order: std::collections::BTreeMap<Rank, DayKey>,
    next: u64,
    cap: usize,
    /// The day the book was last pruned for: an add looks for old days once a day, not at
    /// every answer (a walk of every entry).
    pruned_for: u64,
}

/// Where an entry stands in the order of letting go: empty tallies first, then by day, then
/// by its last update's stamp.
type Rank = (bool, u64, u64);

impl Default for DayBook {
    fn default() -> DayBook {
        DayBook::with_cap(DayBook::CAP)
    }
}

impl DayBook {
    /// The entries a box keeps: (owner, caller, skill) pairs with a released answer today or
    /// yesterday. About 150 bytes each in memory.
    pub const CAP: usize = 65_536;

    pub fn with_cap(cap: usize) -> DayBook {
        DayBook {
            entries: Default::default(),
            order: Default::default(),
            next: 0,
            cap: cap.max(1),
            pruned_for: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The day's tally for `key` (nothing released yet: empty).
    pub fn tally(&self, key: &DayKey) -> Tally {
        self.entries.get(key).map(|e| e.0).unwrap_or_default()
    }

    /// Whether a run for `key` is refused under `limits`.
    pub fn exceeds(&self, key: &DayKey, limits: &DayLimits) -> bool {
        !limits.off() && self.tally(key).exceeds(limits)
    }

    fn rank(key: &DayKey, tally: &Tally, stamp: u64) -> Rank {
        (*tally != Tally::default(), key.day, stamp)
    }

    /// Add what a run counts for (`run`: [`Tally::of_run`]) to `key`'s day, `today` being the
    /// box's day now.
    pub fn add(&mut self, key: DayKey, run: &Tally, today: u64) -> DayChange {
        let mut dropped = if today > self.pruned_for {
            self.prune(today)
        } else {
            Vec::new()
        };
        let mut tally = match self.entries.remove(&key) {
            Some((t, stamp)) => {
                self.order.remove(&Self::rank(&key, &t, stamp));
                t
            }
            None => Tally::default(),
        };
        tally.add(run);
        // Room for this one: at most `cap - 1` others.
        dropped.extend(self.evict_past(self.cap - 1));
        let stamp = self.next;
        self.next += 1;
        self.order
            .insert(Self::rank(&key, &tally, stamp), key.clone());
        self.entries.insert(key.clone(), (tally, stamp));
        DayChange {
            key,
            tally,
            stamp,
            dropped,
        }
    }

    /// Let go of entries, first in [`Self::rank`]'s order, until at most `keep` are left: the
    /// keys let go.
    fn evict_past(&mut self, keep: usize) -> Vec<DayKey> {
        let mut dropped = Vec::new();
        while self.entries.len() > keep {
            let Some((_, first)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&first);
            dropped.push(first);
        }
        dropped
    }

    /// Let go of every day before yesterday: the keys dropped.
    pub fn prune(&mut self, today: u64) -> Vec<DayKey> {
        self.pruned_for = self.pruned_for.max(today);
        let old: Vec<DayKey> = self
            .entries
            .keys()
            .filter(|k| k.day.saturating_add(1) < today)
            .cloned()
            .collect();
        for k in &old {
            if let Some((t, stamp)) = self.entries.remove(k) {
                self.order.remove(&Self::rank(k, &t, stamp));
            }
        }
        old
    }

    /// An entry read back from the store, with the stamp it was written with (so the order
    /// of letting go is the one before the restart). Past the cap or before yesterday it is
    /// not kept: the keys not kept.
    pub fn restore(&mut self, key: DayKey, tally: Tally, stamp: u64, today: u64) -> Vec<DayKey> {
        let rank = Self::rank(&key, &tally, stamp);
        if key.day.saturating_add(1) < today || self.order.contains_key(&rank) {
            return vec![key];
        }
        if let Some((t, old)) = self.entries.insert(key.clone(), (tally, stamp)) {
            self.order.remove(&Self::rank(&key, &t, old));
        }
        self.order.insert(rank, key);
        self.next = self.next.max(stamp.saturating_add(1));
        self.evict_past(self.cap)
    }
}

/// Runs in flight at the box per (owner, caller, skill): a run with day limits holds its
/// parties' mark from before its day check until its answer is counted (or it ended
/// otherwise), and a second run of the same parties waits for the mark before it is checked.
/// Without it, runs of one key overlapping at the box (a caller that fails the call on its
/// side once both submitted frees the owner node's one-at-a-time turn while the run goes on
/// here) were each checked against a tally holding none of the others' answers, and the day
/// limit held only up to the daily call ceiling. The wait is fair (first come, first
/// checked) and sleeps on the key's lock, never polls. The marks are memory only: a
/// restarted box has none, and its resumed runs take theirs anew.
///
/// Keyed without the day: a run that starts before midnight is counted on the day it is
/// released, which is the day the next run is checked against.
#[derive(Default)]
pub struct InFlight {
    marks: std::sync::Mutex<Marks>,
}

/// (owner, caller, skill) of a [`DayKey`].
type Parties = ([u8; 32], [u8; 32], String);

/// Each parties' lock, shared by the run holding it and the runs waiting for it.
type Marks = std::collections::HashMap<Parties, std::sync::Arc<tokio::sync::Mutex<()>>>;

/// One run's hold on its parties' mark: let go when dropped, on every path out of the run
/// (counted, refused, failed, timed out, panicked).
pub struct InFlightMark<'a> {
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
    book: &'a InFlight,
}

impl InFlight {
    /// Wait until no other run of `key`'s parties is in flight, at most `wait`: the mark, or
    /// [`JcError::DayTurnTimedOut`] (the run ends without asking the provider, failed `timeout`).
    pub async fn mark(&self, key: &DayKey, wait: std::time::Duration) -> Result<InFlightMark<'_>> {
        let parties = (key.owner, key.caller, key.skill.clone());
        let turn = self.lock().entry(parties).or_default().clone();
        match tokio::time::timeout(wait, turn.lock_owned()).await {
            Ok(held) => Ok(InFlightMark {
                held: Some(held),
                book: self,
            }),
            Err(_) => {
                // The wait's share of the key's lock is gone with it: drop the key if it was
                // the last.
                self.let_go();
                Err(JcError::DayTurnTimedOut)
            }
        }
    }

    /// Drop every key's lock no run holds or waits for any more (each holder and waiter
    /// keeps a clone). Walking every key (at most the box's runs) also takes the lock of a
    /// wait dropped before it got its turn.
    fn let_go(&self) {
        self.lock()
            .retain(|_, turn| std::sync::Arc::strong_count(turn) > 1);
    }

    /// How many parties have a run in flight or waiting (tests: the marks do not pile up).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for InFlightMark<'_> {
    fn drop(&mut self) {
        drop(self.held.take());
        self.book.let_go();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A released answer of `regions` and the canary level at `index` of `LEVELS`.
    fn levels(regions: u16, index: u8) -> Tally {
        Tally::released(&coverage(regions, index))
    }

    fn coverage(regions: u16, index: u8) -> CoverageLevels {
        let [r0, r1] = regions.to_be_bytes();
        CoverageLevels::from_bytes(&[2, r0, r1, index]).expect("levels")
    }

    fn key(caller: u8, skill: &str, day: u64) -> DayKey {
        DayKey {
            owner: [1; 32],
            caller: [caller; 32],
            skill: skill.into(),
            day,
        }
    }

    const HALF: DayLimits = DayLimits {
        coverage_permille: 500,
        canary_coverage_permille: 500,
    };

    /// Regions are unioned (a repeated region counts once) and secret levels summed, compared
    /// exactly as the owner's node did: 8 of 16 regions reach 500 ‰, 7 do not; 32/64 reaches
    /// it, 31/64 (20 + 11) does not.
    #[test]
    fn the_book_unions_regions_and_sums_secret_levels() {
        let mut book = DayBook::default();
        let k = key(3, "s", 100);
        book.add(k.clone(), &levels(0x000f, 0), 100);
        book.add(k.clone(), &levels(0x000f, 0), 100);
        assert_eq!(
            book.tally(&k).regions.count_ones(),
            4,
            "a repeat counts once"
        );
        book.add(k.clone(), &levels(0x0070, 0), 100);
        assert!(!book.exceeds(&k, &HALF), "7 of 16");
        book.add(k.clone(), &levels(0x0080, 0), 100);
        assert!(book.exceeds(&k, &HALF), "8 of 16");
        // Off: nothing is refused, whatever was carried.
        assert!(!book.exceeds(&k, &DayLimits::default()));

        let c = key(3, "code", 100);
        book.add(c.clone(), &levels(0, 9), 100); // 20/64
        book.add(c.clone(), &levels(0, 7), 100); // 11/64
        assert_eq!(book.tally(&c).canary, 31);
        assert!(!book.exceeds(&c, &HALF));
        book.add(c.clone(), &levels(0, 1), 100);
        assert!(book.exceeds(&c, &HALF), "32/64");
        // Only the regions limit on: the secret sum does not refuse.
        let words_only = DayLimits {
            canary_coverage_permille: 0,
            ..HALF
        };
        assert!(!book.exceeds(&c, &words_only));
        // Another caller, skill or day is its own tally.
        for other in [key(4, "s", 100), key(3, "t", 100), key(3, "s", 101)] {
            assert_eq!(book.tally(&other), Tally::default());
        }
        let t = book.tally(&k);
        assert_eq!(Tally::from_bytes(&t.to_bytes()).expect("round trip"), t);
        assert!(Tally::from_bytes(&[0; 9]).is_err());
    }

    /// Review 24b G4: a catch counts the secret share the caught answer carried (as if
    /// released), a caught secret at least half the owner's secret limit — two catches of a
    /// guess the measure reads as nothing (hex) spend the day; a catch of body text only is
    /// not charged; a run whose two rounds were caught is charged once.
    #[test]
    fn a_caught_secret_is_charged_at_least_half_the_limit_and_two_spend_the_day() {
        assert_eq!(HALF.catch_floor(), 16);
        let floors = [(1000, 32), (10, 1), (1, 1), (0, 0), (250, 8)];
        for (permille, floor) in floors {
            let l = DayLimits {
                coverage_permille: 0,
                canary_coverage_permille: permille,
            };
            assert_eq!(l.catch_floor(), floor, "{permille}");
            // Two floors reach the limit, whatever it is.
            let two = Tally {
                regions: 0,
                canary: 2 * floor,
            };
            assert!(permille == 0 || two.exceeds(&l), "{permille}");
        }
        let hex_guess = Caught::of(&CoverageLevels::NONE, true);
        let mut book = DayBook::default();
        let k = key(3, "s", 100);
        let run = Tally::of_run(&CoverageLevels::NONE, Some(&hex_guess), &HALF);
        assert_eq!(run.canary, 16);
        book.add(k.clone(), &run, 100);
        assert!(!book.exceeds(&k, &HALF), "one catch");
        book.add(k.clone(), &run, 100);
        assert!(book.exceeds(&k, &HALF), "two catches");
        // A PIN written as is measures whole: more than the floor, and the day is spent.
        let whole = Caught::of(&coverage(0, 15), true);
        let run = Tally::of_run(&CoverageLevels::NONE, Some(&whole), &HALF);
        assert_eq!(run.canary, 64);
        // Body text caught: neither its regions nor a floor; the released answer's levels stay.
        let passage = Caught::of(&coverage(0x00f0, 0), false);
        let run = Tally::of_run(&coverage(0x0001, 3), Some(&passage), &HALF);
        assert_eq!((run.regions, run.canary), (0x0001, 3));
        // Regenerate, both rounds caught: one catch, as much as either measured.
        let both = hex_guess.and(whole).and(passage);
        assert_eq!((both.canary, both.secret), (64, true));
        // No catch: the released levels alone, as before.
        assert_eq!(
            Tally::of_run(&coverage(0x0003, 9), None, &HALF),
            levels(0x0003, 9)
        );
    }

    /// Review 24b G0: an answer is released only if the day with it added (regions unioned,
    /// secret shares summed) stays under the limits, the test that refuses the next run; one
    /// withheld for that is charged all it carried, as had it been released, and no floor.
    #[test]
    fn an_answer_is_released_only_if_the_day_after_it_stays_under_the_limits() {
        let day = |regions, canary| Allowance {
            tally: Tally { regions, canary },
            limits: HALF,
        };
        // 7 of 16 regions: a region already covered adds nothing, a new one reaches 8.
        assert!(!day(0x007f, 0).reached_by(&coverage(0x0001, 0)));
        assert!(day(0x007f, 0).reached_by(&coverage(0x0080, 0)));
        // 16/64 so far: 11/64 more is 27, under; 16/64 more is 32, half.
        assert!(!day(0, 16).reached_by(&coverage(0, 7)));
        assert!(day(0, 16).reached_by(&coverage(0, 8)));
        // One answer alone: the whole secret reaches the half from nothing.
        assert!(day(0, 0).reached_by(&coverage(0, 15)));
        // Limits off: nothing reaches them.
        let off = Allowance {
            limits: DayLimits::default(),
            ..day(0xffff, 64)
        };
        assert!(!off.reached_by(&coverage(0xffff, 15)));

        let levels = coverage(0x0180, 11);
        let withheld = Caught::past_limits(&levels);
        let charged = Tally::of_run(&CoverageLevels::NONE, Some(&withheld), &HALF);
        assert_eq!(charged, Tally::released(&levels), "as if released");
        assert_eq!(
            withheld
                .and(Caught::of(&CoverageLevels::NONE, true))
                .regions,
            0x0180
        );
    }

    /// Days before yesterday go at the next write; yesterday stays (a day's limit holds until
    /// the day ends, on the box's clock).
    #[test]
    fn the_book_keeps_today_and_yesterday_only() {
        let mut book = DayBook::default();
        for day in [98, 99] {
            book.add(key(3, "s", day), &levels(1, 0), day);
        }
        assert_eq!(book.len(), 2);
        let change = book.add(key(3, "s", 100), &levels(1, 0), 100);
        assert_eq!(change.dropped, vec![key(3, "s", 98)]);
        let change = book.add(key(4, "s", 100), &levels(1, 0), 100);
        assert!(change.dropped.is_empty(), "pruned once a day");
        let change = book.add(key(3, "s", 101), &levels(1, 0), 101);
        assert_eq!(change.dropped, vec![key(3, "s", 99)]);
        assert_eq!(book.len(), 3);
        assert_eq!(book.tally(&key(3, "s", 100)).regions, 1);
        // Restored rows of an old day are not kept, and say so.
        assert_eq!(
            book.restore(key(5, "s", 90), Tally::default(), 77, 101),
            vec![key(5, "s", 90)]
        );
        assert_eq!(book.len(), 3);
    }

    /// Past the cap the least recently UPDATED entry goes (not the oldest made): one caller's
    /// partial tally resets, the others hold.
    #[test]
    fn past_the_cap_the_least_recently_updated_entry_goes() {
        let mut book = DayBook::with_cap(3);
        for c in 1..=3 {
            book.add(key(c, "s", 100), &levels(1 << c, 0), 100);
        }
        // Caller 1 released again: caller 2 is now the least recently updated.
        book.add(key(1, "s", 100), &levels(1, 0), 100);
        let change = book.add(key(4, "s", 100), &levels(1, 0), 100);
        assert_eq!(change.dropped, vec![key(2, "s", 100)]);
        assert_eq!(book.len(), 3);
        assert_eq!(book.tally(&key(1, "s", 100)).regions, 0b11);
        assert_eq!(book.tally(&key(2, "s", 100)), Tally::default());
        // Restoring past the cap keeps the most recent stamps.
        let mut back = DayBook::with_cap(2);
        let mut dropped = Vec::new();
        for (c, stamp) in [(1, 5), (2, 3), (3, 9)] {
            dropped.extend(back.restore(key(c, "s", 100), Tally::default(), stamp, 100));
        }
        assert_eq!(dropped, vec![key(2, "s", 100)]);
        let next = back.add(key(7, "s", 100), &levels(1, 0), 100);
        assert!(next.stamp > 9, "new stamps follow the restored ones");
        assert_eq!(next.dropped, vec![key(1, "s", 100)]);
    }

    /// Review F5: a caller colluding with another owner floods fresh keys to push its own
    /// entry out of a full book. Keys whose answers carried nothing go first, then
    /// yesterday's, and only then today's least recently updated.
    #[test]
    fn past_the_cap_an_entry_carrying_nothing_goes_before_a_live_one() {
        let mut book = DayBook::with_cap(2);
        let mine = key(1, "s", 100);
        book.add(mine.clone(), &levels(0x00ff, 0), 100);
        assert!(book.exceeds(&mine, &HALF));
        for sybil in 2..=40 {
            book.add(key(sybil, "s", 100), &levels(0, 0), 100);
            assert!(book.exceeds(&mine, &HALF), "pushed out by key {sybil}");
        }
        assert_eq!(book.len(), 2);

        // Zero tally first, then yesterday's (however recent its stamp), then today's oldest.
        let mut book = DayBook::with_cap(3);
        let today_old = key(1, "s", 100);
        let yesterday = key(2, "s", 99);
        let empty = key(3, "s", 100);
        let live = Tally {
            regions: 1,
            canary: 0,
        };
        assert!(book.restore(today_old.clone(), live, 5, 100).is_empty());
        assert!(book.restore(yesterday.clone(), live, 10, 100).is_empty());
        assert!(
            book.restore(empty.clone(), Tally::default(), 11, 100)
                .is_empty()
        );
        let one = |c| (key(c, "s", 100), levels(1, 0));
        let mut gone = Vec::new();
        for c in 4..=6 {
            let (k, l) = one(c);
            gone.extend(book.add(k, &l, 100).dropped);
        }
        assert_eq!(gone, vec![empty, yesterday, today_old]);
    }

    /// Review F3: one run of a (owner, caller, skill) in flight at a time; a second waits, a
    /// wait past its bound ends `day_turn_timed_out`, other parties are not held, and every
    /// way out (drop, a timed-out wait, a panicked task) lets the mark go.
    #[tokio::test]
    async fn one_run_of_a_key_is_in_flight_and_every_way_out_lets_it_go() {
        use std::sync::Arc;
        use std::time::Duration;
        let marks = Arc::new(InFlight::default());
        let short = Duration::from_millis(50);
        let first = marks.mark(&key(1, "s", 100), short).await.expect("free");
        // Another day of the same parties is the same mark: a run counts on its release day.
        let waited = marks.mark(&key(1, "s", 101), short).await;
        assert!(matches!(waited, Err(JcError::DayTurnTimedOut)));
        let failed = crate::run::RunFailure::from(&JcError::DayTurnTimedOut);
        assert_eq!(failed.as_str(), "timeout", "a code every node parses");
        let other = marks
            .mark(&key(2, "s", 100), short)
            .await
            .expect("not held");
        assert_eq!(marks.len(), 2);
        drop(other);
        drop(first);
        assert!(marks.is_empty(), "marks pile up");

        // A waiter gets the mark once the holder lets go.
        let first = marks.mark(&key(1, "s", 100), short).await.expect("free");
        let waiter = {
            let marks = marks.clone();
            tokio::spawn(async move {
                let _mark = marks
                    .mark(&key(1, "s", 100), Duration::from_secs(20))
                    .await
                    .expect("its turn");
            })
        };
        tokio::time::sleep(short).await;
        assert!(!waiter.is_finished(), "ran while the first was in flight");
        drop(first);
        waiter.await.expect("waiter");
        assert!(marks.is_empty());

        // A task that panics while holding it lets it go.
        let panicked = {
            let marks = marks.clone();
            tokio::spawn(async move {
                let _mark = marks.mark(&key(1, "s", 100), short).await.expect("free");
                panic!("provider double panicked");
            })
        };
        assert!(panicked.await.is_err());
        assert!(marks.is_empty());
        marks
            .mark(&key(1, "s", 100), short)
            .await
            .expect("free again");
    }

    #[test]
    fn a_day_key_reads_back_and_a_cut_one_is_tampered() {
        let k = key(9, "song-picker", 20_000);
        assert_eq!(DayKey::from_bytes(&k.to_bytes()).expect("round trip"), k);
        for cut in [0, 31, 71] {
            assert!(DayKey::from_bytes(&k.to_bytes()[..cut]).is_err());
        }
    }

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
