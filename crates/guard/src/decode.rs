//! Decoders for what an answer may hide the body in, and the views the check scans.
//!
//! Decoders that change the bytes (base64, hex, `%XX`, byte codes, base32, base85, ROT47,
//! Atbash, spelled-out characters, Morse, acrostic initials, leetspeak) produce new texts; they are one table, [`DECODERS`], that the
//! check runs over the answer and over what they decode, nested. Rearrangements (reversal, every
//! k-th character or word, digits dropped) are views of a text streamed straight into the
//! shift-invariant encoder (Caesar shifts and separators need no view: the encoding folds them
//! away).

use std::sync::OnceLock;

use crate::text;

/// Which decoder produced the text a catch was found in (the outermost one when nested).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decoded {
    None,
    Base64,
    Hex,
    /// `%XX` escapes (URL encoding).
    Percent,
    /// Byte values as decimal numbers (`80 69 76`, `&#80;`).
    Decimal,
    /// Byte values as octal numbers (`120 105 114`, `\120`, `0o120`).
    Octal,
    /// Byte values as binary numbers (`01010000 01000101`).
    Binary,
    /// RFC 4648 base32, either case.
    Base32,
    /// Ascii85, RFC 1924 (Python's `b85encode`) and Z85.
    Base85,
    /// Characters spelled one by one: NATO/phonetic letters, digit names and symbol names
    /// (`Papa Echo Lima dash four two`).
    Spelled,
    /// ROT47 (the printable ASCII characters rotated by 47).
    Rot47,
    /// Atbash (`a` for `z`, `b` for `y`, ...).
    Atbash,
    /// Per-character escapes: `&#x54;`, `\u0054`, `\u{54}`, `U+0054` (`escapes.rs`).
    Escaped,
    /// Hex or decimal byte codes joined by one repeated separator (`54-68-65`, `84.104.101`).
    JoinedCodes,
    /// Base64 cut into groups of one size split by white space (`SGVsb G8gd2`).
    Base64Groups,
    /// Morse code (`.... . .-. ---`, `morse.rs`).
    Morse,
    /// The initials of a stanza's lines or a sentence's words (`acrostic.rs`).
    Acrostic,
    /// Leetspeak read as letters (`7h3 5k1ll`, `leet.rs`).
    Leet,
    /// Letters as their places in the alphabet, 1 to 26 (`25-15-21 1-18-5`, `8 9 / 20 8 5`).
    A1z26,
}

/// One decoder of the table: what it is called in a [`crate::Via`], and the function. `decode`
/// returns the text it decoded from `text` (only that), or `None` when nothing decodes to text;
/// it never panics, and its output is at most twice its input (the check's budget bounds the
/// sum, see `check::walk`).
pub struct Decoder {
    pub kind: Decoded,
    pub decode: fn(&str) -> Option<String>,
}

/// Every decoder the check runs, in order. A new decoder is one entry here (and its [`Decoded`]
/// name). The whole-line ciphers, whose output is as long as the lines they take, come last, so
/// that the decoded-text budget goes to the specific decoders first.
pub const DECODERS: &[Decoder] = &[
    Decoder {
        kind: Decoded::Base64,
        decode: base64_runs,
    },
    Decoder {
        kind: Decoded::Hex,
        decode: hex_runs,
    },
    Decoder {
        kind: Decoded::Percent,
        decode: percent_lines,
    },
    Decoder {
        kind: Decoded::Decimal,
        decode: decimal_codes,
    },
    Decoder {
        kind: Decoded::A1z26,
        decode: a1z26_runs,
    },
    Decoder {
        kind: Decoded::Octal,
        decode: octal_codes,
    },
    Decoder {
        kind: Decoded::Binary,
        decode: binary_codes,
    },
    Decoder {
        kind: Decoded::Escaped,
        decode: crate::escapes::char_escapes,
    },
    Decoder {
        kind: Decoded::JoinedCodes,
        decode: crate::escapes::joined_codes,
    },
    Decoder {
        kind: Decoded::Base64Groups,
        decode: crate::escapes::base64_groups,
    },
    Decoder {
        kind: Decoded::Base32,
        decode: base32_runs,
    },
    Decoder {
        kind: Decoded::Base85,
        decode: base85_runs,
    },
    Decoder {
        kind: Decoded::Spelled,
        decode: spelled,
    },
    Decoder {
        kind: Decoded::Morse,
        decode: crate::morse::morse_runs,
    },
    Decoder {
        kind: Decoded::Acrostic,
        decode: crate::acrostic::initials,
    },
    // Before the whole-line ciphers: a leetspeak line has few vowels left and looks like
    // Atbash, whose output would spend the budget first.
    Decoder {
        kind: Decoded::Leet,
        decode: crate::leet::leet_lines,
    },
    Decoder {
        kind: Decoded::Rot47,
        decode: rot47_lines,
    },
    Decoder {
        kind: Decoded::Atbash,
        decode: atbash_lines,
    },
];

/// Text decoded from base64 runs anywhere in `text`, or `None` if none decodes to text.
///
/// A run is a maximal sequence of the standard or URL-safe alphabet (optionally `=`-padded) of at
/// least eight characters; runs split by whitespace (wrapped lines) are also tried joined, and
/// each at the four alignments (a run glued to a preceding word is then still read).
pub fn base64_runs(text: &str) -> Option<String> {
    radix_runs(
        text,
        &Radix {
            symbol: is_b64,
            max_pad: 2,
            block: 4,
            min: 8,
            alignments: 4,
            decode: b64_decode,
        },
    )
}

/// A radix encoding as the run finder reads it (generic over its alphabet test, which is then
/// inlined: the finder asks it of every byte of the text).
struct Radix<S: Fn(u8) -> bool> {
    /// A character of the alphabet (padding excluded).
    symbol: S,
    /// How many `=` a run may end with.
    max_pad: usize,
    /// Characters per block: runs of whole blocks split by whitespace are lines of one text.
    block: usize,
    /// The shortest run tried.
    min: usize,
    /// Alignments tried for each run (a run glued to a preceding word).
    alignments: usize,
    /// Lenient decoding of a run (its padding included).
    decode: fn(&[u8]) -> Vec<u8>,
}

/// Text decoded from the runs of `r`'s alphabet in `text`: each run (at each alignment until one
/// reads as text), and chains of runs split only by whitespace, each but the last whole blocks
/// without padding, joined (the line-wrapped form of one encoded text).
fn radix_runs<S: Fn(u8) -> bool>(text: &str, r: &Radix<S>) -> Option<String> {
    let b = text.as_bytes();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !(r.symbol)(b[i]) {
            i += 1;
            continue;
        }
        let s = i;
        while i < b.len() && (r.symbol)(b[i]) {
            i += 1;
        }
        let mut e = i;
        while e < b.len() && b[e] == b'=' && e - i < r.max_pad {
            e += 1;
        }
        if e - s >= r.min {
            runs.push((s, e));
        }
        i = e.max(s + 1);
    }
    let mut out = String::new();
    let mut k = 0;
    while k < runs.len() {
        let mut end = k;
        while end + 1 < runs.len() {
            let (s, e) = runs[end];
            let gap = &b[e..runs[end + 1].0];
            let whole = (e - s) % r.block == 0 && b[e - 1] != b'=';
            if whole && !gap.is_empty() && gap.iter().all(u8::is_ascii_whitespace) {
                end += 1;
            } else {
                break;
            }
        }
        if end > k {
            let joined: Vec<u8> = runs[k..=end]
                .iter()
                .flat_map(|&(s, e)| b[s..e].iter().copied())
                .collect();
            push_text(&mut out, &(r.decode)(&joined));
        }
        for &(s, e) in &runs[k..=end] {
            for skip in 0..r.alignments {
                if e - s < skip + r.min {
                    break;
                }
                if push_text(&mut out, &(r.decode)(&b[s + skip..e])) {
                    break;
                }
            }
        }
        k = end + 1;
    }
    (!out.is_empty()).then_some(out)
}

fn is_b64(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_')
}

fn b64_value(c: u8) -> Option<u32> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' | b'-' => 62,
        b'/' | b'_' => 63,
        _ => return None,
    } as u32)
}

/// Lenient base64: stops at the first character outside the alphabet; a trailing partial quad
/// yields the bytes it holds.
pub fn b64_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3 + 2);
    let mut acc = 0u32;
    let mut n = 0;
    for &c in s {
        let Some(v) = b64_value(c) else { break };
        acc = (acc << 6) | v;
        n += 1;
        if n == 4 {
            out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8, acc as u8]);
            acc = 0;
            n = 0;
        }
    }
    match n {
        2 => out.push((acc >> 4) as u8),
        3 => out.extend_from_slice(&[(acc >> 10) as u8, (acc >> 2) as u8]),
        _ => {}
    }
    out
}

/// ASCII whitespace as `char::is_whitespace` has it (tab to carriage return, space) and the
/// bytes of `extra`: the separators of [`pieces`], as a table (a lookup, not a branch, per byte).
const fn separators(extra: &[u8]) -> [bool; 128] {
    let mut t = [false; 128];
    let mut c = 9;
    while c <= 13 {
        t[c] = true;
        c += 1;
    }
    t[32] = true;
    let mut i = 0;
    while i < extra.len() {
        t[extra[i] as usize & 127] = true;
        i += 1;
    }
    t
}

/// `each` of the pieces of `text` between separators — any Unicode white space, or an ASCII
/// byte `sep` marks ([`separators`]) —, as `text.split` gives them, read a byte at a time and
/// inlined (the byte-code and hex decoders cut every text they are given into tokens).
#[inline(always)]
fn pieces<'a>(text: &'a str, sep: &[bool; 128], mut each: impl FnMut(&'a str)) {
    let b = text.as_bytes();
    let (mut start, mut i) = (0, 0);
    while let Some(&c) = b.get(i) {
        let width = if c.is_ascii() {
            if !sep[usize::from(c)] {
                i += 1;
                continue;
            }
            1
        } else {
            match text.get(i..).and_then(|rest| rest.chars().next()) {
                Some(ch) if ch.is_whitespace() => ch.len_utf8(),
                Some(ch) => {
                    i += ch.len_utf8();
                    continue;
                }
                None => {
                    i += 1;
                    continue;
                }
            }
        };
        each(text.get(start..i).unwrap_or(""));
        i += width;
        start = i;
    }
    each(text.get(start..).unwrap_or(""));
}

/// `s` without the ASCII bytes `trim` accepts at either end.
fn trim_ascii(s: &str, trim: impl Fn(u8) -> bool) -> &str {
    let b = s.as_bytes();
    let cut = |c: &u8| c.is_ascii() && trim(*c);
    let start = b.iter().position(|c| !cut(c)).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !cut(c)).map_or(start, |e| e + 1);
    s.get(start..end).unwrap_or("")
}

/// Text decoded from hex runs: tokens of hex digits (optionally `0x`/`\x`-prefixed) separated by
/// whitespace, commas, colons or semicolons, at least eight digits together.
pub fn hex_runs(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() >= 8 {
            let b = run.as_bytes();
            for skip in 0..2 {
                if push_text(out, &hex_decode(&b[skip..])) {
                    break;
                }
            }
        }
        run.clear();
    };
    const SEPARATORS: [bool; 128] = separators(b",;:");
    pieces(text, &SEPARATORS, |tok| {
        let tok = trim_ascii(tok, |c| c.is_ascii_punctuation() && c != b'\\');
        if tok.is_empty() {
            return;
        }
        // Most prose tokens have a letter past `f`: no allocation for them.
        if !tok
            .bytes()
            .all(|c| c.is_ascii_hexdigit() || matches!(c, b'x' | b'X' | b'\\'))
        {
            flush(&mut run, &mut out);
            return;
        }
        if tok.bytes().all(|c| c.is_ascii_hexdigit()) {
            // No prefix to strip (a run of numbers is all tokens like this): no allocation.
            run.push_str(tok);
            return;
        }
        let t = tok.replace("\\x", "").replace("0x", "").replace("0X", "");
        if !t.is_empty() && t.bytes().all(|c| c.is_ascii_hexdigit()) {
            run.push_str(&t);
        } else {
            flush(&mut run, &mut out);
        }
    });
    flush(&mut run, &mut out);
    (!out.is_empty()).then_some(out)
}

fn hex_decode(s: &[u8]) -> Vec<u8> {
    let v = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
    s.chunks_exact(2)
        .map(|p| (v(p[0]) << 4) | v(p[1]))
        .collect()
}

/// Decoded bytes as text, if they read as text: three letters or digits at least, and valid
/// UTF-8 without control characters, or at least 80 % printable ASCII (a slightly broken
/// encoding). Random bytes, which is what ordinary words decode to, are neither.
fn as_text(bytes: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    if bytes.len() < 3 {
        return None;
    }
    let printable = |b: &u8| b.is_ascii_graphic() || b.is_ascii_whitespace();
    let s = match std::str::from_utf8(bytes) {
        Ok(s) if s.chars().all(|c| !c.is_control() || c.is_whitespace()) => s.into(),
        _ if bytes.iter().filter(|b| printable(b)).count() * 5 >= bytes.len() * 4 => {
            String::from_utf8_lossy(bytes)
        }
        _ => return None,
    };
    s.chars()
        .filter(|c| c.is_alphanumeric())
        .nth(2)
        .is_some()
        .then_some(s)
}

/// Append decoded bytes if they read as text ([`as_text`]); says whether it did.
pub(crate) fn push_text(out: &mut String, bytes: &[u8]) -> bool {
    let Some(s) = as_text(bytes) else {
        return false;
    };
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&s);
    true
}

/// Text decoded from the lines of `text` that hold `%XX` escapes, when it holds at least three
/// (a URL-encoded answer; a lone `100%` or `%20` in prose is not one). A line holding a
/// character that URL encoding always escapes (`"`, `<`, `>`, `\`, `^`, a backtick, `{`, `|`,
/// `}`) is not URL-encoded as a whole: only its pieces that could be (runs between such
/// characters and whitespace) with an escape in them are decoded — so a quoted
/// `"PELICAN%2D42"` is read, and the `%XX` that ROT47 or base85 text holds by chance does not
/// make a second copy of that whole text for every view to scan.
pub fn percent_lines(text: &str) -> Option<String> {
    let escape = |w: &[u8]| w[0] == b'%' && w[1].is_ascii_hexdigit() && w[2].is_ascii_hexdigit();
    let escaped = |s: &str| s.as_bytes().windows(3).any(escape);
    text.as_bytes().windows(3).filter(|w| escape(w)).nth(2)?;
    const NEVER_PLAIN: &[u8] = b"\"<>\\^`{|}";
    let never = |c: char| c.is_ascii() && NEVER_PLAIN.contains(&(c as u8));
    let mut out = String::new();
    let mut decode = |s: &str| {
        let bytes: Vec<u8> = percent_encoding::percent_decode_str(s).collect();
        push_text(&mut out, &bytes);
    };
    for line in text.lines() {
        if !escaped(line) {
            continue;
        }
        if !line.contains(never) {
            decode(line);
            continue;
        }
        for piece in line.split(|c: char| c.is_whitespace() || never(c)) {
            if escaped(piece) {
                decode(piece);
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Byte values written as numbers, one a token (split by whitespace, `,` and `;`, and by the
/// `\` and `&` of escapes such as `\120` and `&#80;`): runs of four or more that `parse`
/// accepts, decoded where their bytes read as text. `parse` appends a token's bytes to the run,
/// or says it is not one.
fn code_runs(text: &str, parse: fn(&str, &mut Vec<u8>) -> bool) -> Option<String> {
    let mut out = String::new();
    let mut run: Vec<u8> = Vec::new();
    let flush = |run: &mut Vec<u8>, out: &mut String| {
        if run.len() >= 4 {
            push_text(out, run);
        }
        run.clear();
    };
    const SEPARATORS: [bool; 128] = separators(b",;\\&");
    const TRIMMED: &[u8] = b"[](){}\"'.:";
    pieces(text, &SEPARATORS, |tok| {
        // Every code has a digit: a word without one (most of a text) ends the run at once,
        // and punctuation alone is passed over, as trimmed to nothing.
        if !tok.bytes().any(|c| c.is_ascii_digit()) {
            if !tok.bytes().all(|c| TRIMMED.contains(&c)) {
                flush(&mut run, &mut out);
            }
            return;
        }
        let tok = trim_ascii(tok, |c| TRIMMED.contains(&c));
        if !tok.is_empty() && !parse(tok, &mut run) {
            flush(&mut run, &mut out);
        }
    });
    flush(&mut run, &mut out);
    (!out.is_empty()).then_some(out)
}

/// `digits` in `radix`, if all are its digits and the value is a byte.
fn byte_of(digits: &str, radix: u32) -> Option<u8> {
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u8::from_str_radix(digits, radix).ok()
}

/// Append the byte `digits` (a number in `radix` of at most `max_len` digits) is; says whether
/// it was one.
fn push_code(digits: &str, radix: u32, max_len: usize, run: &mut Vec<u8>) -> bool {
    match byte_of(digits, radix).filter(|_| digits.len() <= max_len) {
        Some(v) => {
            run.push(v);
            true
        }
        None => false,
    }
}

/// Decimal byte codes: `80 69 76`, `80,69,76`, `&#80;&#69;`.
pub fn decimal_codes(text: &str) -> Option<String> {
    code_runs(text, |tok, run| {
        push_code(tok.strip_prefix('#').unwrap_or(tok), 10, 3, run)
    })
}

/// Fewest numbers of an A1Z26 run: three are a date or a list's numbers.
const A1Z26_MIN: usize = 4;

/// The letter a number 1-26 stands for in A1Z26 (`1` is `a`), as written: one or two digits.
fn a1z26_letter(n: &str) -> Option<char> {
    if n.is_empty() || n.len() > 2 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: u8 = n.parse().ok()?;
    (1..=26).contains(&v).then(|| char::from(b'a' + v - 1))
}

/// Most characters of the mark between two numbers of an A1Z26 word (`25--15`, `25->15`,
/// `(25)(15)`: review 31 R31-4).
const A1Z26_MARK_MAX: usize = 3;

/// The letters of one A1Z26 word written in one token (`25-15-21`, `25.15.21`, `25x15x21`,
/// `25->15->21`, `7`): numbers 1-26 of one or two digits, a mark of one to [`A1Z26_MARK_MAX`]
/// characters that are no digits between each two (review 30 R30-6: any mark, not only `-` and
/// `,`; review 31 R31-4: two or three characters, `--`, `->`, `)(`). `None` when the token is
/// anything else (a number past 26 or of three digits, a longer mark, a word, `4th`).
fn a1z26_word(w: &str, letters: &mut Vec<char>) -> bool {
    letters.clear();
    let mut number = String::new();
    let mut mark = 0usize;
    for c in w.chars() {
        if c.is_ascii_digit() {
            mark = 0;
            number.push(c);
            if number.len() > 2 {
                return false;
            }
            continue;
        }
        if mark == 0 {
            match a1z26_letter(&number) {
                Some(l) => letters.push(l),
                None => return false,
            }
            number.clear();
        }
        mark += 1;
        if mark > A1Z26_MARK_MAX {
            return false;
        }
    }
    match a1z26_letter(&number) {
        Some(l) => letters.push(l),
        None => return false,
    }
    true
}

/// Text decoded from A1Z26 runs (review 29 R29-2 b): letters as their places in the alphabet,
/// 1 to 26, a word's letters joined by any one mark (`25-15-21`, `25.15.21`, `25_15_21`,
/// `25x15x21`; review 30 R30-6) or standing apart with words split by `/` or a mark standing
/// alone (`25 15 21 / 1 18 5`, `… | …`) or by brackets and quotes (`[25 15 21] [1 18 5]`);
/// brackets, quotes and marks around a token (`(25-15-21)`, `"1-18-5"`, `21!`) are passed over.
/// Runs of [`A1Z26_MIN`]+ numbers, one line each; a number outside 1-26, a word or a number of
/// three digits ends a run (a date `2024.05.30`, an address `10.0.0.1`). A decimal byte code is
/// 65-122, so the decimal decoder never read it. Read with every script's digits as ASCII
/// digits and zero-width characters dropped (`２５－１５`, `25\u{200b}-15`: review 31 R31-4,
/// [`text::digits_folded`]). One pass over the whitespace tokens, each split once.
pub fn a1z26_runs(text: &str) -> Option<String> {
    let folded = text::digits_folded(text);
    let text = folded.as_ref();
    let mut out = String::new();
    let (mut run, mut numbers) = (String::new(), 0usize);
    let mut letters = Vec::new();
    let end_run = |run: &mut String, numbers: &mut usize, out: &mut String| {
        if *numbers >= A1Z26_MIN {
            out.push_str(run.trim_end());
            out.push('\n');
        }
        run.clear();
        *numbers = 0;
    };
    let word_break = |run: &mut String| {
        if !run.is_empty() && !run.ends_with(' ') {
            run.push(' ');
        }
    };
    for tok in text.split_whitespace() {
        let mut read = true;
        for (k, piece) in tok.split('/').enumerate() {
            if k > 0 {
                word_break(&mut run);
            }
            let inner = piece.trim_matches(|c: char| !c.is_alphanumeric());
            if inner.is_empty() {
                // A mark standing alone (`|`, `-`) splits words as `/` does.
                word_break(&mut run);
                continue;
            }
            if !a1z26_word(inner, &mut letters) {
                read = false;
                break;
            }
            // A bracket or quote opening or closing a token bounds a word (`[25 15 21]`).
            let (opens, closes) = (
                piece.starts_with(['(', '[', '{', '"', '\'', '“', '‘', '«']),
                piece.ends_with([')', ']', '}', '"', '\'', '”', '’', '»']),
            );
            if opens {
                word_break(&mut run);
            }
            numbers += letters.len();
            run.extend(letters.iter());
            // Letters joined in one token are a word of their own.
            if letters.len() > 1 || closes {
                run.push(' ');
            }
        }
        if !read {
            end_run(&mut run, &mut numbers, &mut out);
        }
    }
    end_run(&mut run, &mut numbers, &mut out);
    (!out.is_empty()).then_some(out)
}

/// Octal byte codes: `120 105 114`, `\120\105`, `0o120`, `0120`.
pub fn octal_codes(text: &str) -> Option<String> {
    code_runs(text, |tok, run| {
        push_code(tok.strip_prefix("0o").unwrap_or(tok), 8, 4, run)
    })
}

/// Binary byte codes: `01010000 01000101`, 7-bit `1010000`, `0b01010000`, or one long string of
/// whole bytes.
pub fn binary_codes(text: &str) -> Option<String> {
    code_runs(text, |tok, run| {
        let d = tok.strip_prefix("0b").unwrap_or(tok);
        let n = d.len();
        if !(n == 7 || n % 8 == 0) || n == 0 || !d.bytes().all(|c| c == b'0' || c == b'1') {
            return false;
        }
        if n == 7 {
            run.extend(byte_of(d, 2));
        } else {
            run.extend(
                d.as_bytes()
                    .chunks(8)
                    .filter_map(|c| std::str::from_utf8(c).ok().and_then(|c| byte_of(c, 2))),
            );
        }
        true
    })
}

/// Text decoded from base32 runs (RFC 4648 alphabet, `=`-padded or not): upper-case runs of 8+
/// characters, lower-case ones of 16+ (an ordinary long word is a lower-case run), never mixed;
/// wrapped lines joined as for base64.
pub fn base32_runs(text: &str) -> Option<String> {
    radix_runs(
        text,
        &Radix {
            symbol: |c| c.is_ascii_alphabetic() || (b'2'..=b'7').contains(&c),
            max_pad: 6,
            block: 8,
            min: 8,
            alignments: 1,
            decode: b32_decode,
        },
    )
}

/// Lenient base32 (data-encoding, trailing bits not checked): one case only, padding dropped,
/// cut to the longest length that is whole bytes.
fn b32_decode(run: &[u8]) -> Vec<u8> {
    static BASE32: OnceLock<Option<data_encoding::Encoding>> = OnceLock::new();
    let enc = BASE32.get_or_init(|| {
        let mut spec = data_encoding::Specification::new();
        spec.symbols.push_str("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567");
        spec.translate.from.push_str("abcdefghijklmnopqrstuvwxyz");
        spec.translate.to.push_str("ABCDEFGHIJKLMNOPQRSTUVWXYZ");
        spec.check_trailing_bits = false;
        spec.encoding().ok()
    });
    let run = run.strip_suffix(b"======").unwrap_or(run);
    let run: &[u8] = &run[..run.iter().position(|&c| c == b'=').unwrap_or(run.len())];
    let upper = run.iter().any(u8::is_ascii_uppercase);
    let lower = run.iter().any(u8::is_ascii_lowercase);
    if lower && (upper || run.len() < 16) {
        return Vec::new();
    }
    // Lengths that are whole bytes: 0, 2, 4, 5 or 7 characters past the last full block.
    let mut n = run.len();
    while !matches!(n % 8, 0 | 2 | 4 | 5 | 7) {
        n -= 1;
    }
    match enc {
        Some(e) => e.decode(&run[..n]).unwrap_or_default(),
        None => Vec::new(),
    }
}

/// Text decoded from base85 runs: whitespace-free runs of 10+ printable characters (or wrapped
/// lines of whole 5-character blocks), `<~ ~>` stripped, read in the first alphabet that gives
/// text of Ascii85 (Adobe, Python's `a85encode`), RFC 1924 (Python's `b85encode`) and Z85.
pub fn base85_runs(text: &str) -> Option<String> {
    radix_runs(
        text,
        &Radix {
            symbol: |c| c.is_ascii_graphic(),
            max_pad: 0,
            block: 5,
            min: 10,
            alignments: 1,
            decode: b85_decode,
        },
    )
}

const B85_RFC1924: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";
const B85_Z85: &[u8; 85] =
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// The reverse of an alphabet: the value of each byte, or 255.
const fn b85_values(alphabet: Option<&[u8; 85]>) -> [u8; 256] {
    let mut t = [255u8; 256];
    let mut i = 0;
    while i < 85 {
        let c = match alphabet {
            Some(a) => a[i],
            None => 33 + i as u8, // Ascii85: `!` to `u`
        };
        t[c as usize] = i as u8;
        i += 1;
    }
    t
}

/// Hand-written: the crates checked (`ascii85` 0.2.1 overflows a `u32` on `uuuuu`, which panics
/// in a debug build, and cannot read `z`; `base85` 2.0.0 has RFC 1924 only; `z85` Z85 only) each
/// read one alphabet and refuse what a model writes slightly wrong.
fn b85_decode(run: &[u8]) -> Vec<u8> {
    const TABLES: [[u8; 256]; 3] = [
        b85_values(None),
        b85_values(Some(B85_RFC1924)),
        b85_values(Some(B85_Z85)),
    ];
    let run = run.strip_prefix(b"<~").unwrap_or(run);
    let run = run.strip_suffix(b"~>").unwrap_or(run);
    for table in &TABLES {
        let bytes = b85_with(run, table);
        if as_text(&bytes).is_some() {
            return bytes;
        }
    }
    Vec::new()
}

/// Lenient base85 in one alphabet: stops at the first character outside it or the first block
/// over 32 bits; a trailing partial block yields the bytes it holds.
fn b85_with(run: &[u8], table: &[u8; 256]) -> Vec<u8> {
    let mut out = Vec::with_capacity(run.len() / 5 * 4 + 4);
    let mut acc = 0u64;
    let mut n = 0;
    let block = |acc: u64, n: usize, out: &mut Vec<u8>| -> bool {
        // A partial block of `n` digits is padded with the highest digit and yields n - 1 bytes.
        let mut v = acc;
        for _ in n..5 {
            v = v * 85 + 84;
        }
        let Ok(v) = u32::try_from(v) else {
            return false;
        };
        out.extend_from_slice(&v.to_be_bytes()[..n - 1]);
        true
    };
    for &c in run {
        let v = table[c as usize];
        if v == 255 {
            break;
        }
        acc = acc * 85 + u64::from(v);
        n += 1;
        if n == 5 {
            if !block(acc, 5, &mut out) {
                return out;
            }
            acc = 0;
            n = 0;
        }
    }
    if n >= 2 {
        block(acc, n, &mut out);
    }
    out
}

/// A word that spells one character: a NATO/phonetic letter, a digit name, or a symbol name.
fn spelled_char(w: &str) -> Option<(char, bool)> {
    // Every name is 3 to 10 ASCII letters: other words (most of a text) are refused before
    // anything is compared, and the rest lower-cased on the stack.
    let b = w.as_bytes();
    if !(3..=10).contains(&b.len()) {
        return None;
    }
    let mut lower = [0u8; 10];
    for (l, c) in lower.iter_mut().zip(b) {
        if !c.is_ascii_alphabetic() {
            return None;
        }
        *l = c.to_ascii_lowercase();
    }
    let letter = |c: u8| Some((char::from(c), false));
    match &lower[..b.len()] {
        b"alpha" | b"alfa" => letter(b'A'),
        b"bravo" => letter(b'B'),
        b"charlie" => letter(b'C'),
        b"delta" => letter(b'D'),
        b"echo" => letter(b'E'),
        b"foxtrot" => letter(b'F'),
        b"golf" => letter(b'G'),
        b"hotel" => letter(b'H'),
        b"india" => letter(b'I'),
        b"juliett" | b"juliet" => letter(b'J'),
        b"kilo" => letter(b'K'),
        b"lima" => letter(b'L'),
        b"mike" => letter(b'M'),
        b"november" => letter(b'N'),
        b"oscar" => letter(b'O'),
        b"papa" => letter(b'P'),
        b"quebec" => letter(b'Q'),
        b"romeo" => letter(b'R'),
        b"sierra" => letter(b'S'),
        b"tango" => letter(b'T'),
        b"uniform" => letter(b'U'),
        b"victor" => letter(b'V'),
        b"whiskey" | b"whisky" => letter(b'W'),
        b"xray" => letter(b'X'),
        b"yankee" => letter(b'Y'),
        b"zulu" => letter(b'Z'),
        b"dash" | b"hyphen" | b"minus" => Some(('-', true)),
        b"dot" => Some(('.', true)),
        b"underscore" => Some(('_', true)),
        b"slash" => Some(('/', true)),
        b"colon" => Some((':', true)),
        // Digit names: the number words' one table.
        _ => crate::numbers::digit_name(w).map(|d| (d, false)),
    }
}

/// Characters spelled one by one, joined back: `Papa Echo Lima India Charlie Alpha November
/// Four Two` is `PELICAN42`, `K 7 P M dash 2 Q X Z` is `K7PM-2QXZ`, `pelican dash four two` is
/// `pelican-42` (a symbol name joins the words beside it). A run is words that each spell a
/// character (single characters among them), with at least one name in it; only runs of four
/// letters and digits or more are kept (a fragment's length), one a line. `capital`/`uppercase`/`lowercase` inside a run are
/// skipped, and `X-ray` is `X`.
pub fn spelled(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut run = String::new();
    let mut named = false;
    // The word before the run (a symbol name at the run's start joins it), and whether the run
    // ends in a symbol name (the next word joins it).
    let mut prev: Option<&str> = None;
    let mut open_symbol = false;
    let mut prev_x = false;
    let end = |run: &mut String, named: &mut bool, out: &mut String| {
        if *named && run.chars().filter(|c| c.is_alphanumeric()).count() >= 4 {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(run);
        }
        run.clear();
        *named = false;
    };
    for w in text.split(|c: char| !c.is_alphanumeric()) {
        if w.is_empty() {
            continue;
        }
        if prev_x && w.eq_ignore_ascii_case("ray") {
            prev_x = false;
            continue;
        }
        prev_x = w.eq_ignore_ascii_case("x");
        let mut chars = w.chars();
        let first = chars.next();
        let piece = if let (Some(c), None) = (first, chars.next()) {
            Some((c, false))
        } else {
            spelled_char(w)
        };
        match piece {
            Some((c, symbol)) => {
                if symbol && run.is_empty() {
                    run.push_str(prev.unwrap_or(""));
                }
                run.push(c);
                named |= w.len() > 1;
                open_symbol = symbol;
            }
            None if !run.is_empty()
                && ["capital", "uppercase", "lowercase"]
                    .iter()
                    .any(|m| w.eq_ignore_ascii_case(m)) => {}
            None => {
                if open_symbol {
                    run.push_str(w);
                    open_symbol = false;
                }
                end(&mut run, &mut named, &mut out);
                prev = Some(w);
                continue;
            }
        }
        prev = None;
    }
    end(&mut run, &mut named, &mut out);
    (!out.is_empty()).then_some(out)
}

/// A line of three or more whitespace-separated words: ROT47 and Atbash keep the spaces of the
/// text they encode, and a line that is one long token (base64, hex, a URL) is neither.
fn worded(line: &str) -> bool {
    line.split_whitespace().nth(2).is_some()
}

/// ROT47 of the lines that look like it: three words or more, 8+ visible characters, a quarter
/// or more of them ASCII digits and punctuation (ROT47 turns most lower-case letters into both;
/// prose has a few percent). A line a third or more of which is labelled slices (`Part 170:
/// "ting and sh"`) is judged by its slices' text alone: the label's number and colon and the
/// quotes are the answer's own marks, and every line of an answer cut into short parts passed
/// for ROT47, so the whole answer was decoded and walked again (a clean answer in parts cost what
/// one in ROT47 does). ROT47 in the slices (`Part 1: "%96 !x}"`) still is, and a label before a
/// line of ROT47 (`The first character is a %96 !x} :D`) changes nothing. Other lines are left
/// out.
pub fn rot47_lines(text: &str) -> Option<String> {
    fn visible(t: &str) -> usize {
        t.chars().filter(|c| !c.is_whitespace()).count()
    }
    fn marked(t: &str) -> bool {
        let marks = t
            .bytes()
            .filter(|c| c.is_ascii_digit() || c.is_ascii_punctuation())
            .count();
        marks * 4 >= visible(t)
    }
    let looks_rotated = |line: &str| {
        let n = visible(line);
        if n < 8 || !marked(line) {
            return false;
        }
        let said: Vec<&str> = crate::slices::stated(line).iter().map(|s| s.text).collect();
        let shown = said.iter().map(|t| visible(t)).sum::<usize>();
        shown * 3 < n || marked(&said.concat())
    };
    lines_undone(text, looks_rotated, rot47)
}

/// ROT47: a printable ASCII character rotated by 47 among the 94 (its own inverse); anything
/// else as it is.
pub(crate) fn rot47(c: char) -> char {
    match c {
        '!'..='~' => (b'!' + (c as u8 - b'!' + 47) % 94) as char,
        _ => c,
    }
}

/// Atbash: an ASCII letter mirrored in the alphabet, `a` for `z` (its own inverse); anything
/// else as it is.
pub(crate) fn atbash(c: char) -> char {
    match c {
        'a'..='z' => (b'z' - (c as u8 - b'a')) as char,
        'A'..='Z' => (b'Z' - (c as u8 - b'A')) as char,
        _ => c,
    }
}

/// Atbash of the lines that look like it: three words or more, 12+ ASCII letters, more of them among `z v r l f` (the
/// Atbash of the vowels) than among `a e i o u`. Prose in a Latin-script language has about
/// three times as many vowels; its Atbash, the other way round. Other lines are left out.
pub fn atbash_lines(text: &str) -> Option<String> {
    let looks_mirrored = |line: &str| {
        let (mut letters, mut vowels, mut mirrored) = (0, 0, 0);
        for c in line.bytes() {
            if c.is_ascii_alphabetic() {
                letters += 1;
                match c.to_ascii_lowercase() {
                    b'a' | b'e' | b'i' | b'o' | b'u' => vowels += 1,
                    b'z' | b'v' | b'r' | b'l' | b'f' => mirrored += 1,
                    _ => {}
                }
            }
        }
        letters >= 12 && mirrored > vowels
    };
    lines_undone(text, looks_mirrored, atbash)
}

/// The [`worded`] lines of `text` that `looks` picks, each character through `undo`, one line
/// each; `None` when no line is picked.
fn lines_undone(
    text: &str,
    looks: impl Fn(&str) -> bool,
    undo: impl Fn(char) -> char,
) -> Option<String> {
    let picked: Vec<String> = text
        .lines()
        .filter(|line| looks(line) && worded(line))
        .map(|line| line.chars().map(&undo).collect())
        .collect();
    (!picked.is_empty()).then(|| picked.join("\n"))
}

/// Join spaced-out letters back into words: `P E L I C A N`, `P-E-L-I-C-A-N`, `p.e.l.i.c.a.n`,
/// `T-h-e p-a-s-s` (the separator used most between single characters is the one inside words;
/// any other ends a word). Everything else is kept as it is.
pub fn unspace(text: &str) -> String {
    // Segments: (is a single alphanumeric char, text).
    let mut segs: Vec<(bool, &str)> = Vec::new();
    let mut start = 0;
    let mut cur_alnum: Option<bool> = None;
    for (i, c) in text.char_indices() {
        let a = c.is_alphanumeric();
        if cur_alnum.is_some_and(|x| x != a) {
            segs.push((cur_alnum == Some(true), &text[start..i]));
            start = i;
        }
        cur_alnum = Some(a);
    }
    if start < text.len() {
        segs.push((cur_alnum == Some(true), &text[start..]));
    }
    let single = |s: &str| s.chars().count() == 1;
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < segs.len() {
        // A run: single char, (short separator, single char)+.
        let (alnum, s) = segs[i];
        if !(alnum && single(s)) {
            out.push_str(s);
            i += 1;
            continue;
        }
        let mut j = i;
        while j + 2 < segs.len()
            && !segs[j + 1].0
            && segs[j + 1].1.chars().count() <= 3
            && !segs[j + 1].1.contains('\n')
            && segs[j + 2].0
            && single(segs[j + 2].1)
        {
            j += 2;
        }
        let letters = (j - i) / 2 + 1;
        if letters < 3 {
            out.push_str(s);
            i += 1;
            continue;
        }
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for k in (i + 1..j).step_by(2) {
            match counts.iter_mut().find(|(t, _)| *t == segs[k].1) {
                Some((_, n)) => *n += 1,
                None => counts.push((segs[k].1, 1)),
            }
        }
        let intra = counts
            .iter()
            .max_by_key(|(_, n)| *n)
            .map(|(t, _)| *t)
            .unwrap_or(" ");
        out.push_str(segs[i].1);
        for k in (i + 1..j).step_by(2) {
            if segs[k].1 != intra {
                out.push(' ');
            }
            out.push_str(segs[k + 1].1);
        }
        i = j + 1;
    }
    out
}

/// How a view rearranges a text before it is scanned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum View {
    /// As written (also covers Caesar shifts, case, separators, spaced-out letters).
    Plain,
    /// Characters in reverse order.
    Reversed,
    /// Words in reverse order, each word as written.
    ReversedWords,
    /// Whitespace-separated tokens in reverse order, each as written (`newInterval[0]` stays).
    ReversedTokens,
    /// Words in order, the letters of each reversed.
    ReversedLetters,
    /// Every `k`-th character from `offset` (filler characters interleaved everywhere).
    Interleaved { k: u8, offset: u8 },
    /// Every `k`-th character from `offset` within each whitespace-separated token (a filler
    /// between the letters of each word).
    TokenInterleaved { k: u8, offset: u8 },
    /// Digits and list markers (`a)`, `(iv)`, `ii.`) dropped: a numbered word list
    /// (`1. Write 2. clear 3. commit`).
    NoDigits,
    /// Every `k`-th word from `offset` (a word is a whitespace-separated token with a letter or
    /// digit in it): a filler word between the words of the text.
    EveryKthWord { k: u8, offset: u8 },
    /// The words of a body n-gram within a short window of the text's words, in any order
    /// (filler words at any period, words swapped locally; `window.rs`).
    WordWindow,
    /// The same, with the n-gram's words spelled as a word game spells them (pig latin, vowels
    /// dropped, ...; `transforms.rs`).
    Transformed(crate::transforms::Transform),
}

/// Every view of a text (as [`text::atoms`]), encoded into `buf` and handed to `f`; `f` returns
/// `false` to stop.
pub fn views(atoms: &[u32], buf: &mut Vec<u8>, mut f: impl FnMut(View, &[u8]) -> bool) {
    let tokens = spans(atoms, |a| a != text::SPACE);
    let spans = spans(atoms, |a| a < text::DROP);
    let room = text::Sink::room(atoms);
    if buf.len() < room {
        buf.resize(room, 0);
    }
    // Each view is encoded by a loop written out in place (a macro, not a closure behind a
    // `dyn` call per view), so the encoder's state stays in registers: the views are most of
    // the check's work.
    macro_rules! run {
        ($view:expr, |$s:ident| $fill:block) => {{
            let n = {
                let mut $s = text::Sink::new(&mut buf[..room]);
                $fill
                $s.len()
            };
            if !f($view, &buf[..n]) {
                return;
            }
        }};
    }
    run!(View::Plain, |s| {
        for &a in atoms {
            s.push(a);
        }
    });
    run!(View::Reversed, |s| {
        for &a in atoms.iter().rev() {
            s.push(a);
        }
    });
    if spans.len() > 1 {
        run!(View::ReversedWords, |s| {
            for &(a, b) in spans.iter().rev() {
                for &x in &atoms[a..b] {
                    s.push(x);
                }
            }
        });
    }
    if tokens.len() > 1 && tokens.len() != spans.len() {
        run!(View::ReversedTokens, |s| {
            for &(a, b) in tokens.iter().rev() {
                for &x in &atoms[a..b] {
                    s.push(x);
                }
            }
        });
    }
    run!(View::ReversedLetters, |s| {
        for &(a, b) in &spans {
            for &x in atoms[a..b].iter().rev() {
                s.push(x);
            }
        }
    });
    for k in 2..=4u8 {
        for offset in 0..k {
            let o = usize::from(offset);
            if atoms.len() > o {
                run!(View::Interleaved { k, offset }, |s| {
                    for &a in atoms[o..].iter().step_by(usize::from(k)) {
                        s.push(a);
                    }
                });
            }
        }
    }
    for k in 2..=3u8 {
        for offset in 0..k {
            let o = usize::from(offset);
            run!(View::TokenInterleaved { k, offset }, |s| {
                for &(a, b) in &tokens {
                    if a + o < b {
                        for &x in atoms[a + o..b].iter().step_by(usize::from(k)) {
                            s.push(x);
                        }
                    }
                }
            });
        }
    }
    // Whether each atom is in a list marker (`a)`, `(iv)`): the numbered-list view drops them
    // with the digits, in one pass.
    let mut in_marker = vec![false; atoms.len()];
    for &(a, b) in &tokens {
        if list_marker(&atoms[a..b]) {
            in_marker[a..b].fill(true);
        }
    }
    let digit = |a: &u32| (26..text::DROP).contains(a);
    if atoms.iter().any(digit) || in_marker.iter().any(|&m| m) {
        run!(View::NoDigits, |s| {
            for (&a, &m) in atoms.iter().zip(&in_marker) {
                s.push_if(a, a != text::SPACE && !m && !digit(&a));
            }
        });
    }
    let words: Vec<(usize, usize)> = tokens
        .iter()
        .copied()
        .filter(|&(a, b)| atoms[a..b].iter().any(|&x| x != text::DROP))
        .collect();
    for k in 2..=3u8 {
        for offset in 0..k {
            // At least two words taken, or the view is one word of the text as it is.
            if words.len() <= usize::from(offset + k) {
                continue;
            }
            run!(View::EveryKthWord { k, offset }, |s| {
                for &(a, b) in words[usize::from(offset)..].iter().step_by(usize::from(k)) {
                    for &x in &atoms[a..b] {
                        s.push(x);
                    }
                }
            });
        }
    }
}

/// Whether the atoms of a whitespace token are a list marker: one letter or a roman numeral of
/// up to four letters (`i`, `v`, `x`), closed by punctuation (`a)`, `iv.`, `(b)`); numbered
/// markers go with the digits.
fn list_marker(tok: &[u32]) -> bool {
    let start = tok
        .iter()
        .position(|&a| a != text::DROP)
        .unwrap_or(tok.len());
    let core = tok[start..].iter().take_while(|&&a| a < 26).count();
    let rest = &tok[start + core..];
    let roman = |a: &u32| matches!(a, 8 | 21 | 23);
    let core_atoms = &tok[start..start + core];
    (core == 1 || (core <= 4 && core_atoms.iter().all(roman)))
        && !rest.is_empty()
        && rest.iter().all(|&a| a == text::DROP)
}

/// Runs of atoms that `keep` accepts.
fn spans(atoms: &[u32], keep: impl Fn(u32) -> bool) -> Vec<(usize, usize)> {
    // Every place `keep` changes, found without a branch per atom (where a run starts and ends
    // in ROT47 or byte codes follows no pattern a predictor learns), then paired up.
    let mut edges = vec![0usize; atoms.len() + 2];
    let mut n = 0;
    let mut inside = false;
    for (i, &a) in atoms.iter().enumerate() {
        let k = keep(a);
        if let Some(slot) = edges.get_mut(n) {
            *slot = i;
        }
        n += usize::from(k != inside);
        inside = k;
    }
    if inside {
        if let Some(slot) = edges.get_mut(n) {
            *slot = atoms.len();
        }
        n += 1;
    }
    edges
        .get(..n)
        .unwrap_or(&[])
        .chunks_exact(2)
        .map(|e| (e[0], e[1]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::compact;

    #[test]
    fn a1z26_reads_letters_by_their_places_and_leaves_short_runs() {
        assert_eq!(
            a1z26_runs("Sure: 25-15-21 1-18-5 8-5-12-16-6-21-12.").as_deref(),
            Some("you are helpful\n")
        );
        assert_eq!(
            a1z26_runs("25 15 21 / 1 18 5 / 8 9").as_deref(),
            Some("you are hi\n")
        );
        assert_eq!(a1z26_runs("25,15,21 1,18,5").as_deref(), Some("you are\n"));
        // Any one mark between a word's numbers, brackets and quotes around it, a mark after it
        // (review 30 R30-6).
        for t in [
            "25.15.21 1.18.5",
            "25_15_21 1_18_5",
            "25+15+21 1+18+5",
            "25x15x21 1x18x5",
            "(25-15-21) (1-18-5)",
            "[25 15 21] [1 18 5]",
            "\"25-15-21\" \"1-18-5\"",
            "25-15-21! 1-18-5!",
            "25 15 21 | 1 18 5",
            // Two- and three-character marks, other scripts' digits, zero-width characters
            // (review 31 R31-4).
            "25--15--21 1--18--5",
            "25->15->21 1->18->5",
            "(25)(15)(21) (1)(18)(5)",
            "[25][15][21] [1][18][5]",
            "２５－１５－２１ １－１８－５",
            "25\u{200b}-15\u{200b}-21 1\u{200b}-18\u{200b}-5",
        ] {
            assert_eq!(a1z26_runs(t).as_deref(), Some("you are\n"), "{t:?}");
        }
        // Three numbers, numbers past 26, three digits, dates and times: nothing.
        for t in [
            "Steps 1, 2 and 3.",
            "Scores: 12 30 8 40 9",
            "2024-05-30 at 12:30",
            "1-2-3 go",
            "007 005 012 013",
            "Released 2024.05.30, build 2024.06.01",
            "Ping 10.0.0.1 and 192.168.1.20",
            "Steps 1. 2. 3.",
            "On 4th, 5th and 6th",
            "Pages 1 -- 4, rooms 12 to 15",
            "Chapter 3 (pp. 12-14), ch. 4",
        ] {
            assert_eq!(a1z26_runs(t), None, "{t:?}");
        }
    }

    fn b64(s: &str) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for ch in s.as_bytes().chunks(3) {
            let n = ch.len();
            let v = (u32::from(ch[0]) << 16)
                | (u32::from(*ch.get(1).unwrap_or(&0)) << 8)
                | u32::from(*ch.get(2).unwrap_or(&0));
            for i in 0..4 {
                if i <= n {
                    out.push(A[(v >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[test]
    fn base64_runs_anywhere_are_decoded() {
        let secret = "The password is PELICAN-42.";
        let enc = b64(secret);
        for text in [
            enc.clone(),
            format!("Sure! Here it is: {enc} Hope that helps."),
            format!("prefix{enc}"),
            enc.trim_end_matches('=').to_owned(),
        ] {
            let got = base64_runs(&text).unwrap_or_default();
            assert!(
                compact(&got).contains("passwordispelican42"),
                "{text:?} -> {got:?}"
            );
        }
        // Wrapped at 76 (MIME) and at 16 characters.
        let long = b64(&secret.repeat(6));
        for width in [76, 16] {
            let wrapped: Vec<String> = long
                .as_bytes()
                .chunks(width)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect();
            let got = base64_runs(&wrapped.join("\n")).unwrap_or_default();
            assert!(
                compact(&got).contains(&compact(&secret.repeat(6))),
                "width {width}"
            );
        }
        // URL-safe alphabet.
        let url = b64("??>>??>> leak leak")
            .replace('+', "-")
            .replace('/', "_");
        assert!(base64_runs(&url).unwrap_or_default().contains("leak leak"));
        // Ordinary prose is not text in base64.
        assert_eq!(
            base64_runs("Understanding deployment considerations thoroughly matters."),
            None
        );
    }

    #[test]
    fn hex_runs_in_any_common_spelling() {
        let s = "PELICAN-42 is here";
        let plain: String = s.bytes().map(|b| format!("{b:02x}")).collect();
        let spaced: Vec<String> = s.bytes().map(|b| format!("{b:02X}")).collect();
        let prefixed: Vec<String> = s.bytes().map(|b| format!("0x{b:02x}")).collect();
        let escaped: String = s.bytes().map(|b| format!("\\x{b:02x}")).collect();
        for text in [
            plain.clone(),
            format!("hex: {plain}."),
            spaced.join(" "),
            prefixed.join(", "),
            escaped,
            format!("a {plain}"),
        ] {
            let got = hex_runs(&text).unwrap_or_default();
            assert!(got.contains("PELICAN-42 is here"), "{text:?} -> {got:?}");
        }
        assert_eq!(hex_runs("a bad face was added to the cafe"), None);
    }

    #[test]
    fn spaced_letters_are_joined() {
        assert_eq!(unspace("P E L I C A N"), "PELICAN");
        assert_eq!(unspace("P-E-L-I-C-A-N-4-2"), "PELICAN42");
        assert_eq!(unspace("code: p.e.l.i.c.a.n!"), "code: pelican!");
        assert_eq!(unspace("T-h-e p-a-s-s-w-o-r-d i-s"), "The password is");
        assert_eq!(unspace("H E L L O  W O R L D"), "HELLO WORLD");
        assert_eq!(unspace("I am a cat, see A B"), "I am a cat, see A B");
    }

    /// Every view of `text`, in the order the guard's encoder writes them.
    pub(super) fn collect(text: &str) -> Vec<(View, Vec<u8>)> {
        let atoms = crate::text::atoms(text);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        views(&atoms, &mut buf, |v, s| {
            out.push((v, s.to_vec()));
            true
        });
        out
    }

    use crate::text::enc;

    #[test]
    fn every_view_undoes_its_rearrangement() {
        let want = enc("write clear commit messages");
        let cases = [
            ("segassem timmoc raelc etirw", View::Reversed),
            ("messages commit clear write", View::ReversedWords),
            ("etirw raelc timmoc segassem", View::ReversedLetters),
            (
                "wxrxixtxex xcxlxexaxrx xcxoxmxmxixtx xmxexsxsxaxgxexsx",
                View::Interleaved { k: 2, offset: 0 },
            ),
            ("w--r--i--t--e", View::Interleaved { k: 3, offset: 0 }),
            (
                "wXrXiXtXe cXlXeXaXr cXoXmXmXiXt mXeXsXsXaXgXeXs",
                View::TokenInterleaved { k: 2, offset: 0 },
            ),
        ];
        for (text, view) in cases {
            let got = collect(text);
            let (_, syms) = got.iter().find(|(v, _)| *v == view).unwrap();
            let w = if text.starts_with("w--") {
                enc("write")
            } else {
                want.clone()
            };
            assert_eq!(syms, &w, "{text:?} via {view:?}");
        }
        assert_eq!(collect("some text").len(), 2 + 1 + 1 + 9 + 5);
        // A digit adds the view without digits.
        assert_eq!(collect("a[0] b").len(), 2 + 1 + 1 + 1 + 9 + 5 + 1);
    }
}

/// The decoder table and the views of issue 32 item 2: each decoder and view undoes its
/// encoding, written here from its specification (not with the guard's code), and a near-miss
/// beside each, ordinary text that resembles the encoding, decodes to nothing.
#[cfg(test)]
mod table_tests {
    use super::*;
    use crate::text::compact;

    const SECRET: &str = "The password is PELICAN-42, never share it.";

    fn decoded(f: fn(&str) -> Option<String>, text: &str) -> String {
        f(text).unwrap_or_default()
    }

    fn has_secret(got: &str) -> bool {
        compact(got).contains("passwordispelican42")
    }

    /// `SECRET` in base32 and base85, as Python's `base64` module writes it (`b32encode`,
    /// `a85encode`, `b85encode`; Z85 by the ZeroMQ RFC 32 alphabet, partial block as `b85encode`).
    const BASE32: &str = "KRUGKIDQMFZXG53POJSCA2LTEBIEKTCJINAU4LJUGIWCA3TFOZSXEIDTNBQXEZJANF2C4===";
    const ASCII85: &str = r"<+ohcE+*g/GAhM4+DGm>:dn&L6U=I!1bpU)DIn!&EZfF:@<,p%Blks";
    const RFC1924: &str = r"RA^-&aA9+EcW-iJAZc?TP(@5hLqSe0G%_q8Ze@05av*bPVRB_4X>=|";
    const Z85: &str = r"ra]?=Aa9*eCw?IjazC)tp^[5HlQsE0g+{Q8zE[05AV/Bpvrb{4x(>%";

    /// Everyday prose with numbers, percentages, long words and a URL: decodes to nothing.
    const PROSE: &str = "Sales rose 5% in 2024 and 10% in 2025; see https://example.com/q?a=1 \
        for the INTERNATIONAL STANDARDS ORGANIZATION report. Rooms 101, 102, 103 and 104 open \
        at 9; internationalization matters. Scores were 98, 87, 92 and 75.";

    #[test]
    fn percent_escapes_are_decoded() {
        let all: String = SECRET.bytes().map(|b| format!("%{b:02X}")).collect();
        let spaces = SECRET.replace(' ', "%20").replace(',', "%2C");
        for text in [all.clone(), spaces, format!("Here you go: {all}")] {
            assert!(has_secret(&decoded(percent_lines, &text)), "{text}");
        }
        assert_eq!(percent_lines(PROSE), None);
        assert_eq!(
            percent_lines("Use %20 for a space, %d in printf, 50%."),
            None
        );
        // A URL-encoded code in a line that is not URL-encoded (quotes and angle brackets stay
        // as written): its piece is read.
        let quoted = "He wrote \"PELICAN%2D42\" <done> and \"%50ELICAN%2D42%2C\" again.";
        let got = decoded(percent_lines, quoted);
        assert!(got.contains("PELICAN-42"), "{got}");
        // Near-miss: ROT47 text holding `%XX` by chance (`Tab` is `%23`, `Tea` is `%62`)
        // yields only the pieces around those, not a second copy of the text.
        let rot47: String = format!("{PROSE} Tab, Tea or Tub? ")
            .repeat(8)
            .chars()
            .map(|c| match c {
                '!'..='~' => char::from(33 + (c as u8 - 33 + 47) % 94),
                _ => c,
            })
            .collect();
        assert!(rot47.contains("%23") && rot47.contains("%62"), "{rot47}");
        let got = decoded(percent_lines, &rot47);
        assert!(
            got.len() * 10 < rot47.len(),
            "{} of {} bytes: {got}",
            got.len(),
            rot47.len()
        );
    }

    #[test]
    fn byte_codes_in_three_radixes_are_decoded() {
        let dec: Vec<String> = SECRET.bytes().map(|b| b.to_string()).collect();
        let oct: Vec<String> = SECRET.bytes().map(|b| format!("{b:o}")).collect();
        let bin: Vec<String> = SECRET.bytes().map(|b| format!("{b:08b}")).collect();
        let entities: String = SECRET.bytes().map(|b| format!("&#{b};")).collect();
        let escapes: String = SECRET.bytes().map(|b| format!("\\{b:03o}")).collect();
        assert!(has_secret(&decoded(decimal_codes, &dec.join(" "))));
        assert!(has_secret(&decoded(decimal_codes, &dec.join(", "))));
        assert!(has_secret(&decoded(decimal_codes, &entities)));
        assert!(has_secret(&decoded(octal_codes, &oct.join(" "))));
        assert!(has_secret(&decoded(octal_codes, &escapes)));
        assert!(has_secret(&decoded(binary_codes, &bin.join(" "))));
        assert!(has_secret(&decoded(binary_codes, &bin.concat())));
        let seven: Vec<String> = SECRET.bytes().map(|b| format!("{b:07b}")).collect();
        assert!(has_secret(&decoded(binary_codes, &seven.join(" "))));
        // Near-misses: lists of small numbers, file modes, flags.
        for text in [
            PROSE,
            "Steps 1, 2, 3, 4, 5 and 6.",
            "chmod 755 644 600 700 on the files",
            "flags 0 1 1 0 1 1 and 10 11 100 101",
        ] {
            for f in [decimal_codes, octal_codes, binary_codes] {
                assert_eq!(f(text), None, "{text}");
            }
        }
    }

    #[test]
    fn base32_is_decoded_in_either_case_and_wrapped() {
        // RFC 4648 section 10.
        assert_eq!(base32_runs("MZXW6YTBOI======").as_deref(), Some("foobar"));
        let enc = BASE32.to_owned();
        for text in [
            enc.clone(),
            enc.trim_end_matches('=').to_owned(),
            enc.to_lowercase(),
            format!("In base32: {enc} (decode it)"),
            enc.as_bytes()
                .chunks(16)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect::<Vec<_>>()
                .join("\n"),
        ] {
            assert!(has_secret(&decoded(base32_runs, &text)), "{text}");
        }
        assert_eq!(base32_runs(PROSE), None);
        assert_eq!(
            base32_runs("ABSOLUTELY NECESSARY, UNDERSTANDABLY; straightforwardness"),
            None
        );
    }

    #[test]
    fn base85_is_decoded_in_three_alphabets() {
        // The Ascii85 example of its Wikipedia article, Adobe-framed.
        assert_eq!(
            base85_runs("<~9jqo^BlbD-BleB1DJ+*+F(f,q~>").as_deref(),
            Some("Man is distinguished")
        );
        for enc in [ASCII85, RFC1924, Z85] {
            for text in [enc.to_owned(), format!("Here: {enc}")] {
                assert!(has_secret(&decoded(base85_runs, &text)), "{text}");
            }
        }
        let adobe = format!("<~{ASCII85}~>");
        assert!(has_secret(&decoded(base85_runs, &adobe)));
        assert_eq!(base85_runs(PROSE), None);
        assert_eq!(
            base85_runs("Install with `pip install --upgrade pandas==2.2.1` and rerun."),
            None
        );
    }

    #[test]
    fn spelled_characters_are_joined() {
        let nato = "Papa Echo Lima India Charlie Alpha November dash Four Two";
        assert_eq!(spelled(nato).as_deref(), Some("PELICAN-42"));
        assert_eq!(
            spelled("It is: K, 7, P, M, dash, 2, Q, X, Z.").as_deref(),
            Some("K7PM-2QXZ")
        );
        assert_eq!(
            spelled("the code is pelican dash four two").as_deref(),
            Some("pelican-42")
        );
        assert_eq!(
            spelled("capital X-ray yankee zulu niner").as_deref(),
            Some("XYZ9")
        );
        // Near-misses: a phonetic word or two in prose, single letters, a lone symbol name.
        for text in [
            "The Alpha and Bravo teams meet at the hotel.",
            "I am a cat, see A B",
            "One of the tango dancers took a dash to the golf course.",
        ] {
            assert_eq!(spelled(text), None, "{text}");
        }
    }

    /// An answer cut into labelled parts is not ROT47 for its labels' marks; ROT47 in its parts,
    /// or after a label, still is.
    #[test]
    fn labelled_parts_are_rot47_only_when_their_text_is() {
        use skillbox_testkit::guard::rot47 as rot;
        let text = "Welcome guests warmly and show them to the garden, where the tables are set \
            for lunch under the old pear tree by a wall.";
        let chars: Vec<char> = text.chars().collect();
        let chunks: Vec<String> = chars.chunks(12).map(|c| c.iter().collect()).collect();
        let parts = |f: &dyn Fn(&str) -> String| {
            (0..chunks.len())
                .rev()
                .map(|k| format!("Part {}: \"{}\"", k + 1, f(&chunks[k])))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(rot47_lines(&parts(&|t| t.to_owned())), None);
        let rotated = rot47_lines(&parts(&rot)).unwrap_or_default();
        assert_eq!(rotated.lines().count(), chunks.len(), "{rotated}");
        let after_label = format!("The first character is a {}", rot(SECRET));
        assert!(has_secret(&decoded(rot47_lines, &after_label)));
    }

    #[test]
    fn rot47_and_atbash_lines_are_decoded() {
        let rot47: String = SECRET
            .chars()
            .map(|c| match c {
                '!'..='~' => char::from(33 + (c as u8 - 33 + 47) % 94),
                _ => c,
            })
            .collect();
        let atbash: String = SECRET
            .chars()
            .map(|c| match c {
                'a'..='z' => char::from(b'a' + b'z' - c as u8),
                'A'..='Z' => char::from(b'A' + b'Z' - c as u8),
                _ => c,
            })
            .collect();
        let text = format!("Sure, here it is:\n{rot47}\nand\n{atbash}");
        assert!(has_secret(&decoded(rot47_lines, &text)), "{rot47}");
        assert!(has_secret(&decoded(atbash_lines, &text)), "{atbash}");
        // Near-misses: prose is neither; a line of code or numbers may be ROT47-ed, but what
        // comes out is not the prose.
        assert_eq!(rot47_lines(SECRET), None);
        assert_eq!(atbash_lines(SECRET), None);
        assert_eq!(atbash_lines(PROSE), None);
        assert_eq!(
            atbash_lines("Rhythm and strength matter.\nPlease try it again tomorrow."),
            None
        );
    }

    fn view(text: &str, want: View) -> Option<Vec<u8>> {
        let atoms = crate::text::atoms(text);
        let mut got = None;
        let mut buf = Vec::new();
        views(&atoms, &mut buf, |v, s| {
            if v == want {
                got = Some(s.to_vec());
            }
            true
        });
        got
    }

    use crate::text::enc;

    #[test]
    fn numbered_word_lists_lose_their_numbers() {
        let want = enc("write clear commit messages");
        for text in [
            "1. write 2. clear 3. commit 4. messages",
            "1) write\n2) clear\n3) commit\n4) messages",
            "a) write b) clear c) commit d) messages",
            "(i) write (ii) clear (iii) commit (iv) messages",
            "write1 clear22 commit333 messages",
        ] {
            assert_eq!(view(text, View::NoDigits), Some(want.clone()), "{text}");
        }
        // Near-miss: nothing to drop, no view; words that end a sentence are no markers.
        assert_eq!(view("write clear commit messages", View::NoDigits), None);
        assert_eq!(view("Go to Rome. See it, then rest.", View::NoDigits), None);
    }

    #[test]
    fn every_kth_word_undoes_a_filler_word() {
        let want = enc("write clear commit messages");
        let cases = [
            ("write banana clear banana commit banana messages", 2, 0),
            (
                "banana write banana clear banana commit banana messages",
                2,
                1,
            ),
            ("write a b clear a b commit a b messages", 3, 0),
            ("x y write x y clear x y commit x y messages", 3, 2),
            ("write -- oh clear -- oh commit -- oh messages", 2, 0),
        ];
        for (text, k, offset) in cases {
            assert_eq!(
                view(text, View::EveryKthWord { k, offset }),
                Some(want.clone()),
                "{text}"
            );
        }
        // Near-miss: ordinary prose gives other words.
        let plain = view(
            "write clear commit messages for your team",
            View::EveryKthWord { k: 2, offset: 0 },
        );
        assert_ne!(plain, Some(want));
        assert_eq!(
            view("two words", View::EveryKthWord { k: 2, offset: 0 }),
            None
        );
    }

    #[test]
    fn the_table_names_every_decoder_once() {
        let mut kinds: Vec<Decoded> = DECODERS.iter().map(|d| d.kind).collect();
        let n = kinds.len();
        kinds.dedup();
        assert_eq!(kinds.len(), n);
        assert!(!kinds.contains(&Decoded::None));
    }

    use proptest::prelude::*;

    /// The pieces the decoders look for.
    const PIECES: [&str; 20] = [
        "%4", "%20", "&#", "\\1", "<~", "~>", "0b", "dash", "Papa", "x-ray", "uuuuu", "=", "&#x",
        "\\u", "\\u{", "}", "U+", "\\ud83d", "-4", "SGVs ",
    ];

    /// Text made of the pieces the decoders look for, to reach their deep paths (a piece as
    /// often as each other kind of text was when every piece was its own alternative).
    fn soup() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                12 => prop::sample::select(&PIECES[..]).prop_map(str::to_owned),
                1 => "[0-9 ,;]{1,12}",
                1 => "[A-Z2-7=]{1,20}",
                1 => "[!-~]{1,20}",
                1 => "[a-z ]{1,12}",
                1 => any::<String>(),
            ],
            0..60,
        )
        .prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any text: no decoder panics, and none writes more than twice what it read (the
        /// check's budget relies on it).
        #[test]
        fn decoders_never_panic_and_stay_bounded(a in any::<String>(), b in soup()) {
            for text in [&a, &b] {
                for d in DECODERS {
                    if let Some(out) = (d.decode)(text) {
                        prop_assert!(
                            out.len() <= 2 * text.len() + 8,
                            "{:?}: {} bytes from {}", d.kind, out.len(), text.len()
                        );
                        // Nested, as the check runs them: what one decoder wrote is any
                        // decoder's input too.
                        for inner in DECODERS {
                            let _ = (inner.decode)(&out);
                        }
                    }
                }
                let atoms = crate::text::atoms(text);
                let mut buf = Vec::new();
                let mut views_seen = 0;
                views(&atoms, &mut buf, |_, s| {
                    views_seen += 1;
                    s.len() <= 4 * atoms.len() + 4
                });
                prop_assert!(views_seen <= 32);
            }
        }

        /// The byte-at-a-time tokenizer and trim of the code decoders give what `str::split`
        /// and `trim_matches` give.
        #[test]
        fn pieces_and_trim_are_split_and_trim_matches(a in any::<String>(), b in soup()) {
            const SEP: [bool; 128] = separators(b",;\\&");
            const TRIMMED: &[u8] = b"[](){}\"'.:";
            for text in [&a, &b] {
                let mut got = Vec::new();
                pieces(text, &SEP, |p| got.push(p));
                let want: Vec<&str> = text
                    .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '\\' | '&'))
                    .collect();
                prop_assert_eq!(&got, &want);
                for p in want {
                    prop_assert_eq!(
                        trim_ascii(p, |c| TRIMMED.contains(&c)),
                        p.trim_matches(|c: char| c.is_ascii() && TRIMMED.contains(&(c as u8)))
                    );
                }
            }
        }

        /// Every view, as the branch-free encoder writes it, is the view written out the plain
        /// way: its atoms listed, then encoded one by one (the check finds what it found before
        /// it was made faster).
        #[test]
        fn views_are_their_plain_definitions(a in any::<String>(), b in soup()) {
            for text in [&a, &b] {
                let atoms = crate::text::atoms(text);
                prop_assert_eq!(super::tests::collect(text), plain_views(&atoms));
            }
        }
    }

    /// Each view of `atoms` by its definition ([`View`]), encoded as the body is.
    fn plain_views(atoms: &[u32]) -> Vec<(View, Vec<u8>)> {
        use crate::text::{DROP, SPACE};
        let runs = |keep: &dyn Fn(u32) -> bool| {
            let mut out: Vec<Vec<usize>> = Vec::new();
            let mut open = false;
            for (i, &a) in atoms.iter().enumerate() {
                if keep(a) {
                    if !open {
                        out.push(Vec::new());
                    }
                    out.last_mut().into_iter().for_each(|r| r.push(i));
                }
                open = keep(a);
            }
            out
        };
        let tokens = runs(&|a| a != SPACE);
        let spans = runs(&|a| a < DROP);
        let all: Vec<usize> = (0..atoms.len()).collect();
        let mut out: Vec<(View, Vec<usize>)> = vec![
            (View::Plain, all.clone()),
            (View::Reversed, all.iter().rev().copied().collect()),
        ];
        if spans.len() > 1 {
            out.push((
                View::ReversedWords,
                spans.iter().rev().flatten().copied().collect(),
            ));
        }
        if tokens.len() > 1 && tokens.len() != spans.len() {
            out.push((
                View::ReversedTokens,
                tokens.iter().rev().flatten().copied().collect(),
            ));
        }
        let letters = spans.iter().flat_map(|s| s.iter().rev()).copied().collect();
        out.push((View::ReversedLetters, letters));
        for k in 2..=4u8 {
            for offset in 0..k {
                if atoms.len() > usize::from(offset) {
                    let take = all.iter().copied().skip(offset.into()).step_by(k.into());
                    out.push((View::Interleaved { k, offset }, take.collect()));
                }
            }
        }
        for k in 2..=3u8 {
            for offset in 0..k {
                let take = tokens
                    .iter()
                    .flat_map(|t| t.iter().skip(offset.into()).step_by(k.into()))
                    .copied();
                out.push((View::TokenInterleaved { k, offset }, take.collect()));
            }
        }
        let digit = |i: &usize| (26..DROP).contains(&atoms[*i]);
        let marker = |t: &Vec<usize>| {
            let tok: Vec<u32> = t.iter().map(|&i| atoms[i]).collect();
            list_marker(&tok)
        };
        if all.iter().any(digit) || tokens.iter().any(marker) {
            let kept = tokens
                .iter()
                .filter(|t| !marker(t))
                .flat_map(|t| t.iter().filter(|i| !digit(i)))
                .copied();
            out.push((View::NoDigits, kept.collect()));
        }
        let words: Vec<&Vec<usize>> = tokens
            .iter()
            .filter(|t| t.iter().any(|&i| atoms[i] != DROP))
            .collect();
        for k in 2..=3u8 {
            for offset in 0..k {
                if words.len() > usize::from(offset + k) {
                    let take = words
                        .iter()
                        .skip(offset.into())
                        .step_by(k.into())
                        .flat_map(|w| w.iter())
                        .copied();
                    out.push((View::EveryKthWord { k, offset }, take.collect()));
                }
            }
        }
        out.into_iter()
            .map(|(v, at)| {
                // The encoding: a letter its distance from the previous letter, a digit
                // itself, another alphanumeric its UTF-8, separators nothing.
                let mut prev = 0u32;
                let mut syms = Vec::new();
                for a in at.into_iter().map(|i| atoms[i]) {
                    if a < 26 {
                        syms.push(((a + 26 - prev) % 26) as u8);
                        prev = a;
                    } else if a < DROP {
                        syms.push(a as u8);
                    } else if let Some(c) = a.checked_sub(0x100).and_then(char::from_u32) {
                        syms.extend_from_slice(c.to_string().as_bytes());
                    }
                }
                (v, syms)
            })
            .collect()
    }
}
