//! The one writer of every `--json` output: JSON a terminal cannot be steered by.
//!
//! `serde_json` escapes only C0 controls, `"` and `\` inside strings; DEL, the C1 controls
//! (U+009B CSI, U+009D OSC … U+009C ST: a VTE terminal, GNU screen and mosh obey them in UTF-8),
//! the bidi overrides and isolates, zero-width and tag characters go out raw. A `--json` output
//! carries a peer's bytes (a board row's description, a call's answer, a peer's addresses), and a
//! terminal or an agent's shell tool reads them: so every such character in a string is written
//! as a `\uXXXX` escape instead (a surrogate pair above U+FFFF). The output is still JSON and
//! parses to the same strings: a script reading it sees no difference. It lives in the node crate,
//! beside [`crate::log_fields`] (the other text an operator's terminal shows), so its tests run:
//! the binary that calls it has none of its own.

use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter, Serializer};
use std::io;

/// Whether `c` must not reach a terminal raw: a control character (C0, DEL, C1), one a reader
/// does not see (`skillbox_skill::text::is_invisible`: the bidi controls, zero-width and tag
/// characters — the rule every surface that shows a peer's text keeps), or a line or paragraph
/// separator (a line break to some readers, none to others).
pub fn escaped(c: char) -> bool {
    c.is_control() || skillbox_skill::text::is_invisible(c) || matches!(c, '\u{2028}' | '\u{2029}')
}

/// `v` as pretty JSON with every [`escaped`] character written as `\uXXXX`.
pub fn to_string(v: &impl Serialize) -> serde_json::Result<String> {
    let mut out = Vec::with_capacity(128);
    v.serialize(&mut Serializer::with_formatter(
        &mut out,
        ForTerminal(PrettyFormatter::new()),
    ))?;
    // Every byte written is serde_json's own (valid UTF-8) or an ASCII escape.
    String::from_utf8(out).map_err(|e| serde::ser::Error::custom(e.utf8_error()))
}

/// `Formatter` methods that hand the layout to the wrapped `PrettyFormatter` as they are.
macro_rules! pretty_layout {
    ($($name:ident($($arg:ident: $ty:ty)?)),* $(,)?) => {$(
        fn $name<W: ?Sized + io::Write>(&mut self, w: &mut W $(, $arg: $ty)?) -> io::Result<()> {
            self.0.$name(w $(, $arg)?)
        }
    )*};
}

/// `serde_json`'s pretty layout, its string fragments escaped as [`escaped`] says.
struct ForTerminal(PrettyFormatter<'static>);

impl Formatter for ForTerminal {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut clean = 0;
        for (at, c) in fragment.char_indices() {
            if !escaped(c) {
                continue;
            }
            w.write_all(&fragment.as_bytes()[clean..at])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(w, "\\u{unit:04x}")?;
            }
            clean = at + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[clean..])
    }

    // The layout: `PrettyFormatter`'s, unchanged.
    pretty_layout! {
        begin_array(), end_array(), begin_array_value(first: bool), end_array_value(),
        begin_object(), end_object(), begin_object_key(first: bool), begin_object_value(),
        end_object_value(),
    }
}
