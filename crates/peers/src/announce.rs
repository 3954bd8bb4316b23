//! When this node announces each key it provides again (its provider records' republishing).
//!
//! libp2p-kad's own provider job republishes every provided key at a fixed period counted from
//! the node's start, whatever the key's last announcement: it re-announced keys an offer had
//! announced seconds before, and when a round's lookups took longer than the period (a loaded
//! machine) it started the next round beside them, so the more loaded the machine, the more
//! lookups ran at once. Each announcement is a closest-peers walk whose every request a DHT
//! server answers from its routing table, the DHT's largest cost. Here a key is announced again
//! one period after its last announcement *started*, and never while that one is under way.
//! Pure: the caller starts the queries and reports their ends.

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
            },
        );
    }

    /// `query` ended (done, failed or timed out).
    pub(crate) fn ended(&mut self, query: Q) {
        if let Some(last) = self.keys.values_mut().find(|l| l.query == Some(query)) {
            last.query = None;
        }
    }

    /// This node no longer provides `key`.
    pub(crate) fn forget(&mut self, key: &[u8]) {
        self.keys.remove(key);
    }

    /// The keys of `provided` to announce again at `now`: those whose last announcement started
    /// a period ago and has ended. A key never announced here is due at once. A query that never
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
                    (last.query.is_none() && age >= self.every) || age >= self.every * 2
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
        a.ended(1);
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
