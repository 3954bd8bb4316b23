//! The receipt: the box's DSSE-signed statement that a run happened, with fixed fields only and
//! no content, signed by the run's Ed25519 key (which the attestation binds to the run).

use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};

use crate::attest::VerifiedRun;
use crate::dsse::{Envelope, RECEIPT_PAYLOAD_TYPE};
use crate::error::{JcError, Result};
use crate::jcs;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Ok,
    Failed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    pub run_id: String,
    pub program_hash: String,
    pub status: RunStatus,
    /// Unix seconds rounded down to the minute: coarse, so it says little about the material.
    pub finished_at: u64,
    /// Size bucket of the sealed answer's plaintext (0 when there is none).
    pub output_bucket: u64,
    /// In a guarded program's receipt: SHA-256 (hex) of the sealed [`OwnerNote`], so the
    /// owner's note is the box's and not one anyone could seal to the owner's public key. The
    /// seal is randomised and of one size, so the digest tells the caller nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_note_sha256: Option<String>,
}

/// What the box tells the owner alone about a guarded run: whether the output guard withheld or
/// regenerated the answer (no content, no score) — and nothing of what the answer covered.
/// Notes once carried the released answer's coverage levels (which of the body's 16 regions it
/// touched and a secret level) for the owner's node to add up per peer and day; the owner's
/// body decides which of its phrases the model repeats, so a codebook body ("write phrase i
/// iff bit i of the user's source is 1") read 16 bits of the caller's sources per call off
/// them. The box now keeps that tally itself ([`crate::day`]) against the limits the owner
/// stakes, and the owner learns only the run's outcome: `coverage_exceeded` once the day is
/// spent. Sealed to the owner's node key (`seal::Purpose::OwnerNote`) beside the receipt,
/// never in it: the receipt goes to both parties, and a caller told of each catch could ask
/// "if the code's first digit is below 5, print the code" and read the answer off that one
/// bit. Every guarded run carries a note of one sealed size (`run::OWNER_NOTE_PADDED`, 128
/// bytes of plaintext), acted or not, failed or not, whatever the program or body, so its
/// presence and its length say nothing of the run either.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerNote {
    pub guard_acted: bool,
    /// `None` in every note the box seals now (the box keeps the day's tally itself). Only a
    /// note a box sealed before that, made again from its stored record, carries the released
    /// answer's regions and secret level here.
    pub coverage: Option<skillbox_guard::CoverageLevels>,
}

impl OwnerNote {
    /// The note's first sealed entry: whether the guard acted.
    pub const ENTRY: &'static str = "guard_acted";
    /// The released answer's regions and secret level
    /// (`skillbox_guard::CoverageLevels::to_bytes`, form 2; form 1, a summed words level, is
    /// refused: the owner's node would not know where its words were).
    pub const COVERAGE_ENTRY: &'static str = "coverage_levels";
    /// What a note sealed before levels carried instead: which body words and secret
    /// characters the answer covered (`skillbox_guard::Coverage::to_bytes`). Only a run stored
    /// then is sealed again with it (its digest is the receipt's); an owner does not read it.
    pub const POSITIONS_ENTRY: &'static str = "coverage";
    /// Zeros that bring every note to one length (`run::OWNER_NOTE_PADDED`).
    pub const PADDING_ENTRY: &'static str = "padding";

    /// Notes stored before the fixed size only (made again as they were sealed; every new note
    /// is `run::OWNER_NOTE_PADDED`). The plaintext length every note of a program with this
    /// body limit was padded to: enough for the coverage of any body within the limit (a word
    /// is two bytes at least, a canary's characters are the body's), so the length depends on
    /// the program, which both parties signed, and never on the body or the answer.
    pub fn padded_len(body_max_bytes: u64) -> u64 {
        body_max_bytes.min(skillbox_guard::MAX_BODY_BYTES as u64) / 4 + 1024
    }

    /// Notes stored before the fixed size only, as [`Self::padded_len`]. The plaintext length
    /// a note was padded to when the owner's body was `body_len` bytes:
    /// [`Self::padded_len`] of the body's size bucket (the next power of two, at least 1 KiB),
    /// never past the program's limit's. Enough for the coverage of any body of that bucket, so
    /// every run of the program pads to it whatever the answer covered, acted or failed; and
    /// the bucket is what the owner's sealed stake already shows the box operator and the path,
    /// and what a caller may learn by probing limits (the owner compares buckets, never exact
    /// lengths). Padding to the limit's size instead cost a 4 KiB skill 257 KiB of zeros per
    /// run — sealed, hashed, base64-encoded and sent by the box, decoded and opened by the
    /// owner: about a tenth of all the CPU a call took (issue 33).
    pub fn padded_len_for(body_len: u64, body_max_bytes: u64) -> u64 {
        Self::padded_len(crate::seal::bucket(body_len).min(body_max_bytes))
    }
}

/// Coarse time for receipts.
pub fn coarse(now: u64) -> u64 {
    now - now % 60
}

pub fn sign(receipt: &Receipt, key: &SigningKey) -> Result<Envelope> {
    let mut env = Envelope::new(RECEIPT_PAYLOAD_TYPE, &jcs::to_canonical(receipt)?);
    env.sign(key)?;
    Ok(env)
}

/// Check a receipt with the run key from the verified attestation, for that run and program.
pub fn verify(env: &Envelope, run: &VerifiedRun) -> Result<Receipt> {
    let payload = env.verified_payload(RECEIPT_PAYLOAD_TYPE, &run.receipt_key, "run")?;
    let receipt: Receipt = serde_json::from_value(jcs::parse_canonical(&payload)?)
        .map_err(|e| JcError::Envelope(format!("receipt: {e}")))?;
    if receipt.run_id != run.run_id {
        return Err(JcError::StatementRunMismatch {
            found: receipt.run_id.chars().take(64).collect(),
        });
    }
    if receipt.program_hash != run.program_hash.to_hex() {
        return Err(JcError::StatementProgramMismatch {
            found: receipt.program_hash.chars().take(64).collect(),
        });
    }
    Ok(receipt)
}
