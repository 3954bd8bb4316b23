//! Decoders of per-character escapes and of codes joined by a separator (issue 33 item 2): forms
//! no other decoder of the table undoes.
//!
//! - [`char_escapes`]: `&#x54;` (HTML hex entities), `\u0054` and `\U00000054` (JSON, JavaScript,
//!   Python; UTF-16 surrogate pairs joined), `\u{54}` (Rust, ES6), `\x{54}` (Perl), `U+0054`.
//! - [`joined_codes`]: hex or decimal byte codes written as one token joined by one repeated
//!   separator that is not a letter or digit (`54-68-65`, `84.104.101`, `54|68|65`, `0x54/0x68`).
//! - [`base64_groups`]: base64 cut into groups of any one size split by white space
//!   (`SGVsb G8gd2 9ybGQ`), which the run finder, reading runs of 8+ in whole blocks of four,
//!   does not join.

use crate::decode::{b64_decode, decimal_codes, hex_runs, push_text};

/// Fewest escapes in one run decoded (a lone `U+2014` in prose names a character).
const MIN_ESCAPES: usize = 3;
/// Most bytes of other text between two escapes of one run (`\u0059\u006f\u0075 \u0061`: the
/// space between words).
const MAX_GAP: usize = 3;

/// The character an escape at the start of `s` writes, and the escape's length in bytes.
fn escape_at(s: &[u8]) -> Option<(u32, usize)> {
    let hex_run = |from: usize, min: usize, max: usize| -> Option<(u32, usize)> {
        let digits = s
            .get(from..)?
            .iter()
            .take(max)
            .take_while(|c| c.is_ascii_hexdigit())
            .count();
        if digits < min {
            return None;
        }
        let text = std::str::from_utf8(&s[from..from + digits]).ok()?;
        Some((u32::from_str_radix(text, 16).ok()?, from + digits))
    };
    match s {
        [b'&', b'#', b'x' | b'X', ..] => {
            let (v, end) = hex_run(3, 1, 6)?;
            Some((v, end + usize::from(s.get(end) == Some(&b';'))))
        }
        [b'\\', b'u' | b'x', b'{', ..] => {
            let (v, end) = hex_run(3, 1, 6)?;
            (s.get(end) == Some(&b'}')).then_some((v, end + 1))
        }
        [b'\\', b'u', ..] => {
            let (v, end) = hex_run(2, 4, 4)?;
            (end == 6).then_some((v, end))
        }
        [b'\\', b'U', ..] => {
            let (v, end) = hex_run(2, 8, 8)?;
            (end == 10).then_some((v, end))
        }
        [b'U' | b'u', b'+', ..] => hex_run(2, 4, 6),
        _ => None,
    }
}

/// Text decoded from runs of per-character escapes (at least [`MIN_ESCAPES`], other text of up
/// to [`MAX_GAP`] bytes between two of them kept as written), or `None`.
pub fn char_escapes(text: &str) -> Option<String> {
    let b = text.as_bytes();
    // Every escape starts with one of these: most texts have none, and are passed at once.
    if !b.iter().any(|&c| c == b'\\' || c == b'&' || c == b'+') {
        return None;
    }
    let mut out = String::new();
    let mut run = String::new();
    let mut escapes = 0;
    let mut last_end: Option<usize> = None;
    let flush = |run: &mut String, escapes: &mut usize, out: &mut String| {
        if *escapes >= MIN_ESCAPES {
            push_text(out, run.as_bytes());
        }
        run.clear();
        *escapes = 0;
    };
    let mut i = 0;
    while i < b.len() {
        let Some((mut v, mut len)) = escape_at(&b[i..]) else {
            i += 1;
            continue;
        };
        // A UTF-16 surrogate pair, `\uD83D\uDE00`.
        if (0xD800..0xDC00).contains(&v)
            && let Some((lo, l2)) = escape_at(&b[i + len..])
            && (0xDC00..0xE000).contains(&lo)
        {
            v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            len += l2;
        }
        let Some(c) = char::from_u32(v) else {
            i += len;
            continue;
        };
        match last_end {
            Some(e) if i - e <= MAX_GAP && !b[e..i].contains(&b'\n') => {
                run.push_str(text.get(e..i).unwrap_or(""));
            }
            _ => flush(&mut run, &mut escapes, &mut out),
        }
        run.push(c);
        escapes += 1;
        i += len;
        last_end = Some(i);
    }
    flush(&mut run, &mut escapes, &mut out);
    (!out.is_empty()).then_some(out)
}

/// Text decoded from whitespace tokens that are four or more groups of letters and digits (up to
/// four each: `54`, `104`, `0x54`) joined by one repeated separator that is neither (`54-68-65`,
/// `84.104.101`): the groups read as hex and as decimal byte codes, as `hex_runs` and
/// `decimal_codes` read them split by spaces.
pub fn joined_codes(text: &str) -> Option<String> {
    let mut groups = String::new();
    let mut any = false;
    for tok in text.split_whitespace() {
        let tok = tok.trim_matches(|c: char| matches!(c, '(' | ')' | '[' | ']' | '"' | '\''));
        let b = tok.as_bytes();
        // The separator: the first byte that is not a letter or digit.
        let Some(&sep) = b.iter().find(|c| !c.is_ascii_alphanumeric()) else {
            groups.push('\n');
            continue;
        };
        // A sentence's full stop or comma after a token is not a separator.
        let tok = tok.trim_end_matches(['.', ',', ';', ':', '!', '?']);
        let parts: Vec<&str> = tok.split(sep as char).collect();
        let ok = sep.is_ascii_punctuation()
            && parts.len() >= 4
            && parts.iter().all(|p| {
                (1..=4).contains(&p.len())
                    && p.bytes().all(|c| c.is_ascii_alphanumeric())
                    && p.bytes().any(|c| c.is_ascii_digit())
            });
        if !ok {
            groups.push('\n');
            continue;
        }
        any = true;
        for p in parts {
            groups.push_str(p);
            groups.push(' ');
        }
    }
    if !any {
        return None;
    }
    let mut out = String::new();
    for t in [hex_runs(&groups), decimal_codes(&groups)]
        .into_iter()
        .flatten()
    {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&t);
    }
    (!out.is_empty()).then_some(out)
}

fn body(t: &str) -> &str {
    t.trim_end_matches('=')
}

fn is_b64(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_')
}

/// Text decoded from base64 cut into groups of one size (2 to 16 characters, the last group
/// shorter or `=`-padded) split by white space: three or more groups, twelve or more characters,
/// and some group holds a digit, a `+` or `/`, or a capital past its first character (so that a
/// line of ordinary words of one length is passed at once).
pub fn base64_groups(text: &str) -> Option<String> {
    let mut out = String::new();
    let toks: Vec<&str> = text.split_whitespace().collect();
    let mut i = 0;
    while i < toks.len() {
        let size = toks[i].len();
        let member = |t: &str, last: bool| {
            let core = body(t);
            !core.is_empty()
                && core.bytes().all(is_b64)
                && t.len() - core.len() <= 2
                && (if last {
                    t.len() <= size
                } else {
                    t.len() == size && core.len() == size
                })
        };
        if !(2..=16).contains(&size) || !member(toks[i], false) {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < toks.len() && member(toks[j], false) {
            j += 1;
        }
        // The last group: shorter, or padded.
        if j < toks.len() && member(toks[j], true) {
            j += 1;
        }
        let chain = &toks[i..j];
        let chars: usize = chain.iter().map(|t| t.len()).sum();
        let telling = chain.iter().any(|t| {
            t.bytes().enumerate().any(|(k, c)| {
                c.is_ascii_digit() || c == b'+' || c == b'/' || (k > 0 && c.is_ascii_uppercase())
            })
        });
        if chain.len() >= 3 && chars >= 12 && telling {
            let joined: Vec<u8> = chain.iter().flat_map(|t| body(t).bytes()).collect();
            push_text(&mut out, &b64_decode(&joined));
        }
        i = j.max(i + 1);
    }
    (!out.is_empty()).then_some(out)
}
