//! Release-log pins made into measurements (issue 31 item 3). A `[[boxes.pins]]` entry may name
//! a release log (`release_log = { releases, identity + issuer | key, trusted_root }`) instead of
//! raw measurements: when the node starts, every release manifest in `releases` whose Sigstore
//! bundle verifies offline — inclusion proof, checkpoint signed by a pinned log key, signature
//! by the pinned signer, all by `skillbox_attest::release_log` — contributes the measurements it
//! names for the pin's platform, and only those. From then on the pin is matched as a
//! measurement pin (`calls::boxes`): a box whose measurement no verified manifest names is
//! `pin_mismatch`, and a hardware pin's verifier pins the same measurements.
//!
//! A manifest or bundle that does not verify is logged with its closed code and contributes
//! nothing; a pin whose log yields nothing accepts no box. A TDX release-log pin's measurements
//! are box identities (`skillbox_attest::tdx::identity`): its policy table needs no `accepted`,
//! which `HardwarePolicy::from_value` fills with one entry per identity, so the verifier pins
//! the firmware and boot chain the log names; a format 1 manifest's TDX entry (MRTDs, the
//! firmware alone) is refused `tdx_firmware_only`.

use std::path::Path;

use skillbox_attest::release_log::{MAX_BUNDLE, MAX_MANIFEST, ReleaseLog, Signer};

use crate::config::{BoxPin, ReleaseLogPin};

/// The suffix of a release bundle; the manifest is the same name without it.
pub const BUNDLE_SUFFIX: &str = ".sigstore.json";

/// At most this many bundles are read from one `releases` directory.
const MAX_RELEASES: usize = 1024;

/// `pins` with each release-log pin's measurements set to those its verified manifests name
/// for its platform (sorted, without repeats). Other pins are unchanged.
pub fn resolve(pins: &[BoxPin]) -> Vec<BoxPin> {
    pins.iter()
        .map(|pin| {
            let mut pin = pin.clone();
            if let Some(log) = &pin.release_log {
                pin.measurements = logged_measurements(log, &pin.platform);
                if pin.measurements.is_empty() {
                    tracing::warn!(url = %pin.url, "release-log pin: no verified release names a measurement for its platform; the box is not accepted");
                }
            }
            pin
        })
        .collect()
}

/// The pinned log and signer of `log` (refused: a closed code).
pub fn release_log(log: &ReleaseLogPin) -> Result<ReleaseLog, &'static str> {
    let signer = match (&log.identity, &log.issuer, &log.key) {
        (Some(identity), Some(issuer), None) => Signer::Identity {
            identity: identity.clone(),
            issuer: issuer.clone(),
        },
        (None, None, Some(key)) => {
            use base64::Engine;
            let der = base64::engine::general_purpose::STANDARD
                .decode(key)
                .map_err(|_| "bad_signer_key")?;
            Signer::Key(der)
        }
        _ => return Err("bad_signer_key"),
    };
    let root = match &log.trusted_root {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|_| "trusted_root_unreadable")?),
        None => None,
    };
    ReleaseLog::new(signer, root.as_deref()).map_err(|e| e.code())
}

/// The measurements for `platform` named by the manifests of `log.releases` that verify.
pub fn logged_measurements(log: &ReleaseLogPin, platform: &str) -> Vec<String> {
    let verifier = match release_log(log) {
        Ok(v) => v,
        Err(code) => {
            tracing::warn!(code, "release-log pin unusable");
            return Vec::new();
        }
    };
    let dir = Path::new(&log.releases);
    let mut bundles: Vec<_> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(BUNDLE_SUFFIX) && n.len() > BUNDLE_SUFFIX.len())
            })
            .take(MAX_RELEASES)
            .collect(),
        Err(_) => {
            tracing::warn!(
                code = "releases_unreadable",
                "release-log pin: releases directory unreadable"
            );
            return Vec::new();
        }
    };
    bundles.sort();
    let mut out = Vec::new();
    for bundle_path in bundles {
        let name = bundle_path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let manifest_path = dir.join(&name[..name.len() - BUNDLE_SUFFIX.len()]);
        let verified = read_bounded(&manifest_path, MAX_MANIFEST)
            .zip(read_bounded(&bundle_path, MAX_BUNDLE))
            .ok_or("release_unreadable")
            .and_then(|(m, b)| verifier.verify_manifest(&m, &b).map_err(|e| e.code()));
        match verified.and_then(|m| {
            let named = m.on(platform).map_err(|e| e.code())?;
            Ok((m.release.clone(), named.to_vec()))
        }) {
            Ok((release, named)) => {
                tracing::info!(%release, "release-log pin: release verified");
                out.extend(named);
            }
            Err(code) => tracing::warn!(%name, code, "release-log pin: release refused"),
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The file's bytes, if it is a regular file no larger than `max`.
fn read_bounded(path: &Path, max: usize) -> Option<Vec<u8>> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > max as u64 {
        return None;
    }
    std::fs::read(path).ok()
}
