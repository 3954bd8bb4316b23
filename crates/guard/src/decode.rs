//! Decoders for what an answer may hide the body in, and the views the check scans.
//!
//! Decoders that change the bytes (base64, hex) produce new texts; rearrangements (reversal,
//! every k-th character) are views of a text streamed straight into the shift-invariant encoder
//! (Caesar shifts and separators need no view: the encoding folds them away).

use crate::text;

/// Text decoded from base64 runs anywhere in `text`, or `None` if none decodes to text.
///
/// A run is a maximal sequence of the standard or URL-safe alphabet (optionally `=`-padded) of at
/// least eight characters; runs split by whitespace (wrapped lines) are also tried joined, and
/// each at the four alignments (a run glued to a preceding word is then still read).
pub fn base64_runs(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !is_b64(b[i]) {
            i += 1;
            continue;
        }
        let s = i;
        while i < b.len() && is_b64(b[i]) {
            i += 1;
        }
        let mut e = i;
        while e < b.len() && b[e] == b'=' && e - i < 2 {
            e += 1;
        }
        if e - s >= 8 {
            runs.push((s, e));
        }
        i = e.max(s + 1);
    }
    let mut out = String::new();
    let mut k = 0;
    while k < runs.len() {
        // A chain of runs separated only by whitespace, each but the last a whole number of
        // quads without padding: the line-wrapped form of one base64 text.
        let mut end = k;
        while end + 1 < runs.len() {
            let (s, e) = runs[end];
            let gap = &b[e..runs[end + 1].0];
            let whole = (e - s) % 4 == 0 && b[e - 1] != b'=';
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
            push_text(&mut out, &b64_decode(&joined));
        }
        for &(s, e) in &runs[k..=end] {
            for skip in 0..4 {
                if e - s < skip + 8 {
                    break;
                }
                if push_text(&mut out, &b64_decode(&b[s + skip..e])) {
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
    for tok in text.split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | ':')) {
        let tok = tok.trim_matches(|c: char| c.is_ascii_punctuation() && c != '\\');
        if tok.is_empty() {
            continue;
        }
        // Most prose tokens have a letter past `f`: no allocation for them.
        if !tok
            .bytes()
            .all(|c| c.is_ascii_hexdigit() || matches!(c, b'x' | b'X' | b'\\'))
        {
            flush(&mut run, &mut out);
            continue;
        }
        let t = tok.replace("\\x", "").replace("0x", "").replace("0X", "");
        if !t.is_empty() && t.bytes().all(|c| c.is_ascii_hexdigit()) {
            run.push_str(&t);
        } else {
            flush(&mut run, &mut out);
        }
    }
    flush(&mut run, &mut out);
    (!out.is_empty()).then_some(out)
}

fn hex_decode(s: &[u8]) -> Vec<u8> {
    let v = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
    s.chunks_exact(2)
        .map(|p| (v(p[0]) << 4) | v(p[1]))
        .collect()
}

/// Append decoded bytes if they read as text; says whether it did. Text is valid UTF-8 without
/// control characters, or at least 80 % printable ASCII (a slightly broken encoding): random
/// bytes, which is what ordinary words decode to, are neither.
fn push_text(out: &mut String, bytes: &[u8]) -> bool {
    if bytes.len() < 3 {
        return false;
    }
    let printable = |b: &u8| b.is_ascii_graphic() || b.is_ascii_whitespace();
    let s = match std::str::from_utf8(bytes) {
        Ok(s) if s.chars().all(|c| !c.is_control() || c.is_whitespace()) => s.to_owned(),
        _ if bytes.iter().filter(|b| printable(b)).count() * 5 >= bytes.len() * 4 => {
            String::from_utf8_lossy(bytes).into_owned()
        }
        _ => return false,
    };
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&s);
    true
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
}

/// Every view of a text (as [`text::atoms`]), encoded into `buf` and handed to `f`; `f` returns
/// `false` to stop.
pub fn views(atoms: &[u32], buf: &mut Vec<u8>, mut f: impl FnMut(View, &[u8]) -> bool) {
    let tokens = spans(atoms, |a| a != text::SPACE);
    let spans = spans(atoms, |a| a < text::DROP);
    let mut run = |view: View, fill: &mut dyn FnMut(&mut text::Sink<'_>)| -> bool {
        let mut sink = text::Sink::new(buf, atoms.len());
        fill(&mut sink);
        f(view, buf)
    };
    if !run(View::Plain, &mut |s| atoms.iter().for_each(|&a| s.push(a))) {
        return;
    }
    if !run(View::Reversed, &mut |s| {
        atoms.iter().rev().for_each(|&a| s.push(a))
    }) {
        return;
    }
    if spans.len() > 1
        && !run(View::ReversedWords, &mut |s| {
            for &(a, b) in spans.iter().rev() {
                atoms[a..b].iter().for_each(|&x| s.push(x));
            }
        })
    {
        return;
    }
    if tokens.len() > 1
        && tokens.len() != spans.len()
        && !run(View::ReversedTokens, &mut |s| {
            for &(a, b) in tokens.iter().rev() {
                atoms[a..b].iter().for_each(|&x| s.push(x));
            }
        })
    {
        return;
    }
    if !run(View::ReversedLetters, &mut |s| {
        for &(a, b) in &spans {
            atoms[a..b].iter().rev().for_each(|&x| s.push(x));
        }
    }) {
        return;
    }
    for k in 2..=4u8 {
        for offset in 0..k {
            let o = usize::from(offset);
            if atoms.len() > o
                && !run(View::Interleaved { k, offset }, &mut |s| {
                    atoms[o..]
                        .iter()
                        .step_by(usize::from(k))
                        .for_each(|&a| s.push(a))
                })
            {
                return;
            }
        }
    }
    for k in 2..=3u8 {
        for offset in 0..k {
            let o = usize::from(offset);
            if !run(View::TokenInterleaved { k, offset }, &mut |s| {
                for &(a, b) in &tokens {
                    if a + o < b {
                        atoms[a + o..b]
                            .iter()
                            .step_by(usize::from(k))
                            .for_each(|&x| s.push(x));
                    }
                }
            }) {
                return;
            }
        }
    }
}

/// Runs of atoms that `keep` accepts.
fn spans(atoms: &[u32], keep: impl Fn(u32) -> bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, &a) in atoms.iter().enumerate() {
        match (keep(a), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, atoms.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::compact;

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

    fn collect(text: &str) -> Vec<(View, Vec<u8>)> {
        let atoms = crate::text::atoms(text);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        views(&atoms, &mut buf, |v, s| {
            out.push((v, s.to_vec()));
            true
        });
        out
    }

    fn enc(s: &str) -> Vec<u8> {
        let mut v = Vec::new();
        let mut e = crate::text::Encoder::new(&mut v);
        s.chars().for_each(|c| e.push(c));
        v
    }

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
        assert_eq!(collect("a[0] b").len(), 2 + 1 + 1 + 1 + 9 + 5);
    }
}
