//! Skill documents the tests import.

/// A skill spending the owner's key through the `openai` provider double; `body_marker` goes
/// in its body (for leak scans), `required` are its required sources.
pub fn skill_doc(name: &str, body_marker: &str, required: &[&str]) -> String {
    let req = if required.is_empty() {
        String::new()
    } else {
        format!("requiredSources: [{}]\n", required.join(", "))
    };
    format!(
        "---\nname: {name}\ndescription: Builds a music-taste profile from listening history.\nprovider: openai\nmodel: gpt-test\nkey: openai-key\n{req}---\nYou are a music critic ({body_marker}). Describe the taste.\n"
    )
}
