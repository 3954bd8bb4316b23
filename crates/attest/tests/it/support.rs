//! Shared by the vector tests: the files under `tests/data/` (copied from the project's shared
//! attestation vectors, licences beside them) and the times each vector is valid at.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

pub fn data(rel: &str) -> Vec<u8> {
    std::fs::read(path(rel)).unwrap_or_else(|e| panic!("test data {rel}: {e}"))
}

/// 2025-01-01T00:00:00Z: inside every SEV-SNP VCEK's and the NVIDIA chain's validity.
pub const T_2025: u64 = 1_735_689_600_000;
/// 2025-06-01: inside the VLEK's one-year validity.
pub const T_VLEK: u64 = 1_748_736_000_000;
/// 2026-01-01: after the VLEK expired.
pub const T_2026: u64 = 1_767_225_600_000;
/// Inside the TDX sample's collateral window (1750329147..1752919235 s).
pub const T_TDX: u64 = 1_751_000_000_000;
/// Inside the outdated TDX sample's window (1771412331..1774003275 s).
pub const T_TDX_OUTDATED: u64 = 1_772_000_000_000;
/// 2026-10-20: inside the TD 1.5 ex sample's collateral window (2026-10-08..11-06).
pub const T_TD15EX: u64 = 1_792_454_400_000;
/// 2023-06-20: inside go-tdx-guest's collateral window for FMSPC 50806F (2023-06-18..07-08).
pub const T_GOTDX_2023: u64 = 1_687_219_200_000;
/// Nitro documents' own timestamps (their leaves live ~3 hours).
pub const T_NITRO_EVERVAULT: u64 = 1_665_651_482_136;
pub const T_NITRO_EVERVAULT_B64: u64 = 1_695_049_410_860;
pub const T_NITRO_DEBUG: u64 = 1_665_582_606_081;
pub const T_NITRO_DSTACK: u64 = 1_766_668_537_578;

pub const NVIDIA_NONCE: &str = "931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb";

use skillbox_attest::{PlatformEvidence, Refusal, Verified, Verifier, nitro, nvidia, snp, tdx};

/// One bit to flip, for the tamper properties: a place among however many bytes the test
/// tampers with, and which bit of that byte.
#[derive(Clone, Debug)]
pub struct BitFlip {
    pick: proptest::sample::Index,
    bit: u8,
}

pub fn bit_flip() -> impl proptest::strategy::Strategy<Value = BitFlip> {
    use proptest::prelude::*;
    (any::<proptest::sample::Index>(), 0u8..8).prop_map(|(pick, bit)| BitFlip { pick, bit })
}

impl BitFlip {
    /// Flip the bit in one of the first `within` bytes of `bytes`; the place flipped.
    pub fn apply(&self, bytes: &mut [u8], within: usize) -> usize {
        let at = self.pick.index(within);
        bytes[at] ^= 1 << self.bit;
        at
    }
}

/// Every one of `texts` is refused as a `P` policy file (TOML): what a node's config cannot say.
#[track_caller]
pub fn policies_refused<P: serde::de::DeserializeOwned>(texts: &[&str]) {
    for text in texts {
        assert!(toml::from_str::<P>(text).is_err(), "{text:?} loads");
    }
}

/// The refusal of a verification the test expects refused (its measurement in the panic if not).
pub fn refused(r: Result<Verified, Refusal>) -> Refusal {
    match r {
        Ok(v) => panic!("expected a refusal, verified {}", v.measurement),
        Err(e) => e,
    }
}

/// Evidence checked the way most vector tests check it: the default expectations and a policy
/// that pins nothing (or one policy), at one time.
pub trait Unpinned: PlatformEvidence<Expected: Default> {
    /// The platform's `Policy::unpinned()`.
    fn unpinned() -> Self::Policy;

    /// One verifier under that policy for the property tests: the chain is verified once, each
    /// case checks the rest.
    fn verifier() -> &'static Verifier<Self>;

    fn verify_unpinned(&self, at_ms: u64) -> Result<Verified, Refusal> {
        self.verify_expecting(&Default::default(), at_ms)
    }

    /// [`Self::verify_unpinned`] with `expected` (a nonce, report data) instead of nothing.
    fn verify_expecting(&self, expected: &Self::Expected, at_ms: u64) -> Result<Verified, Refusal> {
        skillbox_attest::verify(self, expected, &Self::unpinned(), at_ms)
    }

    /// What the evidence verifies as at `at_ms` (panics with the refusal if it is refused).
    fn verified_at(&self, at_ms: u64) -> Verified {
        self.verify_unpinned(at_ms)
            .unwrap_or_else(|e| panic!("expected it verified at {at_ms}, refused: {e}"))
    }

    /// Why the evidence is refused at `at_ms` (panics if it verifies).
    fn refusal_at(&self, at_ms: u64) -> Refusal {
        refused(self.verify_unpinned(at_ms))
    }

    /// The evidence checked under `policy` (default expectations) at `at_ms`.
    fn verify_under(&self, policy: &Self::Policy, at_ms: u64) -> Result<Verified, Refusal> {
        skillbox_attest::verify(self, &Default::default(), policy, at_ms)
    }

    /// Why the evidence is refused under `policy` (default expectations) at `at_ms`.
    fn refusal_under(&self, policy: &Self::Policy, at_ms: u64) -> Refusal {
        refused(self.verify_under(policy, at_ms))
    }
}

/// Each platform's `Policy::unpinned()` and verifier (a table of impls: a function cannot write
/// them, nor a generic one a static per platform).
macro_rules! unpinned {
    ($($platform:ident),*) => {$(
        impl Unpinned for $platform::Evidence {
            fn unpinned() -> $platform::Policy {
                $platform::Policy::unpinned()
            }

            fn verifier() -> &'static Verifier<Self> {
                static VERIFIER: std::sync::LazyLock<$platform::Verifier> =
                    std::sync::LazyLock::new(|| {
                        $platform::Verifier::new($platform::Policy::unpinned()).unwrap()
                    });
                &VERIFIER
            }
        }
    )*};
}
unpinned!(snp, tdx, nitro, nvidia);

/// The self-made P-384 leaf key the synthetic Nitro documents and NVIDIA transcripts are
/// signed with (its certificate chains to `forged/p384-root.der`, not to a vendor's root).
pub fn forged_p384_key() -> p384::ecdsa::SigningKey {
    let key_hex = String::from_utf8(data("forged/p384-leaf.key.hex")).expect("utf-8 key");
    p384::ecdsa::SigningKey::from_slice(&hex::decode(key_hex.trim()).expect("hex key"))
        .expect("P-384 key")
}

pub fn snp_virtee() -> snp::Evidence {
    snp::Evidence::from_files(
        &data("sev-snp/virtee-report_milan.hex"),
        &[
            &data("sev-snp/virtee-vcek_milan.der"),
            &data("sev-snp/virtee-cert_chain_milan.pem"),
        ],
    )
    .expect("virtee evidence")
}

pub fn snp_trustee() -> snp::Evidence {
    snp::Evidence::from_files(
        &data("sev-snp/trustee-test-report.bin"),
        &[
            &data("sev-snp/trustee-test-vcek.der"),
            &data("sev-snp/trustee-milan_ask_ark_asvk.pem"),
        ],
    )
    .expect("trustee evidence")
}

pub fn snp_vlek() -> snp::Evidence {
    snp::Evidence::from_files(
        &data("sev-snp/trustee-test-vlek-report.bin"),
        &[
            &data("sev-snp/trustee-test-vlek.der"),
            &data("sev-snp/trustee-milan_ask_ark_asvk.pem"),
        ],
    )
    .expect("vlek evidence")
}

pub fn snp_debug() -> snp::Evidence {
    snp::Evidence::from_files(
        &data("sev-snp/gosevguest-attestation-debug.bin"),
        &[
            &data("sev-snp/gosevguest-vcek.der"),
            &data("sev-snp/virtee-cert_chain_milan.pem"),
        ],
    )
    .expect("go-sev-guest evidence")
}

pub fn tdx_valid() -> tdx::Evidence {
    tdx::Evidence::from_files(
        &data("tdx/dcapqvl-tdx_quote"),
        &data("tdx/dcapqvl-tdx_quote_collateral.json"),
    )
    .expect("tdx evidence")
}

pub fn tdx_outdated() -> tdx::Evidence {
    tdx::Evidence::from_files(
        &data("tdx/dcapqvl-tdx_quote_outdated"),
        &data("tdx/dcapqvl-tdx_quote_outdated_collateral.json"),
    )
    .expect("tdx outdated evidence")
}

/// Any TDX sample with the collateral stored beside it.
pub fn tdx_ev(quote: &str, collateral: &str) -> tdx::Evidence {
    tdx::Evidence::from_files(&data(quote), &data(collateral)).expect("tdx evidence")
}

pub fn tdx_td15ex() -> tdx::Evidence {
    tdx_ev(
        "tdx/dcapqvl-tdx_quote_td15ex",
        "tdx/dcapqvl-tdx_quote_td15ex_collateral.json",
    )
}

/// go-tdx-guest's quote v5 (TD 1.5 body), with dcap-qvl's collateral for the same FMSPC.
pub fn tdx_v5_gotdx() -> tdx::Evidence {
    tdx_ev(
        "tdx/gotdx-quote_v5_sample.dat",
        "tdx/dcapqvl-tdx_quote_outdated_collateral.json",
    )
}

pub fn nitro_doc(rel: &str) -> nitro::Evidence {
    nitro::Evidence::from_file(&data(rel))
        .expect("nitro evidence")
        .0
}

pub fn nvidia_hopper() -> nvidia::Evidence {
    nvidia::Evidence::from_files(
        &data("nvidia/trustee-hopperAttestationReport.hex"),
        &[&data("nvidia/trustee-hopper_cert_chain_case1.pem")],
    )
    .expect("nvidia evidence")
}

/// Any NVIDIA sample: an SPDM transcript (hex) and its chain (PEM).
pub fn nvidia_ev(report: &str, chain: &str) -> nvidia::Evidence {
    nvidia::Evidence::from_files(&data(report), &[&data(chain)]).expect("nvidia evidence")
}

/// A Hopper report captured on another host (driver 580.95.05), with one zero byte after the
/// signature as the driver returned it.
pub fn nvidia_hopper_580() -> nvidia::Evidence {
    nvidia_ev(
        "nvidia/trustee-hopper_coco_report1.hex",
        "nvidia/trustee-hopper_coco_certs1.pem",
    )
}

pub fn nvidia_blackwell() -> nvidia::Evidence {
    nvidia_ev(
        "nvidia/nvat-sample-blackwellAttestationReport.hex",
        "nvidia/nvat-sample-blackwellCertChain.pem",
    )
}

/// The requester nonce inside a transcript (what its collector asked with).
pub fn requester_nonce(ev: &nvidia::Evidence) -> nvidia::Expected {
    nvidia::Expected {
        nonce: Some(ev.transcript[4..36].try_into().expect("32 bytes")),
    }
}

pub fn hex_arr<const N: usize>(s: &str) -> [u8; N] {
    let v = hex::decode(s).expect("hex");
    v.try_into().expect("length")
}
