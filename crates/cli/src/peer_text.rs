//! What reaches the operator's terminal from a peer goes through here: a board row's
//! description and names, the addresses a peer gives, a box URL an owner advertised (in a
//! call's record and its consent question), a call's answer (the owner's model's output); and
//! what a file someone else wrote makes the CLI print (`skill check`, `manifest check` and
//! `skill add` quote a SKILL.md's or pack.json's field names and values). A peer or an author
//! chooses those bytes, and a terminal obeys escape sequences — clear a line and write a fake
//! one, set the clipboard (OSC 52), hide a link (OSC 8) — and shows nothing of invisible
//! characters. So each field is one line without control, escape, bidi or invisible
//! characters, a description is shown between ⟦ ⟧ (a peer cannot write those brackets: they
//! become apostrophes), and an answer is framed with this process's random markers, as the
//! agent surfaces do (`skillbox_reach::catalog`).

use serde_json::Value;
use skillbox_reach::catalog;

/// A peer's field as one clean line of at most `cap` characters ("" when absent).
pub fn line(v: &Value, cap: usize) -> String {
    text(v.as_str().unwrap_or(""), cap)
}

/// Someone else's text as one clean line of at most `cap` characters: the same cleaning as a
/// peer's field, for text that came in a file (a SKILL.md, a pack.json someone handed over).
pub fn text(s: &str, cap: usize) -> String {
    catalog::clean_untrusted(s, cap)
}

/// A string list's items, each a clean line.
pub fn lines(v: &Value, cap: usize) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|s| line(s, cap))
        .collect()
}

/// A peer's own words (a board description), bracketed so its end is visible.
pub fn quoted(v: &Value) -> String {
    format!("⟦{}⟧", line(v, catalog::DESCRIPTION_CAP))
}

/// A call's answer: its lines kept, everything else as [`line`] takes out, between this
/// process's markers with what it is said above them.
pub fn answer(peer: &str, skill: &str, answer: &str) -> String {
    catalog::frame_answer(peer, skill, answer)
}
