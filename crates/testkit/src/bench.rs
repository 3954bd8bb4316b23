//! What the benches share: sizes from the environment, percentiles of sorted timings, and the
//! synthetic peers' keys the board benches sign their adverts with.

use std::time::Duration;

/// A bench size from the environment (`BOARD_PEERS=1000`), `default` when unset or not a number.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `p` quantile (0.0 to 1.0) of timings sorted ascending, nearest rank.
///
/// # Panics
/// On an empty slice: a bench with no rounds has nothing to report.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Milliseconds, for printing.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Synthetic peer `i`'s key: a fixed seed per index, so runs sign the same adverts.
pub fn peer_key(i: usize) -> skillbox_peers::Keypair {
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
    skillbox_peers::keypair_from_seed(&seed).expect("a 32-byte seed is a key")
}
