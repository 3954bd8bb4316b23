//! What `skillbox box --attester … --show-identity` prints (issue 31 item 6): a `[[boxes.pins]]`
//! entry a node's config takes as it is, for every hardware platform, naming the box's
//! configuration hash the host must launch it with (SEV-SNP `host_data`, TDX `mr_config_id`,
//! issue 31 item 4) and its TCB floor (SEV-SNP `min_tcb`, the reported TCB of a report the guest
//! makes now, once its chain and signature verify; TDX `min_tcb_eval_data_number`, the
//! evaluation data number of the collateral the box serves) — a node refuses a hardware pin
//! without its floor. SEV-SNP is pinned by its MEASUREMENT; a TDX pin's `accepted` table holds
//! the TD's MRTD and RTMR0–3, read from a quote the box makes now. The values are what the
//! running guest reports — a claim until they match the operator's own computation from the
//! image and the vendor's current TCB (ARCHITECTURE "What a node pins").

use anyhow::Context as _;
use serde_json::json;
use skillbox_attest::{Platform, snp, tdx};
use skillbox_jc::attest::{Attester, BoxConfiguration, Statement};
use skillbox_node::config::BoxPin;

/// The pin for a box at `url` attesting on `platform` through `attester`, whose host must
/// launch it with the configuration hash `config` (HOST_DATA / MRCONFIGID): the pin names that
/// hash, so a node refuses the box run with any other configuration, and the TCB floor of the
/// evidence the box makes now, so a node refuses it on older firmware or collateral.
pub fn hardware_pin(
    url: String,
    platform: Platform,
    attester: &dyn Attester,
    config: &[u8; 32],
) -> anyhow::Result<BoxPin> {
    let measurement = attester.measurement().to_owned();
    let policy = match platform {
        Platform::Tdx => Some(tdx_policy(attester, config)?),
        Platform::SevSnp => Some(snp_policy(attester, &measurement, config)?),
        _ => None,
    };
    let pin = json!({
        "url": url,
        "platform": platform.as_str(),
        "measurements": [measurement],
        "policy": policy,
    });
    serde_json::from_value(pin).context("building the pin")
}

/// The pin for a Nitro box at `url`: its PCR0 and the policy table of PCR0–2 (and PCR8 when the
/// image is signed) the enclave reported at start. A Nitro enclave has no host-set
/// configuration field: its configuration is in the image (PCR2).
pub fn nitro_pin(
    url: String,
    attester: &skillbox_jc::nsm::NitroAttester,
) -> anyhow::Result<BoxPin> {
    let mut accepted = serde_json::Map::new();
    for (i, v) in attester.pcrs() {
        // PCR8 (the signing certificate) is all zero for an unsigned image: not pinned then.
        if *i != 8 || v.iter().any(|&b| b != 0) {
            accepted.insert(format!("pcr{i}"), hex::encode(v).into());
        }
    }
    let pin = json!({
        "url": url,
        "platform": Platform::Nitro.as_str(),
        "measurements": [attester.measurement()],
        "policy": { "accepted": [accepted] },
    });
    serde_json::from_value(pin).context("building the pin")
}

/// TOML comment lines telling the operator the value the host must launch the guest with, and
/// whether this guest was launched with it (the box refuses to start otherwise).
pub fn launch_note(platform: Platform, attester: &dyn Attester, config: &[u8; 32]) -> String {
    let field = match platform {
        Platform::Tdx => "MRCONFIGID",
        _ => "HOST_DATA",
    };
    let want = BoxConfiguration::launch_value(config, platform.as_str());
    let now = attester.launch_config().unwrap_or_default();
    let state = if now == want {
        "this guest was launched with it".to_owned()
    } else {
        format!(
            "this guest was launched with {} and the box will not start",
            hex::encode(now)
        )
    };
    format!(
        "# the box's configuration hash: launch the guest with {field} = {}\n# ({state})\n",
        hex::encode(want)
    )
}

/// The evidence of a fresh report of this guest, as `E` (any report data will do: only the
/// measurements and the TCB are read).
fn fresh_evidence<E: serde::de::DeserializeOwned>(
    attester: &dyn Attester,
    platform: Platform,
) -> anyhow::Result<E> {
    let zero = Statement {
        platform: platform.as_str().into(),
        measurement: attester.measurement().into(),
        program_hash: "00".repeat(32),
        run_id: "00".repeat(16),
        hpke_public_key: "00".repeat(32),
        receipt_public_key: "00".repeat(32),
        nonce: "00".repeat(16),
        expires_at: 0,
        providers: "00".repeat(32),
        ..Statement::default()
    };
    let attestation = attester
        .attest(&zero)
        .context("asking the guest for a report")?;
    serde_json::from_value(attestation.evidence).context("reading the guest's evidence")
}

/// `{ measurements, host_data, min_tcb }`: the floor is the reported TCB of a fresh report whose
/// VCEK/VLEK chain (to AMD's pinned root) and signature verify.
fn snp_policy(
    attester: &dyn Attester,
    measurement: &str,
    config: &[u8; 32],
) -> anyhow::Result<serde_json::Value> {
    let evidence: snp::Evidence = fresh_evidence(attester, Platform::SevSnp)?;
    let floor = evidence
        .tcb_floor()
        .map_err(|r| anyhow::anyhow!("the guest's report is refused: {}", r.code()))?;
    Ok(json!({
        "measurements": [measurement],
        "host_data": [hex::encode(config)],
        "min_tcb": floor,
    }))
}

/// `{ accepted = [{ mr_td, rtmr0..3, mr_config_id }], min_tcb_eval_data_number }` from a fresh
/// quote of this TD and the collateral the box serves with it.
fn tdx_policy(attester: &dyn Attester, config: &[u8; 32]) -> anyhow::Result<serde_json::Value> {
    let evidence: tdx::Evidence = fresh_evidence(attester, Platform::Tdx)?;
    let quote = tdx::Quote::parse(&evidence.quote)
        .map_err(|r| anyhow::anyhow!("the TD's quote is refused: {}", r.code()))?;
    let eval = evidence
        .tcb_eval_data_number()
        .map_err(|r| anyhow::anyhow!("the TD's collateral is refused: {}", r.code()))?;
    let r = &quote.report;
    Ok(json!({
        "accepted": [{
            "mr_td": hex::encode(r.mr_td),
            "rtmr0": hex::encode(r.rtmr[0]),
            "rtmr1": hex::encode(r.rtmr[1]),
            "rtmr2": hex::encode(r.rtmr[2]),
            "rtmr3": hex::encode(r.rtmr[3]),
            "mr_config_id": hex::encode(BoxConfiguration::launch_value(config, "tdx")),
        }],
        "min_tcb_eval_data_number": eval,
    }))
}
