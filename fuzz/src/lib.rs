//! What the attestation fuzz targets share: one verifier of the platform under its unpinned
//! policy, built on the first input (the root is loaded and the sample chain verified once), and
//! "verify whatever evidence the input made" — a verdict or a refusal; only a panic is a finding.

use std::sync::OnceLock;

use skillbox_attest::{PlatformEvidence, Refusal, Verifier};

/// A platform's verifier under the policy `policy` makes (its `Policy::unpinned`), for a
/// `static` in a fuzz target.
pub struct Unpinned<E: PlatformEvidence> {
    policy: fn() -> E::Policy,
    verifier: OnceLock<Verifier<E>>,
}

impl<E: PlatformEvidence<Expected: Default>> Unpinned<E> {
    pub const fn new(policy: fn() -> E::Policy) -> Unpinned<E> {
        Unpinned {
            policy,
            verifier: OnceLock::new(),
        }
    }

    /// Verify the evidence the input made, if it made one, with the default expectations at
    /// `now_ms`; the verdict is dropped.
    pub fn verify(&self, evidence: Result<E, Refusal>, now_ms: u64) {
        let verifier = self
            .verifier
            .get_or_init(|| Verifier::new((self.policy)()).expect("pinned root"));
        if let Ok(ev) = evidence {
            let _ = verifier.verify(&ev, &E::Expected::default(), now_ms);
        }
    }
}
