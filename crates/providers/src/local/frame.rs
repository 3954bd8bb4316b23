//! The chat frame: the model's own chat template, cut where the system and user texts go.
//!
//! The template (from the GGUF, or ChatML) is rendered once with marker strings in place of the
//! texts; the rendered string is then split at the markers. The pieces between are the frame:
//! tokenized with the model's control tokens recognised. The texts themselves are tokenized
//! separately with control tokens *not* recognised, so request text can never close its turn or
//! open another one. This module is the pure part: the split and the check that the frame really
//! delimits the user's turn with a control token.

/// Stand-ins for the texts while the template is rendered: ASCII without spaces, so templates
/// that trim or escape content leave them as they are.
pub const SYSTEM_MARKER: &str = "@@skillbox.system.5e1d@@";
pub const USER_MARKER: &str = "@@skillbox.user.5e1d@@";

/// One part of a rendered chat, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part<'a> {
    /// Template text between the texts (turn markers, role names).
    Frame(&'a str),
    System,
    User,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("the chat template dropped the {0} text")]
    Missing(&'static str),
    #[error("the chat template repeats the {0} text")]
    Repeated(&'static str),
    #[error("the chat template puts the user text before the system text")]
    OutOfOrder,
    #[error("the chat template does not end the user's turn with a control token")]
    OpenTurn,
}

/// Splits a chat rendered with [`SYSTEM_MARKER`] (when `with_system`) and [`USER_MARKER`] into
/// frame pieces and text slots. Empty frame pieces are left out.
pub fn split_rendered(rendered: &str, with_system: bool) -> Result<Vec<Part<'_>>, FrameError> {
    let user = find_once(rendered, USER_MARKER, "user")?;
    let system = find_once(rendered, SYSTEM_MARKER, "system")?;
    let mut slots = vec![(user, USER_MARKER.len(), Part::User)];
    match (system, with_system) {
        (Some(at), true) => {
            if user.is_some_and(|u| u < at) {
                return Err(FrameError::OutOfOrder);
            }
            slots.insert(0, (Some(at), SYSTEM_MARKER.len(), Part::System));
        }
        (None, true) => return Err(FrameError::Missing("system")),
        (Some(_), false) => return Err(FrameError::Repeated("system")),
        (None, false) => {}
    }
    let mut parts = Vec::new();
    let mut cursor = 0;
    for (at, len, part) in slots {
        let at = at.ok_or(FrameError::Missing("user"))?;
        if at > cursor {
            parts.push(Part::Frame(&rendered[cursor..at]));
        }
        parts.push(part);
        cursor = at + len;
    }
    if cursor < rendered.len() {
        parts.push(Part::Frame(&rendered[cursor..]));
    }
    Ok(parts)
}

fn find_once(
    haystack: &str,
    marker: &str,
    what: &'static str,
) -> Result<Option<usize>, FrameError> {
    let mut found = haystack.match_indices(marker).map(|(at, _)| at);
    let first = found.next();
    if found.next().is_some() {
        return Err(FrameError::Repeated(what));
    }
    Ok(first)
}

/// The frame after the user text must hold a control token: otherwise the end of the user's
/// turn is plain text, which request text could imitate. `pieces` are the frame's parts with
/// each frame piece's tokens; `is_control` tells the model's control tokens.
pub fn check_closed<T: Copy>(
    pieces: &[Part<'_>],
    tokens_of: impl Fn(usize) -> Vec<T>,
    is_control: impl Fn(T) -> bool,
) -> Result<(), FrameError> {
    let user = pieces
        .iter()
        .position(|p| *p == Part::User)
        .ok_or(FrameError::Missing("user"))?;
    let closed = pieces
        .iter()
        .enumerate()
        .skip(user + 1)
        .filter(|(_, p)| matches!(p, Part::Frame(_)))
        .any(|(i, _)| tokens_of(i).into_iter().any(&is_control));
    if closed {
        Ok(())
    } else {
        Err(FrameError::OpenTurn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chatml(system: Option<&str>, user: &str) -> String {
        let mut s = String::new();
        if let Some(system) = system {
            s.push_str(&format!("<|im_start|>system\n{system}<|im_end|>\n"));
        }
        s.push_str(&format!(
            "<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
        ));
        s
    }

    #[test]
    fn chatml_splits_into_frame_and_slots() {
        let end = Part::Frame("<|im_end|>\n<|im_start|>assistant\n");
        let with_system = [
            Part::Frame("<|im_start|>system\n"),
            Part::System,
            Part::Frame("<|im_end|>\n<|im_start|>user\n"),
            Part::User,
            end,
        ];
        let without = [Part::Frame("<|im_start|>user\n"), Part::User, end];
        for (system, want) in [
            (Some(SYSTEM_MARKER), &with_system[..]),
            (None, &without[..]),
        ] {
            let rendered = chatml(system, USER_MARKER);
            assert_eq!(split_rendered(&rendered, system.is_some()).unwrap(), want);
        }
    }

    #[test]
    fn merged_system_and_bare_slots() {
        // Gemma-style: the system text goes into the user's turn.
        let rendered = format!(
            "<start_of_turn>user\n{SYSTEM_MARKER}\n\n{USER_MARKER}<end_of_turn>\n<start_of_turn>model\n"
        );
        let parts = split_rendered(&rendered, true).unwrap();
        assert_eq!(parts[1], Part::System);
        assert_eq!(parts[2], Part::Frame("\n\n"));
        assert_eq!(parts[3], Part::User);
        // Nothing around the slots at all.
        assert_eq!(
            split_rendered(&format!("{SYSTEM_MARKER}{USER_MARKER}"), true).unwrap(),
            vec![Part::System, Part::User]
        );
    }

    #[test]
    fn templates_that_lose_or_repeat_a_text_are_refused() {
        assert_eq!(
            split_rendered("<|im_start|>assistant\n", false),
            Err(FrameError::Missing("user"))
        );
        assert_eq!(
            split_rendered(&chatml(None, USER_MARKER), true),
            Err(FrameError::Missing("system"))
        );
        assert_eq!(
            split_rendered(&chatml(Some(SYSTEM_MARKER), USER_MARKER), false),
            Err(FrameError::Repeated("system"))
        );
        assert_eq!(
            split_rendered(&format!("{USER_MARKER} and again {USER_MARKER}"), false),
            Err(FrameError::Repeated("user"))
        );
        assert_eq!(
            split_rendered(&format!("{USER_MARKER}{SYSTEM_MARKER}"), true),
            Err(FrameError::OutOfOrder)
        );
    }

    #[test]
    fn the_user_turn_must_close_with_a_control_token() {
        let parts = vec![Part::Frame("a"), Part::User, Part::Frame("b")];
        // Frame piece 2 ("b") holds control token 7.
        let tokens = |i: usize| if i == 2 { vec![5, 7] } else { vec![1] };
        assert_eq!(check_closed(&parts, tokens, |t| t == 7), Ok(()));
        assert_eq!(
            check_closed(&parts, tokens, |t| t == 9),
            Err(FrameError::OpenTurn)
        );
        // A control token only before the user text does not close it.
        let tokens = |i: usize| if i == 0 { vec![7] } else { vec![1] };
        assert_eq!(
            check_closed(&parts, tokens, |t| t == 7),
            Err(FrameError::OpenTurn)
        );
        assert_eq!(
            check_closed(&[Part::Frame("a"), Part::User], |_| vec![7], |t| t == 7),
            Err(FrameError::OpenTurn)
        );
    }

    proptest! {
        /// Whatever the frame text around them (without the markers), splitting finds the slots
        /// and gives the frame back unchanged.
        #[test]
        fn split_round_trips(a in "[^@]{0,40}", b in "[^@]{0,40}", c in "[^@]{0,40}", sys: bool) {
            let rendered = if sys {
                format!("{a}{SYSTEM_MARKER}{b}{USER_MARKER}{c}")
            } else {
                format!("{a}{b}{USER_MARKER}{c}")
            };
            let parts = split_rendered(&rendered, sys).unwrap();
            let rebuilt: String = parts
                .iter()
                .map(|p| match p {
                    Part::Frame(s) => *s,
                    Part::System => SYSTEM_MARKER,
                    Part::User => USER_MARKER,
                })
                .collect();
            prop_assert_eq!(&rebuilt, &rendered);
            prop_assert_eq!(parts.iter().filter(|p| **p == Part::User).count(), 1);
            prop_assert_eq!(parts.iter().filter(|p| **p == Part::System).count(), usize::from(sys));
            prop_assert!(parts.iter().all(|p| *p != Part::Frame("")));
        }

        /// Arbitrary text never panics the splitter.
        #[test]
        fn split_never_panics(s in ".{0,200}", sys: bool) {
            let _ = split_rendered(&s, sys);
        }
    }
}
