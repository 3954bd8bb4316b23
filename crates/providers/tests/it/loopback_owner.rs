//! A loopback provider's port held by another user of the machine (audit 32 A32-2): the box
//! sends it nothing. The listener is a real process of another uid
//! ([`skillbox_testkit::other_user`]); the client is the box's own.

use std::time::Duration;

use skillbox_providers::openai::{OpenAiCompatible, OpenAiOptions};
use skillbox_providers::{
    ChatRequest, ContextSource, HttpOptions, Provider, ProviderError, ProviderFailure, ProviderId,
};
use skillbox_testkit::other_user::ForeignListener;

const BODY_MARKER: &str = "SECRET-BODY-MARKER-7f3a";
const REQUEST_MARKER: &str = "PRIVATE-REQUEST-MARKER-55e1";
const SOURCE_MARKER: &str = "PRIVATE-SOURCE-MARKER-91c2";

fn ollama_at(port: u16) -> OpenAiCompatible {
    let options = OpenAiOptions {
        http: HttpOptions {
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            max_retries: 0,
            max_retry_wait: Duration::from_secs(1),
            backoff: Duration::from_millis(10),
        },
        stream: false,
        context: ContextSource::Ollama,
        ..OpenAiOptions::default()
    };
    OpenAiCompatible::new(&format!("http://127.0.0.1:{port}/v1"), options)
        .expect("client")
        .for_provider(&ProviderId::Ollama)
}

fn prompt() -> ChatRequest {
    ChatRequest {
        system: format!("You are the song-mood skill. {BODY_MARKER}"),
        user: format!("{REQUEST_MARKER} -- source songs: {SOURCE_MARKER}"),
        model: "llama3".into(),
        max_tokens: 16,
        temperature: 0.0,
        seed: Some(1),
        system_allowance: None,
        context_tokens: None,
    }
}

#[tokio::test]
async fn a_loopback_provider_port_held_by_another_user_gets_no_prompt() {
    let listener = match ForeignListener::start(0) {
        Ok(l) => l,
        Err(why) => {
            println!("SKIPPED the other-user part: {why}");
            return;
        }
    };
    let port = listener.port;
    let provider = ollama_at(port);
    let result = provider.complete(prompt(), None).await;
    // Give a connection the box might have made time to deliver its bytes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = listener.received();
    let text = String::from_utf8_lossy(&got);
    for marker in [BODY_MARKER, REQUEST_MARKER, SOURCE_MARKER] {
        assert!(
            !text.contains(marker),
            "another user's listener received {marker}: {} bytes",
            got.len()
        );
    }
    assert!(
        got.is_empty(),
        "another user's listener received {} bytes",
        got.len()
    );
    let err = result.expect_err("a port another user holds must not answer a run");
    assert!(matches!(err, ProviderError::Unavailable(_)), "{err}");
    assert_eq!(err.failure(), ProviderFailure::Unavailable);
    let words = err.to_string();
    assert!(
        words.contains("another user")
            && words.contains(&format!("port {port} of provider ollama")),
        "{words}"
    );
    for marker in [BODY_MARKER, REQUEST_MARKER, SOURCE_MARKER] {
        assert!(!words.contains(marker), "{words}");
    }
}
