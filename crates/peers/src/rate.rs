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
    /// When full buckets were last forgotten.
    swept_at_ms: Option<u64>,
}

/// Buckets kept before full ones are forgotten (a full bucket carries no state worth keeping).
const FORGET_FULL_ABOVE: usize = 4096;

/// The least time between two sweeps of full buckets. A sweep reads every bucket, and a bucket
/// taken from stays not full for a while (an advert signer's for ~2 s): swept on every take
/// above [`FORGET_FULL_ABOVE`], a flood of fresh ids held the map above it and made each take
/// read thousands of buckets. Once a second, the map grows by at most a second's takes.
const SWEEP_EVERY_MS: u64 = 1_000;

impl Buckets {
    pub(crate) fn new(rate_per_sec: f64, burst: f64) -> Buckets {
        Buckets {
            rate_per_sec,
            burst,
            buckets: HashMap::new(),
            swept_at_ms: None,
        }
    }

    /// Spend one of `peer`'s tokens; false when it has none left.
    pub(crate) fn take(&mut self, peer: &PeerId, now_ms: u64) -> bool {
        if self.buckets.len() > FORGET_FULL_ABOVE
            && self
                .swept_at_ms
                .is_none_or(|at| now_ms.saturating_sub(at) >= SWEEP_EVERY_MS)
        {
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
        self.swept_at_ms = Some(now_ms);
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

    /// N1: above 4,096 buckets every take swept the whole map. A flood of fresh ids (each
    /// bucket not yet full after its take) now costs one sweep a second, and the sweep still
    /// forgets what refilled. Read from when the map was last swept, the state the rule keeps
    /// anyway: swept on every take, it would be the flood's last take's time.
    #[test]
    fn full_buckets_are_swept_at_most_once_a_second() {
        let mut b = Buckets::new(0.5, 20.0);
        for i in 0..10_000u64 {
            b.take(&PeerId::random(), 1_000 + i / 100);
        }
        // The map first passes 4,096 buckets at take 4,098 (at 1,040 ms), its one sweep of
        // the flood's second; not one bucket was full, so none was forgotten.
        assert_eq!(b.swept_at_ms, Some(1_040), "sweeps within one second");
        assert_eq!(b.buckets.len(), 10_000);
        // A second later the sweep runs again; after the buckets' refill time (40 s) it finds
        // them full and forgets them.
        b.take(&PeerId::random(), 2_100);
        assert_eq!(b.swept_at_ms, Some(2_100));
        b.take(&PeerId::random(), 60_000);
        assert_eq!(b.swept_at_ms, Some(60_000));
        assert_eq!(b.buckets.len(), 1);
    }
}
