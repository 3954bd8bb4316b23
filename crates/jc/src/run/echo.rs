//! The owner's key and model id are never in an answer the box releases.
//!
//! The model sees neither: the key travels in a header and the model id in the request's JSON,
//! so only a provider (or a proxy in front of it) that echoes the raw request — a debugging
//! endpoint, a 200 "error as content" quoting what it was sent — puts them in an answer, and
//! the output guard, which indexes the body only, let that through to the caller. Every answer
//! (guarded program or not, both rounds of `regenerate`) is looked at after it is capped: the
//! key as written and as a marked secret of a guard of its own (case, separators, base64, hex,
//! escapes, reversed, slices of it: whatever the guard finds of a canary), and the model id as
//! written, in any case, and with everything but its letters and digits dropped (a JSON echo
//! writes `meta-llama\/Llama-3`). The model id is not given the guard's slices: it is public
//! vocabulary, and `GPT-4` in an ordinary answer must not fail a run of `gpt-4o-mini`.
//!
//! An answer that carries either fails the run with `provider_failed` (`protocol`: the provider
//! answered with something other than an answer) rather than being withheld: the owner's
//! provider leaks its key, and a failure tells the owner so (a withheld answer reads as the
//! guard acting on the body), while the caller gets the same closed code any malformed answer
//! gives. Both rounds of `regenerate` already fail the run when either fails.

use skillbox_guard::{Action, GuardSpec, Prepared};

/// Model ids this long or longer (letters and digits) are also looked for folded; a shorter one
/// folded would match inside ordinary words.
const FOLDED_MODEL_MIN: usize = 6;

/// What of the owner's stake an answer must not carry.
pub(super) struct OwnerSecrets<'a> {
    key: Option<&'a str>,
    model: &'a str,
    model_lower: String,
    model_folded: String,
    /// The key as the one marked secret of a body of its own; `None` when the guard cannot mark
    /// it (fewer than 3 letters or digits, or `]]` in it): the key is then looked for as
    /// written only.
    key_guard: Option<Prepared>,
}

/// Lower-case letters and digits of `text`, everything else dropped.
fn folded(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

impl<'a> OwnerSecrets<'a> {
    pub(super) fn new(key: Option<&'a str>, model: &'a str) -> OwnerSecrets<'a> {
        let key = key.filter(|k| !k.is_empty());
        let spec = GuardSpec {
            enabled: true,
            canaries: true,
            // Only the key: nothing else of this one-token body is a secret.
            auto_canaries: false,
            action: Action::Withhold,
            ..GuardSpec::default_for(false)
        };
        let key_guard = key
            .filter(|k| !k.contains("]]") && !k.chars().any(char::is_whitespace))
            .and_then(|k| skillbox_guard::prepare(&format!("[[secret:{k}]]"), &spec).ok());
        OwnerSecrets {
            key,
            model,
            model_lower: model.to_lowercase(),
            model_folded: folded(model),
            key_guard,
        }
    }

    /// Whether `answer` carries the key or the model id.
    pub(super) fn carried_by(&self, answer: &str) -> bool {
        if self.key.is_some_and(|k| answer.contains(k)) {
            return true;
        }
        if !self.model.is_empty() {
            let lower = answer.to_lowercase();
            if lower.contains(&self.model_lower)
                || (self.model_folded.chars().count() >= FOLDED_MODEL_MIN
                    && folded(answer).contains(&self.model_folded))
            {
                return true;
            }
        }
        self.key_guard
            .as_ref()
            .is_some_and(|g| skillbox_guard::check(g, answer).is_caught())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    const KEY: &str = "sk-proj-Q7vT2mXw9LpR4nZk8sYd";

    #[test]
    fn the_key_and_the_model_are_found_as_written_and_encoded() {
        let s = OwnerSecrets::new(Some(KEY), "gpt-4o-mini");
        let b64 = base64::engine::general_purpose::STANDARD.encode(KEY);
        let spaced: String = KEY.chars().flat_map(|c| [c, ' ']).collect();
        let reversed: String = KEY.chars().rev().collect();
        for answer in [
            format!("Authorization: Bearer {KEY}"),
            format!("your key: {}", KEY.to_uppercase()),
            format!("here: {b64}"),
            format!("spelled {spaced}"),
            format!("backwards {reversed}"),
            format!("a slice {}", &KEY[8..20]),
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
        ] {
            assert!(!s.carried_by(answer), "{answer}");
        }
        // A short model id is looked for as written only.
        let o1 = OwnerSecrets::new(None, "o1");
        assert!(!o1.carried_by("Pro-1 plans"));
        assert!(o1.carried_by("I am O1."));
    }

    /// A key too short (or too odd) for a marker is still looked for as written.
    #[test]
    fn a_short_key_is_still_found_as_written() {
        for key in ["k9", "ab]]cd", "abc def"] {
            let s = OwnerSecrets::new(Some(key), "");
            assert!(s.key_guard.is_none(), "{key}");
            assert!(s.carried_by(&format!("x {key} y")), "{key}");
            assert!(!s.carried_by("nothing here"), "{key}");
        }
        let seven = OwnerSecrets::new(Some("Zq7Lp3x"), "");
        assert!(seven.carried_by("key=Zq7Lp3x"));
        assert!(!OwnerSecrets::new(None, "").carried_by("anything"));
    }

    /// What the look costs per run and per 4 KiB answer, beside the guard's check of the same
    /// answer against a 2 KiB body (printed: the look runs the same decoders over the answer,
    /// so it costs about one such check).
    #[test]
    fn the_look_is_cheap() {
        let answer = "Windy from the west, light rain by evening. ".repeat(93);
        let t = std::time::Instant::now();
        let s = OwnerSecrets::new(Some(KEY), "gpt-4o-mini");
        let prepared = t.elapsed();
        let t = std::time::Instant::now();
        for _ in 0..20 {
            assert!(!s.carried_by(&answer));
        }
        let look = t.elapsed() / 20;
        let body = "You are the weather oracle of the northern valleys; answer in three lines. "
            .repeat(28);
        let guard = skillbox_guard::prepare(&body, &GuardSpec::default_for(false)).expect("body");
        let t = std::time::Instant::now();
        for _ in 0..20 {
            let _ = skillbox_guard::check(&guard, &answer);
        }
        eprintln!(
            "owner secrets: prepare {prepared:?}, a {} byte answer {look:?}; the guard's check \
             of it against a {} byte body {:?}",
            answer.len(),
            body.len(),
            t.elapsed() / 20
        );
    }
}
