//! The box's prompt as a provider double reads it (`skillbox_jc::prompt`): the owner's body, then
//! the box's notice, as the system prompt; the request and each source in blocks whose tags carry
//! a suffix the box draws per prompt (`<request-3f9a…>` … `</request-3f9a…>`). A double that
//! plays a model doing what the request says finds its parts here instead of spelling the tags.

use skillbox_jc::prompt::NOTICE_HEAD;

/// The prompt's tag suffix: the request block opens the user turn.
pub fn suffix_of(user: &str) -> &str {
    user.strip_prefix("<request-")
        .and_then(|r| r.split(">\n").next())
        .unwrap_or("")
}

/// The caller's request: the content of the request block ("" if there is none).
pub fn request_of(user: &str) -> &str {
    let s = suffix_of(user);
    user.split(&format!("<request-{s}>\n"))
        .nth(1)
        .and_then(|r| r.split(&format!("\n</request-{s}>")).next())
        .unwrap_or("")
}

/// The content of source `name`'s block ("" if there is none).
pub fn source_of<'a>(user: &'a str, name: &str) -> &'a str {
    let s = suffix_of(user);
    user.split(&format!("<source-{s} name=\"{name}\">\n"))
        .nth(1)
        .and_then(|r| r.split(&format!("\n</source-{s}>")).next())
        .unwrap_or("")
}

/// The owner's instructions as the model got them: the system prompt without the box's notice.
pub fn body_of(system: &str) -> &str {
    system.split(NOTICE_HEAD).next().unwrap_or(system)
}
