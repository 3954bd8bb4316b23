//! Token buckets per client address and per program key: what keeps one sender from taking
//! the box (every open and stake is charged before its body is looked at).

use std::collections::HashMap;

/// A token bucket's shape: `burst` requests at once, refilled at `per_sec`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    pub burst: f64,
    pub per_sec: f64,
}

/// Token buckets by key. A bucket that has refilled to its burst is the same as none, so
/// [`Limiter::prune`] drops those (keys are free to make: the map must not grow with them).
pub(super) struct Limiter<K> {
    rate: Rate,
    buckets: HashMap<K, (f64, std::time::Instant)>,
}

impl<K: std::hash::Hash + Eq + Clone> Limiter<K> {
    pub(super) fn new(rate: Rate) -> Self {
        Limiter {
            rate,
            buckets: HashMap::new(),
        }
    }

    fn level(&self, tokens: f64, since: std::time::Instant, now: std::time::Instant) -> f64 {
        (tokens + now.duration_since(since).as_secs_f64() * self.rate.per_sec).min(self.rate.burst)
    }

    /// Whether every key in `keys` has a token; if so, take one from each.
    pub(super) fn take(&mut self, keys: &[K], now: std::time::Instant) -> bool {
        let levels: Vec<f64> = keys
            .iter()
            .map(|k| {
                self.buckets
                    .get(k)
                    .map_or(self.rate.burst, |(t, at)| self.level(*t, *at, now))
            })
            .collect();
        if levels.iter().any(|l| *l < 1.0) {
            return false;
        }
        for (k, l) in keys.iter().zip(levels) {
            self.buckets.insert(k.clone(), (l - 1.0, now));
        }
        true
    }

    pub(super) fn prune(&mut self, now: std::time::Instant) {
        let (rate, burst) = (self.rate.per_sec, self.rate.burst);
        self.buckets
            .retain(|_, (t, at)| *t + now.duration_since(*at).as_secs_f64() * rate < burst);
    }
}

/// The client a request came from, as rate limits and shares count it: an IPv4 address, or an
/// IPv6 address's /64 (one host is given a whole /64). `None`: in-process, not counted.
pub type Client = Option<std::net::IpAddr>;

/// Normalize a peer address to the [`Client`] it counts as.
pub fn client_of(ip: std::net::IpAddr) -> std::net::IpAddr {
    use std::net::{IpAddr, Ipv6Addr};
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}
