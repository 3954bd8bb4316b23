//! DSSE envelopes (https://github.com/secure-systems-lab/dsse, protocol v1) signed with Ed25519.
//!
//! Signatures are over PAE(payloadType, payload), never over the JSON envelope, so the payload
//! bytes travel untouched and both parties sign the very same bytes. `keyid` is the lowercase hex
//! Ed25519 public key: a verifier still checks it against the keys the program names.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
use ed25519_dalek::{Signature as EdSignature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::error::{JcError, Result};
use crate::program::{PROGRAM_PAYLOAD_TYPE, Program, ProgramHash, Role, decode_hex32};

/// Payload type of a party's signed action (stake, submit, cancel).
pub const ACTION_PAYLOAD_TYPE: &str = "application/vnd.skillbox.action+json";
/// Payload type of a receipt.
pub const RECEIPT_PAYLOAD_TYPE: &str = "application/vnd.skillbox.receipt+json";

/// Pre-Authentication Encoding, exactly as DSSE v1 defines it:
/// `"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`, LEN as ASCII decimal.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// base64 of the payload bytes.
    pub payload: String,
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    pub signatures: Vec<EnvelopeSignature>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeSignature {
    #[serde(default)]
    pub keyid: String,
    /// base64 of the 64-byte Ed25519 signature.
    pub sig: String,
}

/// Lowercase hex of an Ed25519 public key: how programs and keyids name a node key.
pub fn key_hex(key: &VerifyingKey) -> String {
    hex::encode(key.to_bytes())
}

fn b64_decode(what: &str, s: &str) -> Result<Vec<u8>> {
    // DSSE accepts standard or URL-safe base64 on input.
    STANDARD
        .decode(s)
        .or_else(|_| URL_SAFE.decode(s))
        .or_else(|_| URL_SAFE_NO_PAD.decode(s))
        .map_err(|_| JcError::Envelope(format!("{what} is not base64")))
}

impl Envelope {
    /// An unsigned envelope around `payload`.
    pub fn new(payload_type: &str, payload: &[u8]) -> Envelope {
        Envelope {
            payload: STANDARD.encode(payload),
            payload_type: payload_type.to_owned(),
            signatures: Vec::new(),
        }
    }

    pub fn payload_bytes(&self) -> Result<Vec<u8>> {
        b64_decode("payload", &self.payload)
    }

    /// Add a signature by `key` over PAE(payloadType, payload).
    pub fn sign(&mut self, key: &SigningKey) -> Result<()> {
        let payload = self.payload_bytes()?;
        let message = pae(&self.payload_type, &payload);
        let sig = key.sign(&message);
        // A signature this key just made over these bytes verifies (a signing key's public key
        // is never of small order, its signatures are canonical): the signer's own checks of
        // it later — the caller's at the cosign, the owner's on each step — need not verify it
        // in full again (issue 33).
        verified::keep(verified::digest(&key.verifying_key(), &sig, &message));
        self.signatures.push(EnvelopeSignature {
            keyid: key_hex(&key.verifying_key()),
            sig: STANDARD.encode(sig.to_bytes()),
        });
        Ok(())
    }

    /// The payload, after checking its type and that one signature of `key` verifies.
    pub fn verified_payload(
        &self,
        expected_type: &str,
        key: &VerifyingKey,
        role: &str,
    ) -> Result<Vec<u8>> {
        self.check_type(expected_type)?;
        let payload = self.payload_bytes()?;
        let message = pae(&self.payload_type, &payload);
        let want = key_hex(key);
        let sig =
            self.signatures
                .iter()
                .find(|s| s.keyid == want)
                .ok_or(JcError::SignatureMissing {
                    role: static_role(role),
                })?;
        verify_sig(key, &message, &sig.sig, role)?;
        Ok(payload)
    }

    pub fn check_type(&self, expected: &str) -> Result<()> {
        if self.payload_type != expected {
            return Err(JcError::PayloadType {
                expected: expected.to_owned(),
                found: self.payload_type.chars().take(128).collect(),
            });
        }
        Ok(())
    }

    pub fn from_json(bytes: &[u8]) -> Result<Envelope> {
        serde_json::from_slice(bytes).map_err(|e| JcError::Envelope(e.to_string()))
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an envelope of strings always serializes")
    }
}

fn static_role(role: &str) -> &'static str {
    match role {
        "caller" => "caller",
        "owner" => "owner",
        "run" => "run",
        _ => "signer",
    }
}

fn verify_sig(key: &VerifyingKey, message: &[u8], sig_b64: &str, role: &str) -> Result<()> {
    let raw = b64_decode("signature", sig_b64)?;
    let sig = EdSignature::from_slice(&raw).map_err(|_| JcError::BadSignature {
        role: role.to_owned(),
    })?;
    let seen = verified::digest(key, &sig, message);
    if verified::holds(&seen) {
        return Ok(());
    }
    key.verify_strict(message, &sig)
        .map_err(|_| JcError::BadSignature {
            role: role.to_owned(),
        })?;
    verified::keep(seen);
    Ok(())
}

/// Signatures that verified lately, by the SHA-256 of the key, the signature and the message:
/// one call's program envelope is checked on several steps of each node (the caller's cosign
/// and open, the owner's admission and run check), and the same key, signature and bytes verify
/// the same way every time (issue 33: the repeats were ~3 % of a node's CPU). Only a signature
/// that verified is kept; anything else — another byte anywhere — is verified in full. At
/// most [`verified::KEPT`] digests, the oldest let go first.
mod verified {
    use std::sync::{LazyLock, Mutex, MutexGuard};

    use ed25519_dalek::{Signature, VerifyingKey};
    use sha2::{Digest, Sha256};

    use crate::kept::Kept;

    /// A few thousand calls in flight, several signatures each; 32 bytes a digest.
    pub(super) const KEPT: usize = 16_384;

    fn seen() -> MutexGuard<'static, Kept<[u8; 32], ()>> {
        static SEEN: LazyLock<Mutex<Kept<[u8; 32], ()>>> =
            LazyLock::new(|| Mutex::new(Kept::new(KEPT, |_| 1)));
        SEEN.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The key and the signature have fixed lengths (32 and 64 bytes): the three cannot run
    /// into each other.
    pub(super) fn digest(key: &VerifyingKey, sig: &Signature, message: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"skillbox-verified-sig-v1\0");
        h.update(key.as_bytes());
        h.update(sig.to_bytes());
        h.update(message);
        h.finalize().into()
    }

    pub(super) fn holds(d: &[u8; 32]) -> bool {
        seen().get(d).is_some()
    }

    pub(super) fn keep(d: [u8; 32]) {
        seen().keep(d, ());
    }
}

fn verifying_key(hex32: &str, field: &str) -> Result<VerifyingKey> {
    let bytes = decode_hex32(hex32).ok_or_else(|| JcError::ProgramInvalid {
        field: field.into(),
        reason: "not hex".into(),
    })?;
    crate::program::ed25519_key(&bytes).ok_or_else(|| JcError::ProgramInvalid {
        field: field.into(),
        reason: "not an Ed25519 key".into(),
    })
}

/// A program both parties approved: the canonical bytes, the typed program and its hash.
#[derive(Clone, Debug)]
pub struct ApprovedProgram {
    pub bytes: Vec<u8>,
    pub program: Program,
    pub hash: ProgramHash,
}

/// Sign a program as one party: a new envelope, or a second signature on the same bytes.
pub fn sign_program(program: &Program, key: &SigningKey) -> Result<Envelope> {
    let bytes = program.to_canonical()?;
    // What parsing these bytes back would give, when it would parse at all: the signer's
    // first parse of its own program (the caller's, at the cosign) is not one (issue 33).
    program.keep_as_parsed(&bytes);
    let mut env = Envelope::new(PROGRAM_PAYLOAD_TYPE, &bytes);
    env.sign(key)?;
    Ok(env)
}

/// jc.approve's check: the payload is a canonical, valid program, every signature is by a party
/// the program names and verifies, and both parties signed. Expiry is the caller's to check.
pub fn approved_program(env: &Envelope) -> Result<ApprovedProgram> {
    approved_with(env, Program::from_canonical)
}

/// [`approved_program`] for a program the box's run store kept (the row's seal already
/// checked): its template may be one this build no longer runs
/// ([`Program::from_stored_canonical`]); every other rule and both signatures still hold.
pub(crate) fn stored_program(env: &Envelope) -> Result<ApprovedProgram> {
    approved_with(env, Program::from_stored_canonical)
}

fn approved_with(env: &Envelope, parse: fn(&[u8]) -> Result<Program>) -> Result<ApprovedProgram> {
    env.check_type(PROGRAM_PAYLOAD_TYPE)?;
    let bytes = env.payload_bytes()?;
    let program = parse(&bytes)?;
    let caller = verifying_key(&program.parties.caller.node_key, "parties.caller.node_key")?;
    let owner = verifying_key(&program.parties.owner.node_key, "parties.owner.node_key")?;
    let message = pae(&env.payload_type, &bytes);
    if env.signatures.len() > 4 {
        return Err(JcError::Envelope("more signatures than parties".into()));
    }
    let (mut by_caller, mut by_owner) = (false, false);
    for s in &env.signatures {
        // A signature from anyone else is refused outright, even next to two good ones.
        let role = if s.keyid == program.parties.caller.node_key {
            "caller"
        } else if s.keyid == program.parties.owner.node_key {
            "owner"
        } else {
            return Err(JcError::SignerNotInProgram {
                keyid: s.keyid.chars().take(64).collect(),
            });
        };
        let key = if role == "caller" { &caller } else { &owner };
        verify_sig(key, &message, &s.sig, role)?;
        // One node may be both parties (a node calling its own skill still goes through a box).
        if s.keyid == program.parties.caller.node_key {
            by_caller = true;
        }
        if s.keyid == program.parties.owner.node_key {
            by_owner = true;
        }
    }
    if !by_caller {
        return Err(JcError::SignatureMissing { role: "caller" });
    }
    if !by_owner {
        return Err(JcError::SignatureMissing { role: "owner" });
    }
    let hash = ProgramHash::of(&bytes);
    Ok(ApprovedProgram {
        bytes,
        program,
        hash,
    })
}

/// A party's signed go-ahead for one step of one run (stake, submit, cancel).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartyAction {
    pub action: String,
    pub role: Role,
    pub run_id: String,
    pub program_hash: String,
    /// For a stake: sha256 of the sealed bytes, so the signature covers exactly this stake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stake_sha256: Option<String>,
}

pub fn sign_action(action: &PartyAction, key: &SigningKey) -> Result<Envelope> {
    let bytes = crate::jcs::to_canonical(action)?;
    let mut env = Envelope::new(ACTION_PAYLOAD_TYPE, &bytes);
    env.sign(key)?;
    Ok(env)
}

/// The box's check of a party action: signed by the node key the program names for `role`, for
/// this run and program, and the action expected.
pub fn verify_action(
    env: &Envelope,
    program: &ApprovedProgram,
    run_id: &str,
    action: &str,
) -> Result<PartyAction> {
    env.check_type(ACTION_PAYLOAD_TYPE)?;
    let bytes = env.payload_bytes()?;
    let parsed: PartyAction = serde_json::from_value(crate::jcs::parse_canonical(&bytes)?)
        .map_err(|e| JcError::Envelope(format!("action: {e}")))?;
    let key_field = match parsed.role {
        Role::Caller => &program.program.parties.caller.node_key,
        Role::Owner => &program.program.parties.owner.node_key,
    };
    let key = verifying_key(key_field, "parties")?;
    env.verified_payload(ACTION_PAYLOAD_TYPE, &key, parsed.role.as_str())?;
    if parsed.action != action {
        return Err(JcError::Envelope(format!(
            "action is {:?}, expected {action:?}",
            parsed.action.chars().take(32).collect::<String>()
        )));
    }
    if parsed.run_id != run_id {
        return Err(JcError::Envelope("action is signed for another run".into()));
    }
    if parsed.program_hash != program.hash.to_hex() {
        return Err(JcError::Envelope(
            "action is signed for another program".into(),
        ));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::tests::sample;

    /// The test vector of the DSSE spec (protocol.md): PAE of "http://example.com/HelloWorld"
    /// and "hello world".
    #[test]
    fn dsse_spec_pae_vector() {
        let got = pae("http://example.com/HelloWorld", b"hello world");
        assert_eq!(
            got,
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ".to_vec());
    }

    fn keys() -> (SigningKey, SigningKey, SigningKey) {
        (
            SigningKey::from_bytes(&[1; 32]),
            SigningKey::from_bytes(&[2; 32]),
            SigningKey::from_bytes(&[3; 32]),
        )
    }

    fn program(c: &SigningKey, o: &SigningKey) -> Program {
        sample(
            &key_hex(&c.verifying_key()),
            &key_hex(&o.verifying_key()),
            &"22".repeat(32),
        )
    }

    /// The sample program and its envelope, signed by both parties.
    fn signed_by_both(c: &SigningKey, o: &SigningKey) -> (Program, Envelope) {
        let p = program(c, o);
        let mut env = sign_program(&p, c).expect("sign");
        env.sign(o).expect("sign");
        (p, env)
    }

    /// `env` carrying another program's bytes (one more output byte) under its signatures.
    fn with_other_bytes(p: &Program, env: &Envelope) -> Envelope {
        let mut other = p.clone();
        other.output.max_bytes += 1;
        let mut moved = env.clone();
        moved.payload = STANDARD.encode(other.to_canonical().expect("canonical"));
        moved
    }

    #[test]
    fn approval_needs_both_parties_and_only_them() {
        let (c, o, stranger) = keys();
        let p = program(&c, &o);
        let mut env = sign_program(&p, &c).expect("sign");
        assert!(matches!(
            approved_program(&env),
            Err(JcError::SignatureMissing { role: "owner" })
        ));
        env.sign(&o).expect("sign");
        let ok = approved_program(&env).expect("approved");
        assert_eq!(ok.hash, p.hash().expect("hash"));

        let mut only_owner = sign_program(&p, &o).expect("sign");
        assert!(matches!(
            approved_program(&only_owner),
            Err(JcError::SignatureMissing { role: "caller" })
        ));
        only_owner.sign(&stranger).expect("sign");
        assert!(matches!(
            approved_program(&only_owner),
            Err(JcError::SignerNotInProgram { .. })
        ));

        let mut with_stranger = env.clone();
        with_stranger.sign(&stranger).expect("sign");
        assert!(matches!(
            approved_program(&with_stranger),
            Err(JcError::SignerNotInProgram { .. })
        ));

        // A signature claiming the owner's keyid but made by another key.
        let mut forged = sign_program(&p, &c).expect("sign");
        let mut by_stranger = sign_program(&p, &stranger).expect("sign");
        by_stranger.signatures[0].keyid = key_hex(&o.verifying_key());
        forged.signatures.push(by_stranger.signatures[0].clone());
        assert!(
            matches!(approved_program(&forged), Err(JcError::BadSignature { ref role }) if role == "owner")
        );

        let mut wrong_type = env;
        wrong_type.payload_type = "application/json".into();
        assert!(matches!(
            approved_program(&wrong_type),
            Err(JcError::PayloadType { .. })
        ));
    }

    #[test]
    fn signature_covers_exact_bytes() {
        let (c, o, _) = keys();
        let (p, env) = signed_by_both(&c, &o);
        assert!(matches!(
            approved_program(&with_other_bytes(&p, &env)),
            Err(JcError::BadSignature { .. })
        ));
    }

    /// Issue 33: a signature that verified is not verified again for the same key and bytes;
    /// right after it did, another signature, other bytes or another key still fail.
    #[test]
    fn a_verified_signature_is_kept_and_nothing_else_rides_on_it() {
        let (c, o, _) = keys();
        let (p, env) = signed_by_both(&c, &o);
        let bytes = env.payload_bytes().expect("payload");
        let message = pae(&env.payload_type, &bytes);
        let sig = EdSignature::from_slice(&b64_decode("sig", &env.signatures[0].sig).expect("b64"))
            .expect("sig");
        let kept = verified::digest(&c.verifying_key(), &sig, &message);
        approved_program(&env).expect("approved");
        assert!(verified::holds(&kept), "the verified signature is kept");

        let mut forged = env.clone();
        let mut raw = b64_decode("sig", &forged.signatures[0].sig).expect("b64");
        raw[0] ^= 1;
        forged.signatures[0].sig = STANDARD.encode(&raw);
        assert!(matches!(
            approved_program(&forged),
            Err(JcError::BadSignature { .. })
        ));
        assert!(matches!(
            approved_program(&with_other_bytes(&p, &env)),
            Err(JcError::BadSignature { .. })
        ));
        // The caller's signature offered as the owner's: its key differs.
        let owner = o.verifying_key();
        assert!(
            verify_sig(&owner, &message, &env.signatures[0].sig, "owner").is_err(),
            "a kept signature is kept for its key only"
        );
    }

    /// A signer's own signature is kept as it is made (it verifies: the signer checks it again
    /// at the cosign without an Ed25519 verification); the same signature over other bytes, or
    /// as another key's, is not.
    #[test]
    fn a_signature_just_made_is_kept_for_its_key_and_bytes_only() {
        let (c, o, _) = keys();
        let mut p = program(&c, &o);
        p.expires_at = 4_000_000_007;
        let env = sign_program(&p, &c).expect("signed");
        let message = pae(&env.payload_type, &env.payload_bytes().expect("payload"));
        let sig = EdSignature::from_slice(&b64_decode("sig", &env.signatures[0].sig).expect("b64"))
            .expect("sig");
        assert!(verified::holds(&verified::digest(
            &c.verifying_key(),
            &sig,
            &message
        )));
        assert!(!verified::holds(&verified::digest(
            &o.verifying_key(),
            &sig,
            &message
        )));
        let other = with_other_bytes(&p, &env);
        let other_message = pae(
            &other.payload_type,
            &other.payload_bytes().expect("payload"),
        );
        assert!(!verified::holds(&verified::digest(
            &c.verifying_key(),
            &sig,
            &other_message
        )));
        assert!(
            verify_sig(
                &c.verifying_key(),
                &other_message,
                &env.signatures[0].sig,
                "caller"
            )
            .is_err()
        );
    }
}
