//! The sealed wire form, byte for byte: a seeded seal (its one random input fixed) of entries
//! that cross chunk boundaries, read from a stream, as bytes and as zeros, padded and unpadded,
//! digested against the bytes the first implementation sealed. A receipt signs an owner note's
//! digest and a peer opens what another version sealed, so a faster sealer must not change one
//! byte of what it writes.

use sha2::{Digest, Sha256};
use skillbox_jc::JcError;
use skillbox_jc::program::ProgramHash;
use skillbox_jc::seal::{self, HpkeKeyPair, Purpose, Sealer};

fn recipient() -> HpkeKeyPair {
    HpkeKeyPair::from_secret_bytes(&[0x42; 32]).expect("an X25519 secret")
}

fn info() -> Vec<u8> {
    seal::info(Purpose::OwnerNote, "run-kat", &ProgramHash([5; 32]))
}

/// Entries as every sealing path writes them: small bytes, a 40,000-byte stream read in odd
/// pieces (three chunks), and a run of zeros that ends past a chunk boundary.
fn sealed(unpadded: bool) -> Vec<u8> {
    let mut s = Sealer::seeded(&recipient().public(), &info(), &[9; 32]).expect("sealer");
    s.entry_bytes("guard_acted", &[1]).expect("entry");
    let stream: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    let mut reader = OddReads(&stream[..]);
    s.entry("request", stream.len() as u64, &mut reader)
        .expect("entry");
    s.entry_zeros("padding", 20_000).expect("zeros");
    if unpadded {
        s.finish_unpadded().expect("finish")
    } else {
        s.finish().expect("finish")
    }
}

/// A reader that hands out at most 7,001 bytes a call, so entries cross the sealer's chunks
/// at places no read lines up with.
struct OddReads<'a>(&'a [u8]);

impl std::io::Read for OddReads<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.0.len()).min(7_001);
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn a_seeded_seal_is_the_same_bytes_as_the_first_implementation_sealed() {
    for (unpadded, len, digest) in [
        (
            true,
            60_177,
            "f7bca726cad6a7a11756a577aae96d086088b0414ee87d3942bc4a02ee21f013",
        ),
        (
            false,
            65_656,
            "558de913aee703685c5699842bf18eb066ab12c39fcd24807d72ca3f82e44a4a",
        ),
    ] {
        let bytes = sealed(unpadded);
        assert_eq!(bytes.len(), len, "unpadded: {unpadded}");
        assert_eq!(
            hex::encode(Sha256::digest(&bytes)),
            digest,
            "unpadded: {unpadded}"
        );
        let entries = seal::open(&bytes, &recipient(), &info(), || {
            JcError::ResultNotForThisKey
        })
        .expect("opens");
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["guard_acted", "request", "padding"]);
        assert_eq!(entries[1].data.len(), 40_000);
        assert!(
            entries[1]
                .data
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (i % 251) as u8)
        );
        assert!(entries[2].data.len() == 20_000 && entries[2].data.iter().all(|&b| b == 0));
    }
}

#[test]
fn a_cut_or_flipped_seal_does_not_open_and_says_which() {
    let bytes = sealed(true);
    let wrong = || JcError::ResultNotForThisKey;
    // Every chunk but the last: each opens, none is marked last.
    let mut cut = bytes.clone();
    let last_len = {
        let mut at = 40;
        let mut last = 0;
        while at < bytes.len() {
            let n = u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
            last = at;
            at += 4 + n;
        }
        last
    };
    cut.truncate(last_len);
    assert!(matches!(
        seal::open(&cut, &recipient(), &info(), wrong),
        Err(JcError::Sealed(_))
    ));
    // A flipped bit in the second chunk.
    let mut flipped = bytes.clone();
    flipped[40 + 4 + 16 * 1024 + 16 + 4 + 100] ^= 1;
    assert!(matches!(
        seal::open(&flipped, &recipient(), &info(), wrong),
        Err(JcError::Sealed(_))
    ));
    // Another info: the first chunk does not open, and that is the caller's own error.
    let other = seal::info(Purpose::Result, "run-kat", &ProgramHash([5; 32]));
    assert!(matches!(
        seal::open(&bytes, &recipient(), &other, wrong),
        Err(JcError::ResultNotForThisKey)
    ));
    // A one-chunk seal cut after its first chunk's length says it was cut.
    let mut one = Sealer::seeded(&recipient().public(), &info(), &[1; 32]).expect("sealer");
    one.entry_bytes("a", b"b").expect("entry");
    let one = one.finish().expect("finish");
    assert!(seal::open(&one, &recipient(), &info(), wrong).is_ok());
    let mut extended = one.clone();
    extended.extend_from_slice(&one[40..]);
    assert!(matches!(
        seal::open(&extended, &recipient(), &info(), wrong),
        Err(JcError::Sealed(_))
    ));
}

#[test]
fn open_named_leaves_out_what_is_not_wanted_and_still_checks_its_framing() {
    let bytes = sealed(true);
    let entries = seal::open_named(
        &bytes,
        &recipient(),
        &info(),
        || JcError::ResultNotForThisKey,
        |name| name == "guard_acted",
    )
    .expect("opens");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].name, "guard_acted");
    assert_eq!(entries[0].data.as_slice(), &[1]);
    // An entry twice is refused even when it is not one of those wanted.
    let mut s = Sealer::seeded(&recipient().public(), &info(), &[3; 32]).expect("sealer");
    s.entry_bytes("guard_acted", &[0]).expect("entry");
    s.entry_zeros("padding", 10).expect("zeros");
    s.entry_zeros("padding", 10).expect("zeros");
    let twice = s.finish_unpadded().expect("finish");
    assert!(matches!(
        seal::open_named(
            &twice,
            &recipient(),
            &info(),
            || JcError::ResultNotForThisKey,
            |name| name == "guard_acted",
        ),
        Err(JcError::Sealed(_))
    ));
}
