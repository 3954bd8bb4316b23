//! Token buckets per peer: the one rate rule for payloads, adverts and provider records.
//! Pure; `now` is passed in.

use std::collections::HashMap;

use libp2p::PeerId;

struct Bucket {
    tokens: f64,
    at_ms: u64,
}

/// Per-peer token buckets: `rate_per_sec` sustained, `burst` at once. A peer seen for the first
/// time starts with a full bucket.
pub(crate) struct Buckets {
    rate_per_sec: f64,
    burst: f64,
    buckets: HashMap<PeerId, Bucket>,
}

/// Buckets kept before full ones are forgotten (a full bucket carries no state worth keeping).
const FORGET_FULL_ABOVE: usize = 4096;

impl Buckets {
    pub(crate) fn new(rate_per_sec: f64, burst: f64) -> Buckets {
        Buckets {
            rate_per_sec,
            burst,
            buckets: HashMap::new(),
        }
    }

    /// Spend one of `peer`'s tokens; false when it has none left.
    pub(crate) fn take(&mut self, peer: &PeerId, now_ms: u64) -> bool {
        if self.buckets.len() > FORGET_FULL_ABOVE {
            self.forget_full(now_ms);
        }
        let (rate, burst) = (self.rate_per_sec, self.burst);
        let b = self.buckets.entry(*peer).or_insert(Bucket {
            tokens: burst,
            at_ms: now_ms,
        });
        let elapsed = now_ms.saturating_sub(b.at_ms) as f64 / 1000.0;
        b.tokens = (b.tokens + elapsed * rate).min(burst);
        b.at_ms = now_ms;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn forget_full(&mut self, now_ms: u64) {
        let (rate, burst) = (self.rate_per_sec, self.burst);
        self.buckets.retain(|_, b| {
            b.tokens + now_ms.saturating_sub(b.at_ms) as f64 / 1000.0 * rate < burst
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_gets_its_burst_then_its_rate_and_others_are_untouched() {
        let mut b = Buckets::new(2.0, 3.0);
        let (flooder, other) = (PeerId::random(), PeerId::random());
        let taken = (0..10).filter(|_| b.take(&flooder, 1_000)).count();
        assert_eq!(taken, 3);
        assert!(b.take(&other, 1_000));
        // Half a second at 2 per second: one more.
        assert!(b.take(&flooder, 1_500));
        assert!(!b.take(&flooder, 1_500));
    }
}
