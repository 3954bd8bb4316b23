//! When this node announces each key it provides again (its provider records' republishing).
//!
//! libp2p-kad's own provider job republishes every provided key at a fixed period counted from
//! the node's start, whatever the key's last announcement: it re-announced keys an offer had
//! announced seconds before, and when a round's lookups took longer than the period (a loaded
//! machine) it started the next round beside them, so the more loaded the machine, the more
//! lookups ran at once. Each announcement is a closest-peers walk whose every request a DHT
//! server answers from its routing table, the DHT's largest cost. Here a key is announced again
//! one period after its last announcement *started*, and never while that one is under way.
//! The same holds for a key to announce at once, not at its period (review 29 R29-11): a
//! confirmed external address the records must carry (each new relay reservation confirms its
//! circuit address again), the offer set anew, the table filled after an early announcement.
//! Such a key whose announcement is under way is marked and announced again when that one
//! ends, not beside it. Pure: the caller starts the queries and reports their ends.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// The last announcement of each provided key, by the key's bytes; `Q` is the query's id.
#[derive(Debug)]
pub(crate) struct Announcements<Q> {
    every: Duration,
    keys: HashMap<Vec<u8>, Last<Q>>,
}

#[derive(Debug)]
struct Last<Q> {
    started: Instant,
    /// The announcement's query while it is under way.
    query: Option<Q>,
    /// Asked for again while `query` was under way: announced when it ends.
    again: bool,
    /// No longer provided while `query` was under way: the entry leaves when it ends (kept
    /// till then, so a key provided again meanwhile waits for it too).
    forgotten: bool,
}

/// What [`Announcements::request`] says to do with a key to announce now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request<Q> {
    /// Nothing of it under way: start its announcement now (and report it `started`).
    Start,
    /// Its announcement under way as this query: marked, handed back by
    /// [`Announcements::ended`] when that query ends.
    Waits(Q),
}

impl<Q: Eq + Hash + Copy> Announcements<Q> {
    pub(crate) fn new(every: Duration) -> Self {
        Self {
            every,
            keys: HashMap::new(),
        }
    }

    /// `key`'s announcement started as `query` at `now` (a newer one supersedes an older still
    /// under way: the older one's end is then not this key's).
    pub(crate) fn started(&mut self, key: &[u8], query: Q, now: Instant) {
        self.keys.insert(
            key.to_vec(),
            Last {
                started: now,
                query: Some(query),
                again: false,
                forgotten: false,
            },
        );
    }

    /// `key` is to be announced now, not at its period: started at once if none of its
    /// announcements is under way, else marked to start again when that one ends.
    pub(crate) fn request(&mut self, key: &[u8]) -> Request<Q> {
        match self.keys.get_mut(key) {
            Some(Last {
                query: Some(query),
                again,
                forgotten,
                ..
            }) => {
                *again = true;
                *forgotten = false;
                Request::Waits(*query)
            }
            _ => Request::Start,
        }
    }

    /// `query` ended (done, failed or timed out): the key to announce again now, if it was
    /// asked for while this query was under way ([`Announcements::request`]).
    pub(crate) fn ended(&mut self, query: Q) -> Option<Vec<u8>> {
        let (key, last) = self.keys.iter_mut().find(|(_, l)| l.query == Some(query))?;
        last.query = None;
        if last.forgotten {
            let key = key.clone();
            self.keys.remove(&key);
            return None;
        }
        // `again` stays set until the next announcement starts: if the caller cannot start it
        // now, `due` hands the key over at the next republish.
        last.again.then(|| key.clone())
    }

    /// This node no longer provides `key`.
    pub(crate) fn forget(&mut self, key: &[u8]) {
        match self.keys.get_mut(key) {
            Some(last) if last.query.is_some() => {
                last.forgotten = true;
                last.again = false;
            }
            _ => {
                self.keys.remove(key);
            }
        }
    }

    /// The keys of `provided` to announce again at `now`: those whose last announcement started
    /// a period ago, or was asked for again, and has ended. A key never announced here is due
    /// at once. A query that never
    /// reported its end (Kademlia ends every query by its timeout, so this is a safeguard) stops
    /// holding its key back after two periods.
    pub(crate) fn due<'a>(
        &self,
        provided: impl Iterator<Item = &'a [u8]>,
        now: Instant,
    ) -> Vec<Vec<u8>> {
        provided
            .filter(|key| match self.keys.get(*key) {
                None => true,
                Some(last) => {
                    let age = now.saturating_duration_since(last.started);
                    (last.query.is_none() && (age >= self.every || last.again))
                        || age >= self.every * 2
                }
            })
            .map(<[u8]>::to_vec)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: Duration = Duration::from_secs(45);

    fn due_of(a: &Announcements<u32>, keys: &[&[u8]], now: Instant) -> Vec<Vec<u8>> {
        a.due(keys.iter().copied(), now)
    }

    #[test]
    fn a_key_is_announced_again_a_period_after_its_last_announcement_started() {
        let t0 = Instant::now();
        let mut a = Announcements::new(EVERY);
        a.started(b"k", 1, t0);
        assert_eq!(a.ended(1), None);
        assert!(due_of(&a, &[b"k"], t0 + EVERY - Duration::from_millis(1)).is_empty());
        assert_eq!(due_of(&a, &[b"k"], t0 + EVERY), vec![b"k".to_vec()]);
    }

    #[test]
    fn a_key_whose_announcement_is_under_way_is_not_announced_again() {
        // A loaded machine: the lookup takes longer than the period. libp2p's job started the
        // next round beside it; here the key waits for its end.
        let t0 = Instant::now();
        let mut a = Announcements::new(EVERY);
        a.started(b"k", 1, t0);
        assert!(due_of(&a, &[b"k"], t0 + EVERY + Duration::from_secs(10)).is_empty());
        a.ended(1);
        assert_eq!(
            due_of(&a, &[b"k"], t0 + EVERY + Duration::from_secs(10)),
            vec![b"k".to_vec()]
        );
    }

    /// Review 29 R29-11: a confirmed external address (a relay's new reservation) asks for
    /// every key to be announced now. A key whose announcement is under way is not announced
    /// beside it (one walk of the DHT for each key and each confirmation): it is announced
    /// again once, when that one ends, and then carries the new address.
    #[test]
    fn a_reprovide_during_an_announcement_waits_for_it() {
        let t0 = Instant::now();
        let mut a = Announcements::new(EVERY);
        a.started(b"k", 1, t0);
        a.started(b"idle", 2, t0);
        assert_eq!(a.ended(2), None, "nothing asked for meanwhile");
        // Three confirmations while `k`'s announcement runs.
        for _ in 0..3 {
            assert_eq!(
                a.request(b"k"),
                Request::Waits(1),
                "a reprovide started an announcement beside one under way"
            );
        }
        assert_eq!(a.request(b"idle"), Request::Start, "nothing under way: now");
        let later = t0 + Duration::from_secs(5);
        assert!(due_of(&a, &[b"k"], later).is_empty(), "still under way");
        // It ends: `k` is announced again, once.
        assert_eq!(a.ended(1), Some(b"k".to_vec()));
        a.started(b"k", 3, later);
        assert_eq!(a.ended(3), None, "announced again once, not thrice");
        assert!(due_of(&a, &[b"k"], later + Duration::from_secs(1)).is_empty());
        // Marked, and the caller could not start it when the query ended: due at once.
        a.started(b"k", 4, later);
        assert_eq!(a.request(b"k"), Request::Waits(4));
        assert_eq!(a.ended(4), Some(b"k".to_vec()));
        assert_eq!(
            due_of(&a, &[b"k"], later + Duration::from_secs(1)),
            vec![b"k".to_vec()]
        );
    }

    /// The offer set anew drops a key and provides it again while its announcement runs: the
    /// new announcement waits for the running one too; a key dropped for good leaves when its
    /// announcement ends.
    #[test]
    fn a_key_provided_again_while_its_announcement_runs_waits_for_it() {
        let t0 = Instant::now();
        let mut a = Announcements::new(EVERY);
        a.started(b"k", 1, t0);
        a.forget(b"k");
        assert_eq!(a.request(b"k"), Request::Waits(1));
        assert_eq!(a.ended(1), Some(b"k".to_vec()));
        a.started(b"gone", 2, t0);
        a.forget(b"gone");
        assert_eq!(a.ended(2), None);
        assert!(
            !a.keys.contains_key(b"gone".as_slice()),
            "a forgotten key stayed"
        );
        assert_eq!(a.request(b"gone"), Request::Start);
    }

    #[test]
    fn an_older_query_s_end_does_not_release_a_newer_announcement() {
        let t0 = Instant::now();
        let mut a = Announcements::new(EVERY);
        a.started(b"k", 1, t0);
        a.started(b"k", 2, t0 + Duration::from_secs(1));
        a.ended(1);
        assert!(due_of(&a, &[b"k"], t0 + EVERY + Duration::from_secs(5)).is_empty());
    }

    #[test]
    fn a_query_that_never_ends_holds_its_key_back_two_periods_at_most() {
        let t0 = Instant::now();
        let mut a = Announcements::new(EVERY);
        a.started(b"k", 1, t0);
        assert!(due_of(&a, &[b"k"], t0 + EVERY * 2 - Duration::from_millis(1)).is_empty());
        assert_eq!(due_of(&a, &[b"k"], t0 + EVERY * 2), vec![b"k".to_vec()]);
    }

    #[test]
    fn only_provided_keys_are_due_and_an_unknown_one_at_once() {
        let t0 = Instant::now();
        let mut a = Announcements::new(EVERY);
        a.started(b"gone", 1, t0);
        a.ended(1);
        a.forget(b"gone");
        assert_eq!(due_of(&a, &[b"new"], t0), vec![b"new".to_vec()]);
        assert!(due_of(&a, &[], t0 + EVERY).is_empty());
    }
}
