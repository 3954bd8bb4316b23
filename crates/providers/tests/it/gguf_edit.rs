//! Test helper: a copy of a GGUF file with one string metadata key replaced or removed (for
//! models whose chat template differs from the one we have on disk). GGUF v2/v3 layout: header,
//! key/values, tensor infos, padding to the alignment, tensor data (offsets relative to its
//! start, so it is copied unchanged after re-padding).

use std::io::{Read, Write};
use std::path::Path;

fn u32_at(b: &[u8], at: &mut usize) -> u32 {
    let v = u32::from_le_bytes(b[*at..*at + 4].try_into().unwrap());
    *at += 4;
    v
}

fn u64_at(b: &[u8], at: &mut usize) -> u64 {
    let v = u64::from_le_bytes(b[*at..*at + 8].try_into().unwrap());
    *at += 8;
    v
}

fn skip_string(b: &[u8], at: &mut usize) {
    let n = u64_at(b, at) as usize;
    *at += n;
}

fn skip_value(b: &[u8], at: &mut usize, ty: u32) {
    match ty {
        0 | 1 | 7 => *at += 1,
        2 | 3 => *at += 2,
        4..=6 => *at += 4,
        10..=12 => *at += 8,
        8 => skip_string(b, at),
        9 => {
            let inner = u32_at(b, at);
            let n = u64_at(b, at);
            for _ in 0..n {
                skip_value(b, at, inner);
            }
        }
        other => panic!("unknown GGUF value type {other}"),
    }
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// Writes `dst`: `src` with string key `key` set to `value` (added if missing), or removed.
pub fn rewrite(src: &Path, dst: &Path, key: &str, value: Option<&str>) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    std::fs::File::open(src)?.read_to_end(&mut bytes)?;
    assert_eq!(&bytes[..4], b"GGUF");
    let mut at = 4;
    let version = u32_at(&bytes, &mut at);
    let n_tensors = u64_at(&bytes, &mut at);
    let n_kv = u64_at(&bytes, &mut at);
    let mut kvs: Vec<&[u8]> = Vec::new();
    let mut alignment = 32u64;
    for _ in 0..n_kv {
        let start = at;
        let key_len = u64_at(&bytes, &mut at) as usize;
        let name = std::str::from_utf8(&bytes[at..at + key_len])
            .unwrap()
            .to_owned();
        at += key_len;
        let ty = u32_at(&bytes, &mut at);
        let value_at = at;
        skip_value(&bytes, &mut at, ty);
        if name == "general.alignment" && ty == 4 {
            let mut v = value_at;
            alignment = u64::from(u32_at(&bytes, &mut v));
        }
        if name != key {
            kvs.push(&bytes[start..at]);
        }
    }
    let infos_start = at;
    for _ in 0..n_tensors {
        skip_string(&bytes, &mut at);
        let dims = u32_at(&bytes, &mut at);
        at += 8 * dims as usize + 4 + 8;
    }
    let infos = &bytes[infos_start..at];
    let data_start = at.div_ceil(alignment as usize) * alignment as usize;

    let mut out = Vec::with_capacity(bytes.len() + 4096);
    out.extend(b"GGUF");
    out.extend(version.to_le_bytes());
    out.extend(n_tensors.to_le_bytes());
    let mut extra = Vec::new();
    if let Some(value) = value {
        string(&mut extra, key);
        extra.extend(8u32.to_le_bytes());
        string(&mut extra, value);
    }
    out.extend((kvs.len() as u64 + u64::from(value.is_some())).to_le_bytes());
    for kv in kvs {
        out.extend(kv);
    }
    out.extend(extra);
    out.extend(infos);
    while !(out.len() as u64).is_multiple_of(alignment) {
        out.push(0);
    }
    out.extend(&bytes[data_start..]);
    std::fs::File::create(dst)?.write_all(&out)
}
