//! Verification time per platform on the real vectors, cold and warm.
//!
//! cold: the free `verify` function — parse every certificate, load and check the pinned root,
//! verify the whole chain, then the evidence. warm: a long-lived `Verifier` whose chain cache
//! already holds this evidence's chain (what a node does for a box it talks to repeatedly):
//! parse the evidence, check validity at `now`, verify its signature, compare fields. TDX has no
//! warm path of its own: dcap-qvl re-verifies the collateral on every call.
//!
//! Run: `cargo bench -p skillbox-attest --bench verify` (criterion's figures, then a µs summary).

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::Criterion;
use skillbox_attest::{PlatformEvidence, Verifier, nitro, nvidia, snp, tdx};

fn data(rel: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const T_2025: u64 = 1_735_689_600_000;
const T_TDX: u64 = 1_751_000_000_000;
const T_NITRO: u64 = 1_665_651_482_136;

struct Inputs {
    snp: snp::Evidence,
    tdx: tdx::Evidence,
    nitro: nitro::Evidence,
    nvidia: nvidia::Evidence,
}

fn inputs() -> Inputs {
    Inputs {
        snp: snp::Evidence::from_files(
            &data("sev-snp/virtee-report_milan.hex"),
            &[
                &data("sev-snp/virtee-vcek_milan.der"),
                &data("sev-snp/virtee-cert_chain_milan.pem"),
            ],
        )
        .unwrap(),
        tdx: tdx::Evidence::from_files(
            &data("tdx/dcapqvl-tdx_quote"),
            &data("tdx/dcapqvl-tdx_quote_collateral.json"),
        )
        .unwrap(),
        nitro: nitro::Evidence::from_file(&data("nitro/evervault-valid-attestation-doc-bytes"))
            .unwrap()
            .0,
        nvidia: nvidia::Evidence::from_files(
            &data("nvidia/trustee-hopperAttestationReport.hex"),
            &[&data("nvidia/trustee-hopper_cert_chain_case1.pem")],
        )
        .unwrap(),
    }
}

/// One (name, cold, warm) closure set per platform; each closure must succeed.
type Case<'a> = (&'static str, Box<dyn Fn() + 'a>, Box<dyn Fn() + 'a>);

/// A platform's closures: the free `verify` (cold) and a long-lived verifier (warm), both with
/// the default expectations under `policy` at `at_ms`.
fn case<'a, E>(name: &'static str, evidence: &'a E, policy: E::Policy, at_ms: u64) -> Case<'a>
where
    E: PlatformEvidence,
    E::Expected: Default,
    E::Policy: 'a,
{
    let verifier = Verifier::<E>::new(policy.clone()).unwrap();
    (
        name,
        Box::new(move || {
            skillbox_attest::verify(black_box(evidence), &E::Expected::default(), &policy, at_ms)
                .unwrap();
        }),
        Box::new(move || {
            verifier
                .verify(black_box(evidence), &E::Expected::default(), at_ms)
                .unwrap();
        }),
    )
}

fn cases(i: &Inputs) -> Vec<Case<'_>> {
    vec![
        case("sev-snp", &i.snp, snp::Policy::unpinned(), T_2025),
        case("tdx", &i.tdx, tdx::Policy::unpinned(), T_TDX),
        case("nitro", &i.nitro, nitro::Policy::unpinned(), T_NITRO),
        case("nvidia", &i.nvidia, nvidia::Policy::unpinned(), T_2025),
    ]
}

/// Median of `runs` timings of `f`, in µs.
fn median_us(f: &dyn Fn(), runs: usize) -> f64 {
    let mut t: Vec<Duration> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[runs / 2].as_secs_f64() * 1e6
}

fn main() {
    let i = inputs();
    let cases = cases(&i);
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    {
        let mut g = c.benchmark_group("verify");
        for (name, cold, warm) in &cases {
            warm(); // fill the chain cache
            g.bench_function(format!("{name}/cold"), |b| b.iter(&cold));
            g.bench_function(format!("{name}/warm"), |b| b.iter(&warm));
        }
        g.finish();
    }
    c.final_summary();

    println!("\nverification time per platform (median of 50, µs)");
    println!("{:<8} {:>12} {:>12}", "platform", "cold µs", "warm µs");
    for (name, cold, warm) in &cases {
        warm();
        println!(
            "{:<8} {:>12.1} {:>12.1}",
            name,
            median_us(cold.as_ref(), 50),
            median_us(warm.as_ref(), 50)
        );
    }
}
