//! How the binary's logs write field values (review 23b P3): a peer's text in a field must not
//! reach the operator's terminal as control sequences or as forged lines of the node's own.
//! Here, in a library, so its test runs with the node's (the binary has no test target).

/// The most characters of one field value a log line carries.
const LOG_FIELD_MAX: usize = 4096;

/// How every log line writes its fields: each value's control characters (C0, DEL, C1), the
/// line and paragraph separators, and every character a reader does not see
/// ([`skillbox_skill::text::is_invisible`]: the bidi controls and marks, zero-width and tag
/// characters — the one rule the agent surfaces' cleaning keeps) escaped, and the value cut at
/// [`LOG_FIELD_MAX`]. tracing-subscriber escapes ESC and BEL in the `message` only; a field
/// that carries a peer's text (`%reason` once did) would write raw control sequences into the
/// operator's terminal and forge lines of the node's own, or hide and reorder what the operator
/// reads. This holds for any such field to come.
pub fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    use tracing_subscriber::field::MakeExt as _;
    tracing_subscriber::fmt::format::debug_fn(
        |w: &mut tracing_subscriber::fmt::format::Writer<'_>,
         field: &tracing::field::Field,
         value: &dyn std::fmt::Debug| {
            if field.name() != "message" {
                write!(w, "{}=", field.name())?;
            }
            let text = format!("{value:?}");
            for c in text.chars().take(LOG_FIELD_MAX) {
                // The same characters the `--json` writer escapes: both are read on a terminal.
                if crate::terminal_json::escaped(c) {
                    write!(w, "{}", c.escape_default())?;
                } else {
                    w.write_char(c)?;
                }
            }
            if text.chars().nth(LOG_FIELD_MAX).is_some() {
                w.write_str("...")?;
            }
            Ok(())
        },
    )
    .delimited(" ")
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    /// A log sink the test reads back.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What one event logged with `escaped_fields` writes (ANSI off, as into a file).
    fn logged(event: impl FnOnce()) -> String {
        use tracing_subscriber::layer::SubscriberExt as _;
        let sink = Sink::default();
        let writer = sink.clone();
        let layer = tracing_subscriber::fmt::layer()
            .fmt_fields(super::escaped_fields())
            .with_ansi(false)
            .with_writer(move || writer.clone());
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, event);
        let out = sink.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8(out).expect("utf-8")
    }

    /// A field whose value holds ESC, a newline, a C1 control and a bidi override comes out
    /// escaped, on the event's one line: the fmt layer's own field formatter wrote them raw.
    #[test]
    fn log_field_values_are_written_escaped_on_one_line() {
        let peer_text = "B\u{1b}[2K\nFAKE \u{9b}31m \u{202e}x";
        let out = logged(|| tracing::info!(reason = %peer_text, "refused\u{1b}]0;t\u{7}"));
        assert!(
            !out.chars()
                .any(|c| c.is_control() && c != '\n' || c == '\u{202e}'),
            "{out:?}"
        );
        assert_eq!(out.matches('\n').count(), 1, "{out:?}");
        assert!(out.ends_with('\n'), "{out:?}");
        assert!(
            out.contains(r"reason=B\u{1b}[2K\nFAKE \u{9b}31m \u{202e}x"),
            "{out:?}"
        );
        assert!(out.contains(r"refused\u{1b}]0;t\u{7}"), "{out:?}");
    }

    /// The characters a reader does not see that the escaping missed (review logs): a right-to-
    /// left mark (U+200F) and the Arabic letter mark (U+061C) reorder what follows them on the
    /// operator's screen, a zero-width no-break space (U+FEFF) and a tag character (U+E0041, an
    /// invisible `A`) hide text a reader cannot see but a model or grep does. Each comes out
    /// escaped, none raw: the log keeps the agent surfaces' one rule.
    #[test]
    fn a_peers_marks_zero_widths_and_tags_are_escaped_in_a_log_field() {
        let peer_text = "ok\u{200f}gpj.exe\u{061c} \u{feff}hidden\u{e0041}";
        let out = logged(|| tracing::info!(reason = %peer_text, "refused"));
        for c in ['\u{200f}', '\u{061c}', '\u{feff}', '\u{e0041}'] {
            assert!(!out.contains(c), "U+{:04X} raw in {out:?}", c as u32);
        }
        assert!(
            out.contains(r"reason=ok\u{200f}gpj.exe\u{61c} \u{feff}hidden\u{e0041}"),
            "{out:?}"
        );
    }
}
