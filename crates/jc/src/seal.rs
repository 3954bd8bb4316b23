//! Sealing material to a box run (stakes) and the answer to the caller (result), with HPKE base
//! mode: X25519-HKDF-SHA256, HKDF-SHA256, ChaCha20-Poly1305 (RFC 9180).
//!
//! The `info` binds the purpose, the role, the run id and the program hash, so a stake sealed
//! for another run, program or role does not open. Plaintext is framed as named entries, then
//! padded with zeros to a power-of-two size bucket, then sealed in fixed 16 KiB chunks with the
//! HPKE context's sequence nonces; the last chunk is marked in its AAD so a truncated stream is
//! refused. Sealing reads from `std::io::Read`, so a source store can stream straight in.
//!
//! Wire form: `"SBSEAL1\n"` ‖ enc (32 bytes) ‖ { u32 BE ciphertext length ‖ ciphertext }*.

use std::io::Read;

use hpke::{Deserializable, Kem as _, OpModeR, OpModeS, Serializable};
use zeroize::Zeroizing;

use crate::error::{JcError, Result};
use crate::program::{Program, ProgramHash, Role};

pub type Kem = hpke::kem::X25519HkdfSha256;
pub type Kdf = hpke::kdf::HkdfSha256;
pub type Aead = hpke::aead::ChaCha20Poly1305;

const MAGIC: &[u8; 8] = b"SBSEAL1\n";
/// Plaintext bytes per sealed chunk.
pub const CHUNK: usize = 16 * 1024;
const TAG_LEN: usize = 16;
/// Framing bytes per entry besides its name: tag, name length, u64 content length.
pub const ENTRY_OVERHEAD: u64 = 1 + 1 + 8;
const SMALLEST_BUCKET: u64 = 1024;

/// The size bucket `n` bytes are padded to: the next power of two, at least 1 KiB.
pub fn bucket(n: u64) -> u64 {
    n.max(SMALLEST_BUCKET).next_power_of_two()
}

/// The result's entries: the answer, then whether it was cut to the program's bound.
pub const ANSWER_ENTRY: &str = "answer";
pub const TRUNCATED_ENTRY: &str = "truncated";

/// The plaintext every sealed answer of a program is padded to, whatever the answer: its two
/// entries with an answer of `max_answer` bytes (the program's output bound, or the withheld
/// answer when that is longer), the truncated flag and the end marker. Fixed by the program
/// both parties signed, so neither the receipt's `output_bucket` nor the sealed length says
/// how long the answer was: a bucket of the answer's own length was a channel the owner's
/// body steered ("answer at length if the caller's source says X") and the owner read off its
/// fetch of the result (2–3.5 bits a call). Exact rather than a power of two: a 1 MiB bound
/// with its 37 bytes of framing would double to 2 MiB. At least the smallest bucket, as every
/// seal is.
pub fn answer_padded_len(max_answer: u64) -> u64 {
    let framed = max_answer
        + 2 * ENTRY_OVERHEAD
        + ANSWER_ENTRY.len() as u64
        + TRUNCATED_ENTRY.len() as u64
        + 1
        + 1;
    framed.max(SMALLEST_BUCKET)
}

/// Largest sealed size for a plaintext of at most `max_plain` bytes (framing included).
pub fn sealed_limit(max_plain: u64) -> u64 {
    sealed_len(bucket(max_plain))
}

/// The sealed size of exactly `plain` bytes of framed, padded plaintext.
pub fn sealed_len(plain: u64) -> u64 {
    let chunks = plain.div_ceil(CHUNK as u64);
    MAGIC.len() as u64 + 32 + plain + chunks * (4 + TAG_LEN as u64)
}

/// What a seal is for; part of `info`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    Stake(Role),
    Result,
    /// The owner's note on a guarded run (whether the guard acted), sealed to the owner.
    OwnerNote,
}

/// HPKE `info` for a seal: purpose and role, run id and program hash.
pub fn info(purpose: Purpose, run_id: &str, program: &ProgramHash) -> Vec<u8> {
    let label = match purpose {
        Purpose::Stake(Role::Caller) => "stake/caller",
        Purpose::Stake(Role::Owner) => "stake/owner",
        Purpose::Result => "result/caller",
        Purpose::OwnerNote => "note/owner",
    };
    let mut out = Vec::with_capacity(96);
    out.extend_from_slice(b"skillbox/v1 ");
    out.extend_from_slice(label.as_bytes());
    out.push(0);
    out.extend_from_slice(run_id.as_bytes());
    out.push(0);
    out.extend_from_slice(&program.0);
    out
}

fn chunk_aad(last: bool) -> [u8; 21] {
    let mut aad = *b"skillbox chunk final?";
    aad[20] = if last { b'1' } else { b'0' };
    aad
}

/// An X25519 key pair for HPKE: the run's key at the box, the caller's result key at the node.
pub struct HpkeKeyPair {
    secret: <Kem as hpke::Kem>::PrivateKey,
    /// Worked out from the secret when first asked for: a pair rebuilt only to open a seal never
    /// needs it (HPKE's decapsulation derives it itself), and deriving it is a scalar
    /// multiplication, about 20 µs, on every answered call (issue 33).
    public: std::sync::OnceLock<[u8; 32]>,
}

impl HpkeKeyPair {
    pub fn generate() -> HpkeKeyPair {
        let (secret, public) = Kem::gen_keypair();
        let mut pk = [0u8; 32];
        pk.copy_from_slice(&public.to_bytes());
        HpkeKeyPair {
            secret,
            public: pk.into(),
        }
    }
    /// Rebuild from stored secret bytes (the node keeps the result key of a call until answered).
    pub fn from_secret_bytes(bytes: &[u8]) -> Result<HpkeKeyPair> {
        let secret = <Kem as hpke::Kem>::PrivateKey::from_bytes(bytes)
            .map_err(|_| JcError::Sealed("not an X25519 secret key".into()))?;
        Ok(HpkeKeyPair {
            secret,
            public: std::sync::OnceLock::new(),
        })
    }
    pub fn secret_bytes(&self) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(self.secret.to_bytes().to_vec())
    }
    /// The owner's note key: its node key's Ed25519 secret as an X25519 one (the scalar
    /// `to_scalar_bytes` gives, which X25519 clamps as Ed25519 does), so the box can seal to the
    /// owner without a second key in the program. One key pair for signing and this KEM is
    /// sound (Thormarker, "On using the same key pair for Ed25519 and an X25519 based KEM",
    /// eprint 2021/509); the `note/owner` info keeps the note apart from every other seal.
    pub fn from_node_key(key: &ed25519_dalek::SigningKey) -> Result<HpkeKeyPair> {
        let scalar = Zeroizing::new(key.to_scalar_bytes());
        HpkeKeyPair::from_secret_bytes(&scalar[..])
    }

    pub fn public(&self) -> [u8; 32] {
        *self.public.get_or_init(|| {
            let mut pk = [0u8; 32];
            pk.copy_from_slice(&Kem::sk_to_pk(&self.secret).to_bytes());
            pk
        })
    }
    pub fn public_hex(&self) -> String {
        hex::encode(self.public())
    }
}

/// The X25519 key an owner note is sealed to: the owner's Ed25519 node key in Montgomery form
/// (see [`HpkeKeyPair::from_node_key`]).
/// A box seals a note to the same few owners' keys run after run: a key worked out once (a
/// point decompression and a field inversion, ~15 µs) is kept (issue 33). Only keys that
/// decoded are kept, under their exact bytes.
pub fn owner_note_key(node_key: &[u8; 32]) -> Result<[u8; 32]> {
    use std::sync::{LazyLock, Mutex};
    /// Far more owners than a box serves at once; 32 bytes a key.
    const KEYS: usize = 4_096;
    static NOTE_KEYS: LazyLock<Mutex<crate::kept::Kept<[u8; 32], [u8; 32]>>> =
        LazyLock::new(|| Mutex::new(crate::kept::Kept::new(KEYS, |_| 1)));
    let kept = || NOTE_KEYS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(k) = kept().get(node_key) {
        return Ok(*k);
    }
    let key = crate::program::ed25519_key(node_key)
        .ok_or_else(|| JcError::Sealed("the owner's node key is not an Ed25519 key".into()))?;
    let note_key = key.to_montgomery().to_bytes();
    kept().keep(*node_key, note_key);
    Ok(note_key)
}

/// What HPKE's sender setup gives: the encapsulated key and the sealing context.
type SenderSetup = (
    <Kem as hpke::Kem>::EncappedKey,
    hpke::aead::AeadCtxS<Aead, Kdf, Kem>,
);

fn recipient_key(recipient: &[u8; 32]) -> Result<<Kem as hpke::Kem>::PublicKey> {
    <Kem as hpke::Kem>::PublicKey::from_bytes(recipient)
        .map_err(|_| JcError::Sealed("recipient is not an X25519 public key".into()))
}

/// [`Sealer::seeded`]'s random source: SHA-256 of a label, the seed and a block counter.
struct SeedRng {
    seed: Zeroizing<[u8; 32]>,
    block: u64,
}

impl SeedRng {
    fn new(seed: &[u8; 32]) -> SeedRng {
        SeedRng {
            seed: Zeroizing::new(*seed),
            block: 0,
        }
    }
}

impl hpke::rand_core::TryRng for SeedRng {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> std::result::Result<u32, Self::Error> {
        let mut b = [0u8; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn try_next_u64(&mut self) -> std::result::Result<u64, Self::Error> {
        let mut b = [0u8; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> std::result::Result<(), Self::Error> {
        use sha2::Digest as _;
        for out in dst.chunks_mut(32) {
            let mut h = sha2::Sha256::new();
            h.update(b"skillbox/seal-seed/v1\0");
            h.update(&self.seed[..]);
            h.update(self.block.to_be_bytes());
            self.block += 1;
            let block = Zeroizing::new(<[u8; 32]>::from(h.finalize()));
            out.copy_from_slice(&block[..out.len()]);
        }
        Ok(())
    }
}

impl hpke::rand_core::TryCryptoRng for SeedRng {}

/// Streams named entries into an HPKE seal. Plaintext is held one chunk at a time, in place:
/// a chunk's plaintext is written straight into the sealed output behind its length field and
/// encrypted there, so a byte is copied once on its way in (a guarded run's owner note is
/// 257 KiB of it, sealed at the end of every run).
pub struct Sealer {
    ctx: hpke::aead::AeadCtxS<Aead, Kdf, Kem>,
    /// The sealed bytes so far, then the open chunk's length field and plaintext.
    out: Vec<u8>,
    /// Where the open chunk's plaintext starts in `out`. `out` has room for the whole chunk
    /// (length, plaintext, tag) from the moment it is opened, so plaintext is never left
    /// behind in a buffer a reallocation freed; what is still plaintext is wiped on drop.
    chunk: usize,
    written: u64,
}

impl Drop for Sealer {
    fn drop(&mut self) {
        use zeroize::Zeroize as _;
        // Only an unfinished seal holds plaintext (the open chunk); `finish` took `out`.
        if let Some(open) = self.out.get_mut(self.chunk..) {
            open.zeroize();
        }
    }
}

impl Sealer {
    pub fn new(recipient: &[u8; 32], info: &[u8]) -> Result<Sealer> {
        let pk = recipient_key(recipient)?;
        Sealer::started(hpke::setup_sender::<Aead, Kdf, Kem>(
            &OpModeS::Base,
            &pk,
            info,
        ))
    }

    /// A seal whose one random input (the HPKE ephemeral key) comes from `seed`: the same
    /// seed, recipient, info and entries give the same sealed bytes, so the box can make a
    /// sealed owner note again from what it kept rather than keep the note (257 KiB for a 1 MiB
    /// body limit) on disk and in memory. A seed is fresh from the OS for each note, secret as
    /// the run's keys are (it opens the note), and seals that one plaintext only.
    pub fn seeded(recipient: &[u8; 32], info: &[u8], seed: &[u8; 32]) -> Result<Sealer> {
        let pk = recipient_key(recipient)?;
        Sealer::started(hpke::setup_sender_with_rng::<Aead, Kdf, Kem>(
            &OpModeS::Base,
            &pk,
            info,
            &mut SeedRng::new(seed),
        ))
    }

    fn started(setup: std::result::Result<SenderSetup, hpke::HpkeError>) -> Result<Sealer> {
        let (enc, ctx) = setup.map_err(|e| JcError::Sealed(format!("hpke setup: {e}")))?;
        let mut out = Vec::with_capacity(4096);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&enc.to_bytes());
        let mut sealer = Sealer {
            ctx,
            out,
            chunk: 0,
            written: 0,
        };
        sealer.open_chunk();
        Ok(sealer)
    }

    /// Start the next chunk: its length field (filled in when it is sealed), and room for all
    /// of it before a byte of its plaintext goes in.
    fn open_chunk(&mut self) {
        self.out.reserve(4 + CHUNK + TAG_LEN);
        self.out.extend_from_slice(&[0; 4]);
        self.chunk = self.out.len();
    }

    /// Room left in the open chunk, sealing it first when it is full. A full chunk is sealed
    /// only when more comes, so `finish` always has a last chunk to mark.
    fn room(&mut self) -> Result<usize> {
        if self.out.len() - self.chunk == CHUNK {
            self.flush_chunk(false)?;
            self.open_chunk();
        }
        Ok(CHUNK - (self.out.len() - self.chunk))
    }

    fn write(&mut self, mut data: &[u8]) -> Result<()> {
        self.written += data.len() as u64;
        while !data.is_empty() {
            let take = self.room()?.min(data.len());
            self.out.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        Ok(())
    }

    fn write_zeros(&mut self, mut len: u64) -> Result<()> {
        self.written += len;
        while len > 0 {
            let take = (self.room()? as u64).min(len) as usize;
            self.out.resize(self.out.len() + take, 0);
            len -= take as u64;
        }
        Ok(())
    }

    /// Seal the open chunk where it lies and fill in its length field.
    fn flush_chunk(&mut self, last: bool) -> Result<()> {
        let tag = self
            .ctx
            .seal_inout_detached(
                hpke::inout::InOutBuf::from(&mut self.out[self.chunk..]),
                &chunk_aad(last),
            )
            .map_err(|e| JcError::Sealed(format!("seal: {e}")))?;
        self.out.extend_from_slice(&tag.to_bytes());
        let len = (self.out.len() - self.chunk) as u32;
        self.out[self.chunk - 4..self.chunk].copy_from_slice(&len.to_be_bytes());
        // Nothing past here is plaintext any more.
        self.chunk = self.out.len();
        Ok(())
    }

    fn entry_header(&mut self, name: &str, len: u64) -> Result<()> {
        if name.is_empty() || name.len() > 255 {
            return Err(JcError::Sealed("entry name must be 1-255 bytes".into()));
        }
        let mut header = [0u8; 2 + 255 + 8];
        header[0] = 1;
        header[1] = name.len() as u8;
        header[2..2 + name.len()].copy_from_slice(name.as_bytes());
        header[2 + name.len()..10 + name.len()].copy_from_slice(&len.to_be_bytes());
        self.write(&header[..10 + name.len()])
    }

    /// Add one entry of exactly `len` bytes read from `reader` (read straight into the open
    /// chunk).
    pub fn entry(&mut self, name: &str, len: u64, reader: &mut dyn Read) -> Result<()> {
        self.entry_header(name, len)?;
        let mut remaining = len;
        while remaining > 0 {
            let want = (self.room()? as u64).min(remaining) as usize;
            let at = self.out.len();
            self.out.resize(at + want, 0);
            let read = reader.read(&mut self.out[at..]);
            let n = *read.as_ref().unwrap_or(&0);
            self.out.truncate(at + n);
            let n = read.map_err(|e| JcError::Read(format!("{name}: {e}")))?;
            if n == 0 {
                return Err(JcError::Read(format!(
                    "{name}: ended {remaining} bytes early"
                )));
            }
            self.written += n as u64;
            remaining -= n as u64;
        }
        // The stream must hold exactly `len` bytes: more would mean the size we framed is wrong.
        let mut one = Zeroizing::new([0u8; 1]);
        let n = reader
            .read(&mut one[..])
            .map_err(|e| JcError::Read(format!("{name}: {e}")))?;
        if n != 0 {
            return Err(JcError::Read(format!(
                "{name}: longer than its declared {len} bytes"
            )));
        }
        Ok(())
    }

    pub fn entry_bytes(&mut self, name: &str, data: &[u8]) -> Result<()> {
        self.entry_header(name, data.len() as u64)?;
        self.write(data)
    }

    /// An entry of `len` zero bytes (an owner note's padding), without a buffer of them.
    pub fn entry_zeros(&mut self, name: &str, len: u64) -> Result<()> {
        self.entry_header(name, len)?;
        self.write_zeros(len)
    }

    /// Make room for the sealed form of `plain` more bytes (entries and padding to come), so
    /// a large seal is one allocation rather than a doubling series of copies.
    pub fn reserve(&mut self, plain: u64) {
        let more = sealed_len(plain) + 4 + TAG_LEN as u64;
        self.out.reserve(usize::try_from(more).unwrap_or(0));
    }

    /// End marker, zero padding to the size bucket, last chunk. Returns the sealed bytes.
    pub fn finish(self) -> Result<Vec<u8>> {
        let total = bucket(self.written + 1);
        self.finish_at(total)
    }

    /// End marker and last chunk, no padding: for a seal whose entries already bring it to a
    /// length its recipient's program fixes (the owner's note). A power-of-two bucket on top
    /// would only double it (a 1 MiB body limit's note: 257 KiB padded to 512 KiB).
    pub fn finish_unpadded(self) -> Result<Vec<u8>> {
        let total = self.written + 1;
        self.finish_at(total)
    }

    /// End marker, then zero padding to exactly `total` bytes of plaintext, last chunk: for a
    /// seal whose size its program fixes whatever it holds (the caller's answer,
    /// [`answer_padded_len`]). Entries past `total` are refused, not sealed longer: that
    /// length would tell what the padding hides.
    pub fn finish_padded_to(self, total: u64) -> Result<Vec<u8>> {
        if self.written + 1 > total {
            return Err(JcError::Internal(format!(
                "sealed entries of {} bytes past their fixed size of {total}",
                self.written + 1
            )));
        }
        self.finish_at(total)
    }

    fn finish_at(mut self, total: u64) -> Result<Vec<u8>> {
        self.write(&[0])?;
        self.write_zeros(total.saturating_sub(self.written))?;
        self.flush_chunk(true)?;
        Ok(std::mem::take(&mut self.out))
    }
}

/// One opened entry; the bytes are wiped when it drops.
pub struct Entry {
    pub name: String,
    pub data: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for Entry {
    // Never print material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Entry({:?}, {} bytes)", self.name, self.data.len())
    }
}

/// Open sealed bytes with `secret` and `info`. `wrong_info` is the error when the first chunk
/// does not open (the caller knows which role it expected).
pub fn open(
    sealed: &[u8],
    secret: &HpkeKeyPair,
    info: &[u8],
    wrong_info: impl Fn() -> JcError,
) -> Result<Vec<Entry>> {
    open_named(sealed, secret, info, wrong_info, |_| true)
}

/// [`open`], returning only the entries `wanted` names: every entry's framing is still checked,
/// but one not wanted is not copied out (an owner note's 257 KiB of padding zeros is neither
/// copied nor wiped twice).
pub fn open_named(
    sealed: &[u8],
    secret: &HpkeKeyPair,
    info: &[u8],
    wrong_info: impl Fn() -> JcError,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<Entry>> {
    if sealed.len() < MAGIC.len() + 32 || &sealed[..MAGIC.len()] != MAGIC {
        return Err(JcError::Sealed("not a skillbox seal (bad magic)".into()));
    }
    let enc = <Kem as hpke::Kem>::EncappedKey::from_bytes(&sealed[MAGIC.len()..MAGIC.len() + 32])
        .map_err(|_| JcError::Sealed("bad encapsulated key".into()))?;
    let mut ctx =
        hpke::setup_receiver::<Aead, Kdf, Kem>(&OpModeR::Base, &secret.secret, &enc, info)
            .map_err(|_| wrong_info())?;
    let mut rest = &sealed[MAGIC.len() + 32..];
    // Each chunk is opened in place in the one buffer, sized once: the plaintext is never
    // copied again, and no reallocation leaves a copy of it behind unwiped.
    let mut plain = Plain(Vec::with_capacity(rest.len()));
    let mut first = true;
    loop {
        if rest.len() < 4 {
            return Err(JcError::Sealed("truncated: no final chunk".into()));
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if !(TAG_LEN..=CHUNK + TAG_LEN).contains(&len) || rest.len() < 4 + len {
            return Err(JcError::Sealed("bad chunk length".into()));
        }
        let (ct, tag) = rest[4..4 + len].split_at(len - TAG_LEN);
        rest = &rest[4 + len..];
        let last = rest.is_empty();
        let tag = hpke::aead::AeadTag::<Aead>::from_bytes(tag)
            .map_err(|_| JcError::Sealed("bad chunk tag".into()))?;
        let at = plain.0.len();
        let mut open_with = |plain: &mut Vec<u8>, last: bool| {
            plain.truncate(at);
            plain.extend_from_slice(ct);
            ctx.open_inout_detached(
                hpke::inout::InOutBuf::from(&mut plain[at..]),
                &chunk_aad(last),
                &tag,
            )
        };
        match open_with(&mut plain.0, last) {
            Ok(()) => {}
            Err(_) if first => {
                // Opens with the other end-of-stream flag: right key and info, stream cut or
                // extended. Otherwise the info (or key) is not this one.
                if open_with(&mut plain.0, !last).is_ok() {
                    return Err(JcError::Sealed("stream truncated or extended".into()));
                }
                return Err(wrong_info());
            }
            Err(_) => {
                return Err(JcError::Sealed(
                    "a chunk does not open (tampered, reordered or truncated)".into(),
                ));
            }
        }
        first = false;
        if last {
            break;
        }
    }
    parse_entries(&plain.0, wanted)
}

/// Opened plaintext, wiped when dropped up to its last non-zero byte: what follows is zeros
/// already (a seal's padding), and a volatile wipe goes a byte at a time — for an owner note,
/// 257 KiB of zeros written again on every open. Nothing past `len` ever held plaintext (the
/// buffer is sized once and never reallocated).
struct Plain(Vec<u8>);

impl Drop for Plain {
    fn drop(&mut self) {
        use zeroize::Zeroize as _;
        let end = self.0.len() - trailing_zeros(&self.0);
        self.0[..end].zeroize();
    }
}

/// How many bytes at the end of `b` are zero (compared a word at a time).
fn trailing_zeros(b: &[u8]) -> usize {
    let mut n = 0;
    let mut words = b.rchunks_exact(8);
    for w in &mut words {
        if u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]) != 0 {
            return n + w.iter().rev().take_while(|&&x| x == 0).count();
        }
        n += 8;
    }
    n + words
        .remainder()
        .iter()
        .rev()
        .take_while(|&&x| x == 0)
        .count()
}

/// The most entries a sealed message may frame. A program names at most 64 sources beside the
/// request, and the owner stakes three inputs; a result and a note fewer. The framing is the
/// sender's, so the count is checked as it is read: a stake of millions of one-byte entries
/// is refused at the 257th, not parsed whole.
pub const MAX_ENTRIES: usize = 256;

fn parse_entries(plain: &[u8], wanted: impl Fn(&str) -> bool) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    // A set: a linear search per entry made a stake's parse quadratic in its entries.
    let mut names: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut at = 0usize;
    loop {
        let tag = *plain
            .get(at)
            .ok_or_else(|| JcError::Sealed("framing: no end marker".into()))?;
        at += 1;
        match tag {
            0 => break,
            1 => {}
            _ => return Err(JcError::Sealed("framing: bad entry tag".into())),
        }
        let name_len = *plain
            .get(at)
            .ok_or_else(|| JcError::Sealed("framing: truncated".into()))?
            as usize;
        at += 1;
        let name = plain
            .get(at..at + name_len)
            .ok_or_else(|| JcError::Sealed("framing: truncated name".into()))?;
        let name = std::str::from_utf8(name)
            .map_err(|_| JcError::Sealed("framing: name not UTF-8".into()))?
            .to_owned();
        at += name_len;
        let len_bytes: [u8; 8] = plain
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| JcError::Sealed("framing: truncated length".into()))?;
        at += 8;
        let len = usize::try_from(u64::from_be_bytes(len_bytes))
            .map_err(|_| JcError::Sealed("framing: length".into()))?;
        let end = at
            .checked_add(len)
            .ok_or_else(|| JcError::Sealed("framing: length".into()))?;
        let data = plain
            .get(at..end)
            .ok_or_else(|| JcError::Sealed("framing: truncated entry".into()))?;
        at = end;
        if names.contains(&name) {
            return Err(JcError::Sealed(format!("framing: entry {name:?} twice")));
        }
        if names.len() == MAX_ENTRIES {
            return Err(JcError::Sealed(format!(
                "framing: more than {MAX_ENTRIES} entries"
            )));
        }
        if wanted(&name) {
            out.push(Entry {
                name: name.clone(),
                data: Zeroizing::new(data.to_vec()),
            });
        }
        names.insert(name);
    }
    if plain[at..].iter().any(|&b| b != 0) {
        return Err(JcError::Sealed("framing: padding is not zero".into()));
    }
    Ok(out)
}

/// Check opened stake entries against the program: only names it allows, each within its limit,
/// the required ones present.
pub fn check_stake(program: &Program, role: Role, entries: &[Entry]) -> Result<()> {
    let limits: Vec<(&str, u64, bool)> = match role {
        Role::Caller => std::iter::once(("request", program.caller_inputs.request_max_bytes, true))
            .chain(
                program
                    .caller_inputs
                    .sources
                    .iter()
                    .map(|s| (s.name.as_str(), s.max_bytes, false)),
            )
            .collect(),
        Role::Owner => {
            let o = &program.owner_inputs;
            vec![
                ("body", o.body_max_bytes, true),
                ("model", o.model_max_bytes, false),
                ("key", o.key_max_bytes, program.provider.id.needs_key()),
                // Not named by the program: every owner stake may carry its day limits, and an
                // older owner's stake without them still runs (with no day limit).
                (
                    crate::day::DAY_LIMITS_ENTRY,
                    crate::day::DayLimits::LEN as u64,
                    false,
                ),
            ]
        }
    };
    for e in entries {
        let Some((_, max, _)) = limits.iter().find(|(n, _, _)| *n == e.name) else {
            return Err(JcError::EntryNotInProgram {
                name: e.name.chars().take(128).collect(),
                role: role.as_str().into(),
            });
        };
        // Exactly its length, short or long: refused by its own name, not as "too large".
        if role == Role::Owner && e.name == crate::day::DAY_LIMITS_ENTRY {
            crate::day::DayLimits::from_bytes(&e.data)?;
        }
        if e.data.len() as u64 > *max {
            return Err(JcError::EntryTooLarge {
                name: e.name.clone(),
                size: e.data.len() as u64,
                limit: *max,
            });
        }
    }
    for (name, _, required) in &limits {
        if *required && !entries.iter().any(|e| e.name == *name) {
            return Err(JcError::EntryMissing {
                name: (*name).to_owned(),
                role: role.as_str().into(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal_entries(to: &[u8; 32], info: &[u8], entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut s = Sealer::new(to, info).expect("sealer");
        for (n, d) in entries {
            s.entry_bytes(n, d).expect("entry");
        }
        s.finish().expect("finish")
    }

    #[test]
    fn an_owners_note_key_is_the_same_worked_out_or_kept_and_a_bad_key_is_refused_each_time() {
        let owner = ed25519_dalek::SigningKey::from_bytes(&[5; 32]);
        let public = owner.verifying_key().to_bytes();
        let want = owner.verifying_key().to_montgomery().to_bytes();
        for _ in 0..2 {
            assert_eq!(owner_note_key(&public).expect("a key"), want);
            assert_eq!(
                HpkeKeyPair::from_node_key(&owner).expect("pair").public(),
                want
            );
        }
        // Not a point on the curve (y = 2 has no x): refused, the first time and the next.
        let mut off_curve = [0u8; 32];
        off_curve[0] = 2;
        for _ in 0..2 {
            assert!(owner_note_key(&off_curve).is_err());
        }
    }

    /// The sender frames its own entries: a message of a hundred thousand one-byte entries
    /// with distinct names (each checked against all before it, it took minutes a stake) is
    /// refused at the first entry past [`MAX_ENTRIES`]; that many open.
    #[test]
    fn a_message_of_more_entries_than_any_program_names_is_refused_as_it_is_read() {
        let kp = HpkeKeyPair::generate();
        let info = info_for_result("run-1");
        let names: Vec<String> = (0..100_000).map(|i| format!("e{i}")).collect();
        let many: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
        let sealed = seal_entries(&kp.public(), &info, &many);
        let refused = open(&sealed, &kp, &info, || JcError::ResultNotForThisKey);
        assert!(
            matches!(&refused, Err(JcError::Sealed(m)) if m.contains("more than 256 entries")),
            "{:?}",
            refused.map(|e| e.len())
        );
        let sealed = seal_entries(&kp.public(), &info, &many[..MAX_ENTRIES]);
        let opened = open(&sealed, &kp, &info, || JcError::ResultNotForThisKey).expect("opens");
        assert_eq!(opened.len(), MAX_ENTRIES);
    }

    #[test]
    fn a_pair_rebuilt_from_its_secret_opens_what_was_sealed_to_it_and_has_its_public_key() {
        let kp = HpkeKeyPair::generate();
        let info = info_for_result("run-1");
        let sealed = seal_entries(&kp.public(), &info, &[("answer", b"yes")]);
        // Rebuilt, it opens without its public key ever having been worked out...
        let rebuilt = HpkeKeyPair::from_secret_bytes(&kp.secret_bytes()).expect("rebuilt");
        assert!(rebuilt.public.get().is_none());
        let opened =
            open(&sealed, &rebuilt, &info, || JcError::ResultNotForThisKey).expect("opens");
        assert_eq!(opened[0].data.as_slice(), b"yes");
        // ...and when asked for, the public key is the generated pair's.
        assert_eq!(rebuilt.public(), kp.public());
        assert_eq!(rebuilt.public_hex(), kp.public_hex());
        let other = HpkeKeyPair::from_secret_bytes(&[9; 32]).expect("a key");
        assert!(open(&sealed, &other, &info, || JcError::ResultNotForThisKey).is_err());
    }

    #[test]
    fn an_owner_note_opens_with_the_owners_node_key_only_and_its_size_says_nothing() {
        let owner = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
        let caller = ed25519_dalek::SigningKey::from_bytes(&[4; 32]);
        let to = owner_note_key(&owner.verifying_key().to_bytes()).expect("key");
        let info = info(Purpose::OwnerNote, "run-1", &ProgramHash([7; 32]));
        let acted = seal_entries(&to, &info, &[("guard_acted", &[1])]);
        let not = seal_entries(&to, &info, &[("guard_acted", &[0])]);
        assert_eq!(acted.len(), not.len());
        let mine = HpkeKeyPair::from_node_key(&owner).expect("pair");
        assert_eq!(mine.public(), to);
        let opened = open(&acted, &mine, &info, || JcError::ResultNotForThisKey).expect("opens");
        assert_eq!(opened[0].data.as_slice(), &[1]);
        let theirs = HpkeKeyPair::from_node_key(&caller).expect("pair");
        assert!(open(&acted, &theirs, &info, || JcError::ResultNotForThisKey).is_err());
        let other = info_for_result("run-1");
        assert!(open(&acted, &mine, &other, || JcError::ResultNotForThisKey).is_err());
    }

    fn info_for_result(run: &str) -> Vec<u8> {
        info(Purpose::Result, run, &ProgramHash([7; 32]))
    }

    #[test]
    fn round_trip_and_padding_buckets() {
        let kp = HpkeKeyPair::generate();
        let h = ProgramHash([7; 32]);
        let info = info(Purpose::Stake(Role::Caller), "run-1", &h);
        let big = vec![0x5a; 40_000];
        for (payload, want_bucket) in [(&b"hi"[..], 1024u64), (&big[..], 65536)] {
            let sealed = seal_entries(&kp.public(), &info, &[("request", payload)]);
            let chunks = want_bucket.div_ceil(CHUNK as u64);
            assert_eq!(
                sealed.len() as u64,
                8 + 32 + want_bucket + chunks * 20,
                "size reveals only the bucket"
            );
            let entries = open(&sealed, &kp, &info, || JcError::StakeWrongInfo {
                role: "caller".into(),
            })
            .expect("opens");
            assert_eq!(entries.len(), 1);
            assert_eq!(&entries[0].data[..], payload);
            assert!(sealed.len() as u64 <= sealed_limit(payload.len() as u64 + 20));
        }
    }

    #[test]
    fn other_info_or_key_does_not_open() {
        let kp = HpkeKeyPair::generate();
        let h = ProgramHash([7; 32]);
        let sealed = seal_entries(
            &kp.public(),
            &info(Purpose::Stake(Role::Owner), "run-1", &h),
            &[("body", b"secret")],
        );
        let wrong = || JcError::StakeWrongInfo {
            role: "caller".into(),
        };
        for other in [
            info(Purpose::Stake(Role::Caller), "run-1", &h),
            info(Purpose::Stake(Role::Owner), "run-2", &h),
            info(Purpose::Stake(Role::Owner), "run-1", &ProgramHash([8; 32])),
        ] {
            assert!(matches!(
                open(&sealed, &kp, &other, wrong),
                Err(JcError::StakeWrongInfo { .. })
            ));
        }
        let other_key = HpkeKeyPair::generate();
        assert!(
            open(
                &sealed,
                &other_key,
                &info(Purpose::Stake(Role::Owner), "run-1", &h),
                wrong
            )
            .is_err()
        );
    }

    #[test]
    fn truncation_and_tampering_are_refused() {
        let kp = HpkeKeyPair::generate();
        let h = ProgramHash([1; 32]);
        let i = info(Purpose::Result, "r", &h);
        let sealed = seal_entries(&kp.public(), &i, &[("answer", &vec![1u8; 50_000])]);
        let wrong = || JcError::StakeWrongInfo { role: "x".into() };
        // Drop the final chunk: every remaining chunk opens, but none is marked last.
        let first_len = u32::from_be_bytes(sealed[40..44].try_into().expect("4 bytes")) as usize;
        let cut = &sealed[..40 + 4 + first_len];
        assert!(matches!(open(cut, &kp, &i, wrong), Err(JcError::Sealed(_))));
        let mut flipped = sealed.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(matches!(
            open(&flipped, &kp, &i, wrong),
            Err(JcError::Sealed(_))
        ));
    }

    #[test]
    fn reader_length_must_match() {
        let kp = HpkeKeyPair::generate();
        let mut s = Sealer::new(&kp.public(), b"i").expect("sealer");
        assert!(matches!(
            s.entry("a", 10, &mut &b"short"[..]),
            Err(JcError::Read(_))
        ));
        let mut s = Sealer::new(&kp.public(), b"i").expect("sealer");
        assert!(matches!(
            s.entry("a", 2, &mut &b"longer"[..]),
            Err(JcError::Read(_))
        ));
    }

    #[test]
    fn a_seeded_seal_is_made_again_byte_for_byte_and_opens() {
        let kp = HpkeKeyPair::generate();
        let i = info(Purpose::OwnerNote, "run-1", &ProgramHash([2; 32]));
        let seal = |seed: &[u8; 32]| {
            let mut s = Sealer::seeded(&kp.public(), &i, seed).expect("sealer");
            s.entry_bytes("guard_acted", &[1]).expect("entry");
            s.entry_bytes("padding", &[0; 40_000]).expect("entry");
            s.finish_unpadded().expect("finish")
        };
        let once = seal(&[9; 32]);
        assert_eq!(once, seal(&[9; 32]), "the same seed seals the same bytes");
        assert_ne!(once, seal(&[8; 32]), "another seed, another ephemeral key");
        let opened = open(&once, &kp, &i, || JcError::ResultNotForThisKey).expect("opens");
        assert_eq!(opened[0].data.as_slice(), &[1]);
    }

    #[test]
    fn trailing_zeros_counts_to_the_last_non_zero_byte() {
        assert_eq!(trailing_zeros(&[]), 0);
        assert_eq!(trailing_zeros(&[0; 3]), 3);
        assert_eq!(trailing_zeros(&[0; 24]), 24);
        for len in 1..40 {
            for nz in 0..len {
                let mut b = vec![0u8; len];
                b[nz] = 0x80;
                assert_eq!(
                    trailing_zeros(&b),
                    len - nz - 1,
                    "len {len}, non-zero at {nz}"
                );
            }
        }
    }

    /// Every answer up to the bound seals to one length and opens to itself; one past it is
    /// refused rather than sealed longer.
    #[test]
    fn answers_seal_to_their_bounds_size_and_one_past_it_is_refused() {
        let kp = HpkeKeyPair::generate();
        let i = b"answers";
        let total = answer_padded_len(40_000);
        let seal = |answer: &[u8]| {
            let mut s = Sealer::new(&kp.public(), i).expect("sealer");
            s.entry_bytes(ANSWER_ENTRY, answer)?;
            s.entry_bytes(TRUNCATED_ENTRY, &[0])?;
            s.finish_padded_to(total)
        };
        for len in [0, 1, 100, 16_384, 40_000] {
            let answer = vec![b'w'; len];
            let sealed = seal(&answer).expect("within the bound");
            assert_eq!(sealed.len() as u64, sealed_len(total), "{len} bytes");
            let opened = open(&sealed, &kp, i, || JcError::ResultNotForThisKey).expect("opens");
            assert_eq!(opened[0].data.as_slice(), answer.as_slice());
        }
        assert!(matches!(
            seal(&vec![b'w'; 40_001]),
            Err(JcError::Internal(_))
        ));
    }

    #[test]
    fn an_answers_size_is_its_bound_framed_and_never_below_the_smallest_bucket() {
        assert_eq!(answer_padded_len(4096), 4096 + 37);
        assert_eq!(answer_padded_len(1 << 20), (1 << 20) + 37);
        assert_eq!(answer_padded_len(160), 1024);
    }

    #[test]
    fn buckets() {
        assert_eq!(bucket(0), 1024);
        assert_eq!(bucket(1024), 1024);
        assert_eq!(bucket(1025), 2048);
        assert_eq!(bucket(70_000), 131_072);
    }
}
