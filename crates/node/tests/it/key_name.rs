//! A skill's `key` is the *name* of a secret source the node holds. An API client other than the
//! CLI (an agent holding the token, a script) that puts a provider's key there instead would
//! have the node keep it as the key's name: in the store, in `GET /skills`, in the "key source
//! missing (…)" reason. The node refuses any `key` that is not a secret source of its own, with
//! a closed code and a fixed message that does not repeat the value.

use crate::common::*;
use serde_json::{Value, json};
use skillbox_testkit::leak::{assert_no_markers, every_file_under};

const PASTED: &str = "sk-proj-Q3vT9xLm2PASTEDkEy7wZr4Nd8Hs1Fb6";

async fn patch(node: &TestNode, body: Value) -> (u16, Value, String) {
    crate::agents_pack::patch(node, "taste", body).await
}

#[tokio::test]
async fn a_key_pasted_as_the_key_name_over_the_api_is_refused_and_kept_nowhere() {
    let logs = crate::leak::captured_logs();
    let node = TestNode::start().await;
    let doc = skillbox_testkit::skills::skill_doc("taste", "BODY-k3n4", &[]);
    assert_eq!(node.post_skill(&doc, None).await.0, 201);
    assert_eq!(
        node.put_source("openai-key", "secret", b"sk-THE-REAL-ONE")
            .await
            .0,
        201
    );
    assert_eq!(node.put_source("songs", "text", b"Bonobo").await.0, 201);

    let mut answers = String::new();
    for body in [
        json!({"key": PASTED}),
        json!({"provider": "openrouter", "key": PASTED}),
        // Well-formed names the node holds no secret under: refused the same way.
        json!({"key": "no-such-source"}),
        json!({"key": "songs"}),
    ] {
        let (status, err, text) = patch(&node, body.clone()).await;
        let err = assert_refused((status, err, text.clone()), 400, "validation_error");
        assert_eq!(
            err["message"],
            json!(format!("key: {}", skillbox_node::skills::KEY_NOT_A_SECRET)),
            "{body}: {err}"
        );
        answers.push_str(&text);
    }
    // Nothing changed, the provider given beside the pasted key included.
    let (_, detail, text) = node.get("/skills/taste").await;
    answers.push_str(&text);
    assert_eq!(
        detail["declaration"]["key"],
        json!("openai-key"),
        "{detail}"
    );
    assert_eq!(
        detail["declaration"]["provider"],
        json!("openai"),
        "{detail}"
    );
    // The way in works: the name of a secret source.
    let (status, detail, text) = patch(&node, json!({"key": "openai-key"})).await;
    assert_eq!(status, 200, "{detail}");
    answers.push_str(&text);
    let (_, _, text) = node.get("/skills").await;
    answers.push_str(&text);

    kept_nowhere(node, &logs, &answers).await;
}

/// Stops the node: `PASTED` is in none of the API's `answers`, the files of its data dir or its
/// log.
async fn kept_nowhere(node: TestNode, logs: &crate::leak::Captured, answers: &str) {
    let dir = node.stop().await;
    let files = String::from_utf8_lossy(&every_file_under(dir.path())).into_owned();
    let logged = String::from_utf8_lossy(&logs.0.lock().expect("logs")).into_owned();
    assert_no_markers("the API's answers", answers, &[PASTED]);
    assert_no_markers("the data dir", &files, &[PASTED]);
    assert_no_markers("the node's log", &logged, &[PASTED]);
}

/// `SkillChange`'s `Debug` (what a `?change` in a log line prints) shows which fields change,
/// never the key's name: a client may have put a pasted key there.
#[test]
fn a_skill_changes_debug_shows_no_key_name() {
    let change = skillbox_node::skills::SkillChange {
        key: Some(Some(PASTED.into())),
        ..Default::default()
    };
    let shown = format!("{change:?}");
    assert_no_markers("SkillChange's Debug", &shown, &[PASTED]);
    assert!(shown.contains("key"), "{shown}");
}

/// The same mistake in the skill file: `key:` holding the provider's key rather than the name of
/// the source that holds it (`POST /skills`, what `skillbox skill add FILE` sends). The import
/// is refused with a fixed message, so the key is kept in no declaration row and shown in no
/// "key source missing (…)" reason.
#[tokio::test]
async fn a_key_pasted_into_a_skill_files_key_line_is_refused_and_kept_nowhere() {
    let logs = crate::leak::captured_logs();
    let node = TestNode::start().await;
    let doc = skillbox_testkit::skills::skill_doc("taste", "BODY-p4s7", &[])
        .replace("key: openai-key", &format!("key: {PASTED}"));
    let mut answers = String::new();
    let (status, err, text) = node.post_skill(&doc, None).await;
    answers.push_str(&text);
    assert_eq!(status, 400, "{err}");
    assert!(
        text.contains(skillbox_skill::KEY_IS_NOT_A_NAME),
        "the refusal says what is wrong: {text}"
    );
    for path in ["/skills", "/skills/taste"] {
        let (_, _, text) = node.get(path).await;
        answers.push_str(&text);
    }
    // A well-formed name the node holds no source under is still imported (a file comes before
    // its key's source), and the reason it is not offered names nothing.
    let (status, imported, text) = node
        .post_skill(
            &skillbox_testkit::skills::skill_doc("taste", "BODY-p4s7", &[]),
            None,
        )
        .await;
    assert_eq!(status, 201, "{imported}");
    answers.push_str(&text);
    let (_, list, text) = node.get("/skills").await;
    answers.push_str(&text);
    assert_eq!(
        list["skills"][0]["reason"],
        json!("key source missing"),
        "{list}"
    );

    kept_nowhere(node, &logs, &answers).await;
}
