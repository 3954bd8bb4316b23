//! Evidence files as people and tools write them: raw or hex, PEM or DER, raw or base64. Pure:
//! bytes in, bytes out; every failure is a [`Refusal::Malformed`] naming what was expected.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::Refusal;

/// Largest evidence file any decoder here accepts (a TDX quote with its PCK chain is ~5 KiB,
/// collateral ~20 KiB): bounds the work on hostile input before parsing starts.
pub const MAX_INPUT: usize = 256 * 1024;

fn check_size(bytes: &[u8]) -> Result<(), Refusal> {
    if bytes.len() > MAX_INPUT {
        return Err(Refusal::TooLarge("evidence file"));
    }
    Ok(())
}

fn is_hex_text(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_hexdigit() || b.is_ascii_whitespace())
}

/// Hex text (whitespace and line breaks allowed anywhere) to bytes.
pub fn hex_text(bytes: &[u8], what: &'static str) -> Result<Vec<u8>, Refusal> {
    check_size(bytes)?;
    let digits: Vec<u8> = bytes
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    hex::decode(&digits).map_err(|_| Refusal::Malformed(what))
}

/// Raw bytes of exactly `len`, or hex text that decodes to them.
pub fn raw_or_hex(bytes: &[u8], len: usize, what: &'static str) -> Result<Vec<u8>, Refusal> {
    check_size(bytes)?;
    if bytes.len() == len {
        return Ok(bytes.to_vec());
    }
    if is_hex_text(bytes) {
        let out = hex_text(bytes, what)?;
        if out.len() == len {
            return Ok(out);
        }
    }
    Err(Refusal::Malformed(what))
}

/// Raw bytes, unless the whole file is hex text (then decoded).
pub fn raw_or_hex_any(bytes: &[u8], what: &'static str) -> Result<Vec<u8>, Refusal> {
    check_size(bytes)?;
    if is_hex_text(bytes) {
        return hex_text(bytes, what);
    }
    Ok(bytes.to_vec())
}

/// Raw bytes if `looks_raw` says so, else standard base64 (line breaks allowed).
pub fn raw_or_base64(
    bytes: &[u8],
    looks_raw: impl Fn(&[u8]) -> bool,
    what: &'static str,
) -> Result<Vec<u8>, Refusal> {
    check_size(bytes)?;
    if looks_raw(bytes) {
        return Ok(bytes.to_vec());
    }
    let text: Vec<u8> = bytes
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    STANDARD.decode(&text).map_err(|_| Refusal::Malformed(what))
}

const PEM_BEGIN: &[u8] = b"-----BEGIN CERTIFICATE-----";
const PEM_END: &[u8] = b"-----END CERTIFICATE-----";

/// Certificates from a file: one or more PEM `CERTIFICATE` blocks (other text around them is
/// ignored), or a single DER certificate. Returns DER, in file order.
pub fn certificates(bytes: &[u8]) -> Result<Vec<Vec<u8>>, Refusal> {
    check_size(bytes)?;
    if find(bytes, PEM_BEGIN).is_none() {
        // DER: a SEQUENCE; the X.509 parser checks the rest.
        if bytes.first() != Some(&0x30) {
            return Err(Refusal::Malformed("certificate (neither PEM nor DER)"));
        }
        return Ok(vec![bytes.to_vec()]);
    }
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some(start) = find(rest, PEM_BEGIN) {
        let body_start = start + PEM_BEGIN.len();
        let end = find(&rest[body_start..], PEM_END)
            .ok_or(Refusal::Malformed("PEM certificate without its END line"))?;
        let body: Vec<u8> = rest[body_start..body_start + end]
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        let der = STANDARD
            .decode(&body)
            .map_err(|_| Refusal::Malformed("PEM certificate body is not base64"))?;
        out.push(der);
        rest = &rest[body_start + end + PEM_END.len()..];
    }
    Ok(out)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_with_line_breaks() {
        assert_eq!(raw_or_hex(b"00 01\n02\r\n", 3, "x").unwrap(), vec![0, 1, 2]);
        assert_eq!(raw_or_hex(b"abc", 3, "x").unwrap(), b"abc".to_vec());
        assert_eq!(raw_or_hex(b"0g", 1, "x"), Err(Refusal::Malformed("x")));
        assert_eq!(raw_or_hex(b"0001", 3, "x"), Err(Refusal::Malformed("x")));
    }

    #[test]
    fn pem_blocks_and_der() {
        let pem = b"junk\n-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nMAE=\n-----END CERTIFICATE-----";
        assert_eq!(
            certificates(pem).unwrap(),
            vec![vec![0x30, 0], vec![0x30, 1]]
        );
        assert_eq!(certificates(&[0x30, 0]).unwrap(), vec![vec![0x30, 0]]);
        assert!(certificates(b"hello").is_err());
        assert!(certificates(b"-----BEGIN CERTIFICATE-----\nMAA=").is_err());
        assert!(
            certificates(b"-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----").is_err()
        );
    }

    #[test]
    fn oversized_input_is_refused() {
        let big = vec![b'0'; MAX_INPUT + 2];
        assert_eq!(hex_text(&big, "x"), Err(Refusal::TooLarge("evidence file")));
    }
}
