//! A bounded memo that lets its oldest entries go first: what the box and the nodes keep of work
//! already done and safe to reuse for the same exact input (a parsed program by its canonical
//! bytes, a verified signature by its digest). It never decides what may be kept — its users
//! keep only what passed every check — it only bounds how much, by a weight of its keys.

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// At most `budget` of key weight (`weigh`), first in, first out.
pub(crate) struct Kept<K, V> {
    values: HashMap<K, V>,
    order: VecDeque<K>,
    weight: usize,
    budget: usize,
    weigh: fn(&K) -> usize,
}

impl<K: Hash + Eq + Clone, V> Kept<K, V> {
    pub(crate) fn new(budget: usize, weigh: fn(&K) -> usize) -> Self {
        Kept {
            values: HashMap::new(),
            order: VecDeque::new(),
            weight: 0,
            budget,
            weigh,
        }
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.values.get(key)
    }

    /// Keeps `value` under `key` unless the key is kept already, then lets the oldest go until
    /// the weight is within the budget. The map, the order and the weight change together
    /// before anything can panic, so a memo behind a poisoned lock is still a consistent one.
    pub(crate) fn keep(&mut self, key: K, value: V) {
        if self.values.contains_key(&key) {
            return;
        }
        self.weight += (self.weigh)(&key);
        self.order.push_back(key.clone());
        self.values.insert(key, value);
        while self.weight > self.budget {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            self.weight -= (self.weigh)(&old);
            self.values.remove(&old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Kept;

    #[test]
    fn the_oldest_go_first_and_the_weight_stays_in_budget() {
        let mut k: Kept<String, u32> = Kept::new(10, String::len);
        k.keep("aaaa".into(), 1);
        k.keep("bbbb".into(), 2);
        k.keep("aaaa".into(), 9); // kept already: neither replaced nor counted twice
        assert_eq!(k.get("aaaa"), Some(&1));
        k.keep("cccc".into(), 3); // 12 > 10: the oldest, "aaaa", goes
        assert_eq!(k.get("aaaa"), None);
        assert_eq!((k.get("bbbb"), k.get("cccc")), (Some(&2), Some(&3)));
        k.keep("dddddddddddd".into(), 4); // heavier than the budget alone: nothing stays
        assert_eq!((k.get("bbbb"), k.get("dddddddddddd")), (None, None));
        assert_eq!((k.order.len(), k.weight), (0, 0));
    }
}
