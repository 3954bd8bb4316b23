//! At-rest sealing of sources with the node's data key, and the node's identity key.
//!
//! The data key file holds 32 random bytes. Two sub-keys are derived from it (HMAC-SHA256 as a
//! KDF with fixed labels) so the cipher key and the digest key are never the same bytes: one seals
//! source content (XChaCha20-Poly1305, a fresh random 24-byte nonce per write, AAD binding the
//! source's kind and name so a row cannot be moved to another name), the other keys the source
//! digest so a short secret cannot be confirmed by hashing guesses.

use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

pub const KEY_LEN: usize = 32;
pub const NONCE_LEN: usize = 24;

type HmacSha256 = Hmac<Sha256>;

/// Fill a buffer from the OS random source.
pub fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut out = [0u8; N];
    getrandom::fill(&mut out)
        .map_err(|e| std::io::Error::other(format!("OS random source: {e}")))?;
    Ok(out)
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// The node's at-rest key, split into its two sub-keys. Debug never prints key material.
pub struct DataKey {
    seal: Zeroizing<[u8; KEY_LEN]>,
    digest: Zeroizing<[u8; KEY_LEN]>,
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(..)")
    }
}

/// What a sealed value is bound to (its AAD); changing any part makes opening fail.
pub(crate) fn source_aad(kind: &str, name: &str) -> Vec<u8> {
    let mut aad = b"skillbox/source/v1\0".to_vec();
    aad.extend_from_slice(kind.as_bytes());
    aad.push(0);
    aad.extend_from_slice(name.as_bytes());
    aad
}

pub(crate) const KEY_CHECK_AAD: &[u8] = b"skillbox/key-check/v1";
pub(crate) const KEY_CHECK_PLAINTEXT: &[u8] = b"skillbox data key check";

impl DataKey {
    pub fn from_bytes(raw: &[u8; KEY_LEN]) -> DataKey {
        DataKey {
            seal: Zeroizing::new(hmac(raw, &[b"skillbox/data-key/seal/v1"])),
            digest: Zeroizing::new(hmac(raw, &[b"skillbox/data-key/digest/v1"])),
        }
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new_from_slice(self.seal.as_ref()).expect("key is 32 bytes")
    }

    /// Seal `plaintext` under a fresh random nonce.
    pub(crate) fn seal(
        &self,
        aad: &[u8],
        plaintext: &[u8],
    ) -> std::io::Result<([u8; NONCE_LEN], Vec<u8>)> {
        let nonce_bytes = random_bytes::<NONCE_LEN>()?;
        let nonce = chacha20poly1305::XNonce::from(nonce_bytes);
        let ciphertext = self
            .cipher()
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .map_err(|_| std::io::Error::other("sealing failed"))?;
        Ok((nonce_bytes, ciphertext))
    }

    /// Open a sealed value; `None` when the tag does not verify (wrong key, tampered row, or
    /// a row moved to another name).
    pub(crate) fn open(
        &self,
        aad: &[u8],
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Option<Zeroizing<Vec<u8>>> {
        let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
        let nonce = chacha20poly1305::XNonce::from(nonce);
        self.cipher()
            .decrypt(
                &nonce,
                Payload {
                    msg: ciphertext,
                    aad,
                },
            )
            .ok()
            .map(Zeroizing::new)
    }

    /// Keyed digest of content: stable for equal content on this node, useless to a guesser.
    pub(crate) fn digest(&self, content: &[u8]) -> String {
        format!(
            "hmac-sha256:{}",
            hex::encode(hmac(self.digest.as_ref(), &[content]))
        )
    }
}

/// The node's Ed25519 identity: the 32-byte seed in `node.key`.
pub struct NodeKey {
    seed: Zeroizing<[u8; KEY_LEN]>,
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeKey({})", self.peer_id())
    }
}

impl NodeKey {
    pub fn from_seed(seed: &[u8; KEY_LEN]) -> NodeKey {
        NodeKey {
            seed: Zeroizing::new(*seed),
        }
    }

    /// The seed (for the peer layer, which builds its libp2p keypair from it).
    pub fn seed(&self) -> &[u8; KEY_LEN] {
        &self.seed
    }

    /// The 32-byte Ed25519 public key.
    pub fn public_key(&self) -> [u8; 32] {
        ed25519_dalek::SigningKey::from_bytes(&self.seed)
            .verifying_key()
            .to_bytes()
    }

    /// Lowercase hex of the public key (how programs and payloads name a node's key).
    pub fn public_key_hex(&self) -> String {
        hex::encode(self.public_key())
    }

    /// The libp2p PeerId of this key, in its usual base58 form (`12D3KooW...`): the identity
    /// multihash of the protobuf-encoded public key (type Ed25519 = 1), as libp2p defines it.
    pub fn peer_id(&self) -> String {
        let mut bytes = Vec::with_capacity(38);
        bytes.extend_from_slice(&[0x00, 36, 0x08, 0x01, 0x12, 32]);
        bytes.extend_from_slice(&self.public_key());
        bs58::encode(bytes).into_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_roundtrip_and_binding() {
        let key = DataKey::from_bytes(&[7u8; 32]);
        let aad = source_aad("secret", "openrouter-key");
        let (nonce, ct) = key.seal(&aad, b"sk-or-123").expect("seal");
        assert!(!ct.windows(9).any(|w| w == b"sk-or-123"));
        assert_eq!(
            key.open(&aad, &nonce, &ct).expect("opens").as_slice(),
            b"sk-or-123"
        );
        // Another name, another kind, another key: all refuse.
        assert!(
            key.open(&source_aad("secret", "other"), &nonce, &ct)
                .is_none()
        );
        assert!(
            key.open(&source_aad("text", "openrouter-key"), &nonce, &ct)
                .is_none()
        );
        assert!(
            DataKey::from_bytes(&[8u8; 32])
                .open(&aad, &nonce, &ct)
                .is_none()
        );
        // Fresh nonce per write.
        let (nonce2, ct2) = key.seal(&aad, b"sk-or-123").expect("seal");
        assert_ne!(nonce, nonce2);
        assert_ne!(ct, ct2);
    }

    #[test]
    fn digest_is_keyed() {
        let a = DataKey::from_bytes(&[1u8; 32]);
        let b = DataKey::from_bytes(&[2u8; 32]);
        assert_eq!(a.digest(b"x"), a.digest(b"x"));
        assert_ne!(a.digest(b"x"), a.digest(b"y"));
        assert_ne!(a.digest(b"x"), b.digest(b"x"));
    }

    #[test]
    fn peer_id_has_libp2p_shape() {
        let k = NodeKey::from_seed(&[3u8; 32]);
        let id = k.peer_id();
        assert!(id.starts_with("12D3KooW"), "{id}");
        assert_eq!(id.len(), 52);
        assert_eq!(k.public_key_hex().len(), 64);
    }
}
