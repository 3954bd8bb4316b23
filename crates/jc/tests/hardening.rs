//! Issue 12 at the box: who it answers (Host, Origin), what bodies it takes, run ids checked
//! before use, a memory budget instead of growth, and only closed codes and fixed words out —
//! never what a party, or the provider, wrote.

mod common;

use std::sync::Arc;

use common::*;
use skillbox_jc::program::Role;
use skillbox_jc::run::{BoxConfig, RunFailure};
use skillbox_providers::{
    BoxFuture, ChatRequest, Completion, Provider, ProviderError, ProviderFailure,
};

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

#[tokio::test]
async fn the_box_answers_only_its_own_host_and_no_other_site() {
    let f = start(None).await;
    let health = format!("{}/healthz", f.url);
    let ok = http().get(&health).send().await.expect("send");
    assert_eq!(ok.status(), 200);
    // DNS rebinding: a page's own name resolved to the box's address.
    let r = http()
        .get(&health)
        .header("host", "evil.example")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 421);
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["error"], "host_not_allowed");
    // A web page in the user's browser posting to a loopback box.
    let host = f.url.trim_start_matches("http://").to_owned();
    let r = http()
        .post(format!("{}/v1/runs", f.url))
        .header("origin", "https://evil.example")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 403);
    // Its own origin is fine; `localhost` on the same port too.
    let r = http()
        .get(&health)
        .header("origin", format!("http://{host}"))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200);
    let port = host.rsplit(':').next().expect("port");
    let r = http()
        .get(&health)
        .header("host", format!("localhost:{port}"))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn bodies_must_be_json_or_sealed_bytes_and_run_ids_are_checked_first() {
    let f = start(None).await;
    let p = f.program();
    let env = f.approve(&p);
    // A "simple" cross-site form post type is refused before the body is read.
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ] {
        let r = http()
            .post(format!("{}/v1/runs", f.url))
            .header("content-type", ct)
            .body(env.to_json())
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 415, "{ct}");
    }
    for bad in ["x", "..%2F..%2Fetc", &"a".repeat(33), &"A".repeat(32)] {
        let r = http()
            .get(format!("{}/v1/runs/{bad}/result", f.url))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 400, "{bad}");
        let body: serde_json::Value = r.json().await.expect("json");
        assert_eq!(body["error"], "bad_run_id", "{bad}");
    }
    // Messages are fixed per code: nothing the asker sent is echoed back.
    let echo = "ECHO-ME-7731";
    let r = http()
        .post(format!("{}/v1/runs", f.url))
        .header("content-type", "application/json")
        .body(format!("{{\"{echo}\": 1}}"))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 400);
    let text = r.text().await.expect("text");
    assert!(!text.contains(echo), "{text}");
    // The client refuses a malformed run id before it builds a URL.
    let e = f.client.result("../../x").await.expect_err("refused");
    assert_eq!(e.code(), "bad_run_id");
}

#[tokio::test]
async fn a_program_whose_two_parties_are_one_key_is_refused() {
    let f = start(None).await;
    let mut p = f.program();
    p.parties.owner.node_key = p.parties.caller.node_key.clone();
    // One key "approves" as both parties.
    let env = skillbox_jc::dsse::sign_program(&p, &f.caller).expect("signs");
    let e = f.client.open(&env).await.expect_err("refused");
    assert_eq!(remote_code(&e), "program_invalid");
}

#[tokio::test]
async fn the_box_stays_within_its_stake_budget_and_answers_busy() {
    let f = start_with(
        Arc::new(EchoProvider { fixed: None }),
        BoxConfig {
            // Room for one run of the fixture's program (a few KiB each side), not two.
            stake_budget_bytes: 24 * 1024,
            ..BoxConfig::default()
        },
    )
    .await;
    let (_, first) = f.open(&f.program()).await;
    let env = f.approve(&f.program());
    let e = f.client.open(&env).await.expect_err("over budget");
    assert_eq!(remote_code(&e), "busy");
    // When the first run ends, its reservation is released.
    f.client
        .delete(&first.run_id, &first.program_hash, Role::Caller, &f.caller)
        .await
        .expect("delete");
    f.client.open(&env).await.expect("room again");
}

/// A provider whose error quotes its input.
struct Echoing;

impl Provider for Echoing {
    fn complete<'a>(
        &'a self,
        request: ChatRequest,
        _api_key: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Completion, ProviderError>> {
        Box::pin(async move {
            let _quoted = format!("{} {}", request.system, request.user);
            Err(ProviderError::Reported(ProviderFailure::ContextTooLong))
        })
    }
}

#[tokio::test]
async fn a_failed_run_reports_a_closed_code_and_nothing_of_the_prompt() {
    let f = start_with(Arc::new(Echoing), BoxConfig::default()).await;
    let (_, run) = f.open(&f.program()).await;
    f.run_all(&run, "REQ-MARK-51 hello", "BODY-MARK-51 be nice")
        .await;
    let view = f
        .client
        .wait_result(&run.run_id, std::time::Duration::from_secs(10))
        .await
        .expect("result");
    assert!(view.sealed_output.is_none());
    assert_eq!(view.error, Some(RunFailure::ContextTooLong));
    let raw = http()
        .get(format!("{}/v1/runs/{}/result", f.url, run.run_id))
        .send()
        .await
        .expect("send")
        .text()
        .await
        .expect("text");
    assert!(raw.contains("\"context_too_long\""), "{raw}");
    for m in ["REQ-MARK-51", "BODY-MARK-51"] {
        assert!(!raw.contains(m), "{m} in /result: {raw}");
    }
}

proptest::proptest! {
    /// Run ids the box hands out pass; anything else (a path, an upper-case id, a longer or
    /// shorter one, a query) is refused before it reaches a URL or a lookup.
    #[test]
    fn only_the_boxs_own_run_id_form_is_taken(s in "[ -~]{0,40}", n in proptest::num::u128::ANY) {
        let issued = format!("{n:032x}");
        proptest::prop_assert!(skillbox_jc::error::is_run_id(&issued));
        let ok = s.len() == 32 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        proptest::prop_assert_eq!(skillbox_jc::error::is_run_id(&s), ok);
        if !ok {
            let c = skillbox_jc::client::BoxClient::new("http://127.0.0.1:9").expect("client");
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
            let e = rt.block_on(c.result(&s)).expect_err("refused");
            proptest::prop_assert_eq!(e.code(), "bad_run_id");
        }
    }
}
