//! The owner's key and model id are never in an answer the box releases.
//!
//! The model sees neither: the key travels in a header and the model id in the request's JSON,
//! so only a provider (or a proxy in front of it) that echoes the raw request — a debugging
//! endpoint, a 200 "error as content" quoting what it was sent — puts them in an answer, and
//! the output guard, which indexes the body only, let that through to the caller. Every answer
//! (guarded program or not, both rounds of `regenerate`) is looked at after it is capped.
//!
//! The key is looked for in the forms a machine echoing its input writes: as written; in any
//! case and with separators dropped (a header line, a JSON string with `\/`, a log that spaces
//! or quotes it); with JSON, C and URL escapes (`\u0073`, `\x73`, `%73`) undone; in hex; in
//! base64 at each of its three alignments (`Basic user:key`, a body echoed base64); reversed.
//! Also in the letter ciphers the guard decodes for the body — ROT13, Atbash, ROT47 — in case a
//! provider puts its request where the model reads it and a caller asks for it enciphered: one
//! needle pair each, no decoding of the answer. A truncated echo is caught while it still holds
//! two thirds of the key (or of its hex, base64 or cipher; ROT47's letters and digits are about
//! three in five of the key's, the rest punctuation the fold drops): the rest then stays
//! unknown. This is a few substring searches over one folded copy
//! of the answer, not the guard: the guard's slice machinery (every k-th character, Caesar
//! shifts, Atbash, NATO spelling, labelled parts, short slices of a canary) is there for a
//! model a caller instructs to spell a body out, and the model never sees the key. Short
//! slices are dropped on purpose, not for cost alone: the caller steers what the model writes
//! and sees the run fail, so a check that caught a 12-character slice would confirm a key's
//! public prefix (`sk-ant-api03-`) plus a guessed character at a time; two thirds of a key's
//! random part is beyond guessing.
//!
//! The model id is looked for only where an echo of the raw request puts it: as the value of a
//! JSON `"model"` key (`{"model":"gpt-4o-mini",…}`, in any case, with `\/` for `/`, and with
//! its quotes escaped when the echo is itself inside a JSON string). Anywhere in prose it was an
//! oracle (review 24b G1): a caller had the model repeat a list of guessed ids and the failed
//! run said whether the owner's was among them, one exact bit a call; and an honest answer that
//! named the model (a comparison of models, `GPT 4o mini` in prose) failed for nothing. The
//! providers put the id in the request's JSON only (`openai.rs`, `anthropic.rs`), so an echo
//! still holds that shape. A caller can still have the model write the shape itself with a
//! guessed id: the check stops a provider's echo, it does not keep the id from a caller who
//! guesses it (see ARCHITECTURE.md).
//!
//! An answer that carries either fails the run with `provider_failed` (`protocol`: the provider
//! answered with something other than an answer) rather than being withheld: the owner's
//! provider leaks its key, and a failure tells the owner so (a withheld answer reads as the
//! guard acting on the body), while the caller gets the same closed code any malformed answer
//! gives. Both rounds of `regenerate` already fail the run when either fails.
//!
//! The box (`skillbox_jc::run`) calls it for every answer; it lives with the guard because it is
//! a check of the answer channel, and its cost is measured in the guard's bench beside the check.

/// Keys with fewer letters and digits than this are looked for as written only: folded, a short
/// key would match across the words of an ordinary answer.
const FOLDED_KEY_MIN: usize = 8;

/// What of the owner's stake an answer must not carry.
pub struct OwnerSecrets<'a> {
    key: Option<&'a str>,
    /// Lower-case letters and digits that each of the key's forms starts and ends with (two
    /// thirds of the form each); empty when the key is looked for as written only.
    key_needles: Vec<String>,
    /// The model id lower-cased; empty when there is none.
    model_lower: String,
}

/// Whether `lower` (an answer, lower-cased) holds `model` (lower-cased, not empty) as the
/// value of a JSON `"model"` key: `"model"`, white space, `:`, white space, `"`, the id with
/// `\/` for `/`, `"` — each quote possibly escaped (`\"`, an echo inside a JSON string).
fn model_in_json(lower: &str, model: &str) -> bool {
    let b = lower.as_bytes();
    // Past the backslashes of an escaped quote, then the quote itself.
    let quote = |mut at: usize| -> Option<usize> {
        while b.get(at) == Some(&b'\\') {
            at += 1;
        }
        (b.get(at) == Some(&b'"')).then_some(at + 1)
    };
    let space = |mut at: usize| {
        while b.get(at).is_some_and(u8::is_ascii_whitespace) {
            at += 1;
        }
        at
    };
    lower.match_indices("model").any(|(at, key)| {
        let opened = at > 0 && b[at - 1] == b'"';
        let value = quote(at + key.len())
            .map(space)
            .filter(|&at| b.get(at) == Some(&b':'))
            .map(|at| space(at + 1))
            .and_then(quote);
        let (true, Some(mut at)) = (opened, value) else {
            return false;
        };
        // The id, each `/` possibly written `\/` (or `\\/` inside a JSON string).
        for m in model.bytes() {
            if m == b'/' {
                while b.get(at) == Some(&b'\\') {
                    at += 1;
                }
            }
            if b.get(at) != Some(&m) {
                return false;
            }
            at += 1;
        }
        quote(at).is_some()
    })
}

/// ASCII letters and digits of `text`, lower-cased, everything else dropped.
fn folded_ascii(text: &[u8]) -> String {
    text.iter()
        .filter(|b| b.is_ascii_alphanumeric())
        .map(|b| char::from(b.to_ascii_lowercase()))
        .collect()
}

fn hex_value(digits: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(text, 16).ok()
}

/// [`folded_ascii`] of `answer` with `\uXXXX`, `\xXX` and `%XX` escapes undone first (what a
/// JSON or C string, or a URL, makes of a key's characters).
fn folded_answer(answer: &str) -> String {
    let bytes = answer.as_bytes();
    let mut out = String::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(&b) = bytes.get(at) {
        let escape = match (b, bytes.get(at + 1)) {
            (b'\\', Some(b'u')) => Some((2, 4)),
            (b'\\', Some(b'x')) => Some((2, 2)),
            (b'%', _) => Some((1, 2)),
            _ => None,
        };
        let decoded = escape.and_then(|(lead, digits)| {
            let value = hex_value(bytes.get(at + lead..at + lead + digits)?)?;
            Some((value, lead + digits))
        });
        let (value, len) = decoded.unwrap_or((u32::from(b), 1));
        if let Ok(c) = u8::try_from(value)
            && c.is_ascii_alphanumeric()
        {
            out.push(char::from(c.to_ascii_lowercase()));
        }
        at += len;
    }
    out
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The base64 characters that only `key`'s bits decide when it starts `lead` bytes into the
/// encoded data (0, 1 or 2: every alignment it can have).
fn base64_at(key: &[u8], lead: usize) -> Vec<u8> {
    let data: Vec<u8> = std::iter::repeat_n(0, lead)
        .chain(key.iter().copied())
        .collect();
    let bits = |i: usize| -> u8 {
        let byte = data.get(i / 8).copied().unwrap_or(0);
        (byte >> (7 - i % 8)) & 1
    };
    let first = (8 * lead).div_ceil(6);
    let end = 8 * data.len() / 6;
    (first..end)
        .map(|c| {
            let v = (0..6).fold(0usize, |v, k| (v << 1) | usize::from(bits(6 * c + k)));
            BASE64[v]
        })
        .collect()
}

/// ROT13 of a folded character: a lower-case letter rotated by 13; a digit as it is.
fn rot13(c: char) -> char {
    match c {
        'a'..='z' => (b'a' + (c as u8 - b'a' + 13) % 26) as char,
        _ => c,
    }
}

/// The start and end (two thirds each) of every form of `key` a machine echoing it writes, and
/// of the letter ciphers a model would write it in if its provider put the request in its
/// context (an agent proxy, a debugging prompt) and the caller asked; folded, and empty for a
/// key too short to look for folded.
fn key_needles(key: &str) -> Vec<String> {
    let plain = folded_ascii(key.as_bytes());
    if plain.len() < FOLDED_KEY_MIN {
        return Vec::new();
    }
    let reversed: String = plain.chars().rev().collect();
    let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
    // The letter ciphers the guard decodes for the body, applied to the key: ROT13 and Atbash of
    // its folded letters (digits stay), ROT47 of it as written, then folded. ROT47 turns about
    // two in five characters into punctuation the fold drops, so its form may be too short to
    // look for: then it is not.
    let rot13: String = plain.chars().map(rot13).collect();
    let atbash: String = plain.chars().map(crate::decode::atbash).collect();
    // Folded as the answer is: ROT47 writes `%`, `\` and `x` too (of `T`, `-`, `I`), and an
    // answer's `%4e`, `\x41` would be read as escapes.
    let rot47 = folded_answer(&key.chars().map(crate::decode::rot47).collect::<String>());
    let mut forms = vec![plain, reversed, hex, rot13, atbash, rot47];
    forms.extend((0..3).map(|lead| folded_ascii(&base64_at(key.as_bytes(), lead))));
    forms.retain(|f| f.len() >= FOLDED_KEY_MIN);
    let mut needles = Vec::new();
    for form in forms {
        let len = (2 * form.len())
            .div_ceil(3)
            .max(FOLDED_KEY_MIN)
            .min(form.len());
        // Every form is ASCII, so these are character boundaries.
        needles.extend(form.get(..len).map(str::to_owned));
        needles.extend(form.get(form.len() - len..).map(str::to_owned));
    }
    needles.sort();
    needles.dedup();
    needles
}

impl<'a> OwnerSecrets<'a> {
    pub fn new(key: Option<&'a str>, model: &'a str) -> OwnerSecrets<'a> {
        let key = key.filter(|k| !k.is_empty());
        OwnerSecrets {
            key,
            key_needles: key.map(key_needles).unwrap_or_default(),
            model_lower: model.to_lowercase(),
        }
    }

    /// Whether `answer` carries the key or the model id.
    pub fn carried_by(&self, answer: &str) -> bool {
        if self.key.is_some_and(|k| answer.contains(k)) {
            return true;
        }
        if !self.key_needles.is_empty() {
            let folded = folded_answer(answer);
            if self.key_needles.iter().any(|n| folded.contains(n.as_str())) {
                return true;
            }
        }
        !self.model_lower.is_empty() && model_in_json(&answer.to_lowercase(), &self.model_lower)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillbox_testkit::guard::{atbash, base64, caesar, hex, percent, rot47};

    const KEY: &str = "sk-proj-Q7vT2mXw9LpR4nZk8sYd";

    #[test]
    fn the_key_and_the_model_are_found_as_written_and_encoded() {
        let s = OwnerSecrets::new(Some(KEY), "gpt-4o-mini");
        let spaced: String = KEY.chars().flat_map(|c| [c, ' ']).collect();
        let reversed: String = KEY.chars().rev().collect();
        let escaped: String = KEY
            .chars()
            .map(|c| format!("\\u{:04x}", u32::from(c)))
            .collect();
        let url_safe = base64(&format!("me:{KEY}"))
            .replace('+', "-")
            .replace('/', "_");
        for answer in [
            format!("Authorization: Bearer {KEY}"),
            format!("your key: {}", KEY.to_uppercase()),
            format!("here: {}", base64(KEY)),
            format!("Authorization: Basic {}", base64(&format!("user:{KEY}"))),
            format!("Authorization: Basic {}", base64(&format!("u:{KEY}"))),
            format!("token={url_safe}"),
            format!("bytes {}", hex(KEY)),
            format!("GET /v1?key={}", percent(KEY)),
            format!(r#"{{"authorization":"Bearer {escaped}"}}"#),
            format!("spelled {spaced}"),
            format!("backwards {reversed}"),
            // A truncated echo that still holds two thirds of the key, from either end.
            format!("Bearer {}…", &KEY[..20]),
            format!("…{} (cut)", &KEY[KEY.len() - 18..]),
            r#"{"model":"GPT-4o-mini","messages":[]}"#.to_owned(),
            r#"{\"model\": \"gpt-4o-mini\"}"#.to_owned(),
        ] {
            assert!(s.carried_by(&answer), "{answer}");
        }
        let slash = OwnerSecrets::new(None, "meta-llama/Llama-3-8B");
        assert!(slash.carried_by(r#"{"model":"meta-llama\/Llama-3-8B"}"#));
    }

    #[test]
    fn ordinary_answers_and_slices_of_the_model_pass() {
        let s = OwnerSecrets::new(Some(KEY), "gpt-4o-mini");
        for answer in [
            "GPT-4 and GPT-4o are models; mini is a word.",
            "Windy from the west, light rain by evening.",
            "The skill key is the body; proj is short for project.",
            "Encoded: %41%42 and \\u00e9t\\u00e9, 100% sure; \\x41 and a stray \\u12.",
        ] {
            assert!(!s.carried_by(answer), "{answer}");
        }
        // A short model id is looked for in the request's shape only.
        let o1 = OwnerSecrets::new(None, "o1");
        assert!(!o1.carried_by("Pro-1 plans"));
        assert!(!o1.carried_by("I am O1."));
        assert!(o1.carried_by(r#"{"model": "O1", "messages": []}"#));
    }

    /// Review 24b G1: a caller had the model repeat a list of guessed model ids, and the run
    /// failed exactly when the owner's was in it — one exact bit a call, the id in a handful of
    /// calls. An id in prose or in a list is no echo of the request; the request's JSON shape
    /// is.
    #[test]
    fn a_list_of_guessed_model_ids_is_no_echo() {
        let s = OwnerSecrets::new(None, "gpt-4o-mini");
        for answer in [
            "gpt-4o\ngpt-4o-mini\nclaude-3-5-haiku",
            r"gpt-4o\ngpt-4o-mini\nclaude-3-5-haiku",
            "I compared GPT 4o mini with Claude; gpt-4o-mini was faster.",
            r#"Use it like this: client.chat(model="gpt-4o-mini")"#,
            r#"{"model":"gpt-4o-mini-2024-07-18"}"#,
            r#"{"model":"gpt-4o"}"#,
            r#"{"name":"gpt-4o-mini"}"#,
        ] {
            assert!(!s.carried_by(answer), "{answer}");
        }
        for answer in [
            r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#,
            r#"echo: {"stream":false, "model" : "gpt-4o-mini"}"#,
            r#"{"body":"{"model":"gpt-4o-mini"}"}"#,
        ] {
            assert!(s.carried_by(answer), "{answer}");
        }
        let slash = OwnerSecrets::new(None, "meta-llama/Llama-3-8B");
        assert!(slash.carried_by(r#"{"body":"{"model":"meta-llama\/llama-3-8b"}"}"#));
        assert!(!slash.carried_by("meta-llama/Llama-3-8B is an open model"));
    }

    /// The caller steers what the model writes and sees whether the run fails: a check that
    /// caught short slices of the key would confirm a key's public prefix plus guessed
    /// characters, one at a time (36 runs a character). Anything short of two thirds of the
    /// key, in any form, passes.
    #[test]
    fn a_caller_guessing_the_key_a_character_at_a_time_learns_nothing() {
        let key = "sk-ant-api03-Xq7Lp3RvT9mW2sKd8NbY4cHj6FgZ1eUa5oQi0rLtVx";
        let s = OwnerSecrets::new(Some(key), "claude-x");
        let public = "sk-ant-api03-".len();
        for guessed in 0..=20 {
            let guess = &key[..public + guessed];
            for answer in [
                format!("Try {guess}"),
                format!("Try {}", guess.to_uppercase()),
                format!("Try {}", base64(guess)),
                format!("Try {}", hex(guess)),
            ] {
                assert!(
                    !s.carried_by(&answer),
                    "the run fails on a guess of {guessed} characters past the public prefix: \
                     {answer}"
                );
            }
        }
        assert!(s.carried_by(&format!("Try {key}")));
    }

    /// The key enciphered as the guard deciphers a body (ROT13, Atbash, ROT47), whole or cut to
    /// two thirds from either end, in any case or spaced out, is found; a guess of the public
    /// prefix plus up to 20 characters so enciphered still passes (no oracle).
    #[test]
    fn the_key_in_a_letter_cipher_is_found_and_a_guess_so_enciphered_is_not() {
        let key = "sk-ant-api03-Xq7Lp3RvT9mW2sKd8NbY4cHj6FgZ1eUa5oQi0rLtVx";
        let s = OwnerSecrets::new(Some(key), "claude-x");
        let ciphers: [fn(&str) -> String; 3] = [|k| caesar(k, 13), atbash, rot47];
        // Two thirds of the key's 52 letters and digits are 35: the first 40 characters hold
        // 37 of them (three dashes), the last 36 all alnum.
        let (head, tail) = (&key[..40], &key[key.len() - 36..]);
        let mut missed = Vec::new();
        for cipher in ciphers {
            let whole = cipher(key);
            let spaced: String = whole.chars().flat_map(|c| [c, ' ']).collect();
            for answer in [
                format!("Here: {whole}"),
                format!("HERE: {}", whole.to_uppercase()),
                format!("spelled {spaced}"),
                format!("{}…", cipher(head)),
                format!("…{}", cipher(tail)),
            ] {
                if !s.carried_by(&answer) {
                    missed.push(answer);
                }
            }
            let public = "sk-ant-api03-".len();
            for guessed in 0..=20 {
                let answer = format!("Try {}", cipher(&key[..public + guessed]));
                assert!(!s.carried_by(&answer), "an oracle: {answer}");
            }
        }
        assert!(missed.is_empty(), "released: {missed:#?}");
        // ROT47 writes `T` as `%` and `-I` as `\x`: an answer holding `%23` or `\x23` is read
        // as an escape, so the key's ROT47 form is folded the same way.
        let odd = "sk-Tab4Zq7-Iab9Wm2Kp8Vd3Tcd5Xr6";
        let s = OwnerSecrets::new(Some(odd), "");
        assert!(s.carried_by(&rot47(odd)), "{}", rot47(odd));
    }

    /// A key too short (or too odd) to look for folded is still looked for as written.
    #[test]
    fn a_short_key_is_still_found_as_written() {
        for key in ["k9", "ab]]cd", "abc def", "Zq7Lp3x"] {
            let s = OwnerSecrets::new(Some(key), "");
            assert!(s.carried_by(&format!("x {key} y")), "{key}");
            assert!(!s.carried_by("nothing here"), "{key}");
        }
        assert!(!OwnerSecrets::new(None, "").carried_by("anything"));
    }

    /// An ordinary long answer carries neither (its cost is in the guard's bench, not here).
    #[test]
    fn an_ordinary_answer_carries_neither() {
        let answer = "Windy from the west, light rain by evening. ".repeat(93);
        let s = OwnerSecrets::new(Some(KEY), "gpt-4o-mini");
        assert!(!s.carried_by(&answer));
    }
}
