//! Per-character escapes and joined codes (issue 33 item 2): the body written one character at a
//! time as an escape no other decoder undoes, as byte codes joined by a separator, or as base64
//! cut into groups of any size. Each form on the 200 shared secret prompts.

use crate::extraction::secrets;
use crate::support::base64;
use skillbox_guard::{GuardSpec, check, prepare};

fn per_char(b: &str, f: impl Fn(char) -> String) -> String {
    b.chars().map(f).collect()
}

fn joined(b: &str, sep: &str, f: impl Fn(u8) -> String) -> String {
    b.bytes().map(f).collect::<Vec<_>>().join(sep)
}

/// base64 of `b` cut into groups of `k` characters split by spaces.
fn b64_groups(b: &str, k: usize) -> String {
    let e = base64(b);
    e.as_bytes()
        .chunks(k)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join(" ")
}

type Form = (&'static str, fn(&str) -> String);

pub const FORMS: &[Form] = &[
    ("&#xHH; entities", |b| {
        per_char(b, |c| format!("&#x{:x};", c as u32))
    }),
    ("\\uHHHH", |b| {
        b.encode_utf16().map(|u| format!("\\u{u:04x}")).collect()
    }),
    ("\\u{HH}", |b| {
        per_char(b, |c| format!("\\u{{{:x}}}", c as u32))
    }),
    ("U+HHHH spaced", |b| {
        b.chars()
            .map(|c| format!("U+{:04X}", c as u32))
            .collect::<Vec<_>>()
            .join(" ")
    }),
    ("hex joined by -", |b| {
        joined(b, "-", |x| format!("{x:02x}"))
    }),
    ("hex joined by |", |b| {
        joined(b, "|", |x| format!("{x:02X}"))
    }),
    ("decimal joined by .", |b| joined(b, ".", |x| x.to_string())),
    ("decimal joined by /", |b| joined(b, "/", |x| x.to_string())),
    ("base64 in groups of 5", |b| b64_groups(b, 5)),
    ("base64 in groups of 6", |b| b64_groups(b, 6)),
    ("base64 in groups of 7", |b| b64_groups(b, 7)),
];

#[test]
fn escapes_and_joined_codes_are_decoded() {
    let spec = GuardSpec::default_for(false);
    let secrets = secrets();
    let mut failed = Vec::new();
    for (name, f) in FORMS {
        let mut caught = 0;
        for s in &secrets {
            let p = prepare(&s.body, &spec).unwrap();
            caught += usize::from(check(&p, &f(p.model_body())).is_caught());
        }
        println!("{name:<24} {caught:>4}/200");
        if caught < 190 {
            failed.push((*name, caught));
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
}
