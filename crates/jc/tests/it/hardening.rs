//! Issue 12 at the box: who it answers (Host, Origin), what bodies it takes, run ids checked
//! before use, a memory budget instead of growth, and only closed codes and fixed words out —
//! never what a party, or the provider, wrote.

use std::sync::Arc;

use crate::support::*;
use skillbox_jc::program::Role;
use skillbox_jc::run::{BoxConfig, RunFailure};
use skillbox_providers::{ChatRequest, Provider, ProviderError, ProviderFailure, Reply};

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

#[tokio::test]
async fn the_box_answers_only_its_own_host_and_no_other_site() {
    let f = start(None).await;
    let health = format!("{}/healthz", f.url);
    let ok = http().get(&health).send().await.expect("send");
    assert_eq!(ok.status(), 200);
    // The health page asked with one header set.
    let get_with = async |name: &str, value: &str| {
        http()
            .get(&health)
            .header(name, value)
            .send()
            .await
            .expect("send")
    };
    // DNS rebinding: a page's own name resolved to the box's address.
    let r = get_with("host", "evil.example").await;
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
    let r = get_with("origin", &format!("http://{host}")).await;
    assert_eq!(r.status(), 200);
    let port = host.rsplit(':').next().expect("port");
    let r = get_with("host", &format!("localhost:{port}")).await;
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
    assert_refused(f.client.open(&env).await, "program_invalid");
}

/// Room for the fixture program's limits (about 17 KiB) beside nothing held, and for one 7 KiB
/// upload being read (3 x 7 KiB), not for that and anything more.
async fn start_with_room_for_one_upload() -> Fixture {
    start_echo(BoxConfig {
        stake_budget_bytes: 24 * 1024,
        ..BoxConfig::default()
    })
    .await
}

/// A caller's stake upload of 7 KiB for `run`, under way: its first bytes sent and read.
async fn upload_under_way(f: &Fixture, run: &VerifiedRun) -> RawStake {
    let hash = run.program_hash.to_hex();
    let action = stake_action(&run.run_id, &hash, Role::Caller, &[0; 32], &f.caller);
    let mut upload = RawStake::start(&f.url, &run.run_id, &action, 7 * 1024).await;
    upload.wr.write_all(&[0; 10]).await.expect("part");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    upload
}

/// The caller's stake in `run` (a small one).
async fn stake_small(f: &Fixture, run: &VerifiedRun) -> skillbox_jc::Result<Role> {
    let stake = f.caller_stake(run, "hi", b"a");
    f.client.stake(run, Role::Caller, stake, &f.caller).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_box_stays_within_its_stake_budget_and_answers_busy() {
    let f = start_with_room_for_one_upload().await;
    // Opens reserve nothing: two fit.
    let (_, first) = f.open(&f.program()).await;
    let (_, second) = f.open(&f.program()).await;
    // An upload under way holds three times its declared length.
    let upload = upload_under_way(&f, &first).await;
    // The second run's caller stake and a fresh program's open: asked while the upload holds
    // its memory, and again after.
    let open_fresh = async || f.client.open(&f.approve(&f.program())).await;
    assert_refused(stake_small(&f, &second).await, "busy");
    assert_refused(open_fresh().await, "busy");
    // A cut upload gives its memory back.
    drop(upload);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stake_small(&f, &second).await.expect("room again");
    open_fresh().await.expect("room again");
}

/// A run deleted while a stake upload for it is being read: the upload's reservation stays
/// counted until its slot is given back (the upload goes on filling its buffer; freed at the
/// delete, the budget would not bound what deleted runs' uploads hold).
#[tokio::test]
async fn a_run_deleted_mid_upload_keeps_the_uploads_memory_counted_until_it_ends() {
    let f = start_with_room_for_one_upload().await;
    let (_, first) = f.open(&f.program()).await;
    let (_, second) = f.open(&f.program()).await;
    let mut upload = upload_under_way(&f, &first).await;
    assert_refused(stake_small(&f, &second).await, "busy");
    // The attacker deletes the run its upload is for, and goes on sending.
    f.client
        .delete(&first.run_id, &first.program_hash, Role::Caller, &f.caller)
        .await
        .expect("deleted");
    upload.wr.write_all(&[0; 10]).await.expect("more");
    assert_refused(stake_small(&f, &second).await, "busy");
    // Its upload cut, its memory is given back.
    drop(upload);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stake_small(&f, &second).await.expect("room again");
}

/// A provider whose error quotes its input.
struct Echoing;

impl Provider for Echoing {
    fn complete<'a>(&'a self, request: ChatRequest, _api_key: Option<&'a str>) -> Reply<'a> {
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
    assert_eq!(
        view.error,
        Some(RunFailure::Provider(ProviderFailure::ContextTooLong))
    );
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

// --- Issue 30 item 3: a box's URL is public and an open needs only two fresh keys. ---

use base64::Engine as _;
use ed25519_dalek::SigningKey;
use sha2::{Digest, Sha256};
use skillbox_jc::attest::VerifiedRun;
use skillbox_jc::dsse::{Envelope, PartyAction, sign_action};
use skillbox_jc::program::{MAX_STAKE_BYTES, Program};
use skillbox_jc::seal::HpkeKeyPair;
use skillbox_jc::server::STAKE_ACTION_HEADER;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A fresh node key, as an attacker makes one per open.
fn fresh_key() -> SigningKey {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("random");
    SigningKey::from_bytes(&seed)
}

/// A program with the largest stake limits the format allows (64 MiB a side), between two
/// fresh keys: what an attacker opens.
fn max_program(f: &Fixture, caller: &SigningKey, owner: &SigningKey) -> Program {
    let mut p = f.program();
    p.parties.caller.node_key = skillbox_jc::dsse::key_hex(&caller.verifying_key());
    p.parties.caller.result_key = HpkeKeyPair::generate().public_hex();
    p.parties.owner.node_key = skillbox_jc::dsse::key_hex(&owner.verifying_key());
    p.caller_inputs.sources.clear();
    p.caller_inputs.request_max_bytes = MAX_STAKE_BYTES - 18;
    // Every owner stake may carry its day limits besides the body (`day::DAY_LIMITS_ENTRY`).
    p.owner_inputs.body_max_bytes = MAX_STAKE_BYTES - 43 - skillbox_jc::day::DayLimits::FRAMED;
    p.owner_inputs.model_max_bytes = 0;
    p.validate().expect("the largest program is valid");
    p
}

fn signed(p: &Program, caller: &SigningKey, owner: &SigningKey) -> Envelope {
    let mut env = skillbox_jc::dsse::sign_program(p, caller).expect("caller signs");
    env.sign(owner).expect("owner signs");
    env
}

/// An HTTP client that connects from another loopback address than the honest client's
/// 127.0.0.1: the attacker is another client as the box counts them.
fn attacker_http() -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .expect("client")
}

fn stake_action(
    run_id: &str,
    program_hash: &str,
    role: Role,
    sealed_digest: &[u8],
    key: &SigningKey,
) -> String {
    let env = sign_action(
        &PartyAction {
            action: "stake".into(),
            role,
            run_id: run_id.into(),
            program_hash: program_hash.into(),
            stake_sha256: Some(hex::encode(sealed_digest)),
        },
        key,
    )
    .expect("signs");
    base64::engine::general_purpose::STANDARD.encode(env.to_json())
}

/// A stake request over a bare connection, so the test decides when each body byte is sent
/// and can see how much the box took before it answered.
struct RawStake {
    rd: tokio::net::tcp::OwnedReadHalf,
    wr: tokio::net::tcp::OwnedWriteHalf,
}

impl RawStake {
    /// `key`'s stake of `sealed` as `role` in `run`, its action signed over the sealed bytes'
    /// digest; nothing of the body sent yet.
    async fn begin(
        f: &Fixture,
        run: &VerifiedRun,
        role: Role,
        sealed: &[u8],
        key: &SigningKey,
    ) -> RawStake {
        let hash = run.program_hash.to_hex();
        let action = stake_action(&run.run_id, &hash, role, &Sha256::digest(sealed), key);
        RawStake::start(&f.url, &run.run_id, &action, sealed.len()).await
    }

    async fn start(url: &str, run_id: &str, action_b64: &str, len: usize) -> RawStake {
        RawStake::start_with(url, run_id, action_b64, "", len).await
    }

    /// [`Self::start`] with more header lines (`name: value\r\n` each).
    async fn start_with(
        url: &str,
        run_id: &str,
        action_b64: &str,
        more: &str,
        len: usize,
    ) -> RawStake {
        let addr = url.trim_start_matches("http://");
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (rd, mut wr) = stream.into_split();
        let head = format!(
            "POST /v1/runs/{run_id}/stakes HTTP/1.1\r\nhost: {addr}\r\n\
             content-type: application/octet-stream\r\ncontent-length: {len}\r\n\
             {more}{STAKE_ACTION_HEADER}: {action_b64}\r\n\r\n"
        );
        wr.write_all(head.as_bytes()).await.expect("head");
        RawStake { rd, wr }
    }

    /// The status and body of the answer.
    async fn answer(rd: &mut tokio::net::tcp::OwnedReadHalf) -> (u16, String) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = rd.read(&mut chunk).await.expect("read");
            assert!(n > 0, "connection closed before an answer");
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let status: u16 = head[9..12].parse().expect("status");
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().expect("length"));
        while buf.len() < head_end + len {
            let n = rd.read(&mut chunk).await.expect("read");
            assert!(n > 0, "connection closed mid-answer");
            buf.extend_from_slice(&chunk[..n]);
        }
        (
            status,
            String::from_utf8_lossy(&buf[head_end..head_end + len]).into_owned(),
        )
    }

    /// Stream `len` filler bytes while waiting for the answer; returns the answer and how many
    /// body bytes had been written when it came (the box's receive buffers included).
    async fn flood(self, len: usize) -> ((u16, String), usize) {
        let RawStake { mut rd, mut wr } = self;
        let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = written.clone();
        let writer = tokio::spawn(async move {
            let chunk = vec![0x5au8; 64 * 1024];
            let mut sent = 0;
            while sent < len {
                let n = chunk.len().min(len - sent);
                if wr.write_all(&chunk[..n]).await.is_err() {
                    break;
                }
                sent += n;
                counter.store(sent, std::sync::atomic::Ordering::SeqCst);
            }
            wr
        });
        let answer =
            tokio::time::timeout(std::time::Duration::from_secs(60), Self::answer(&mut rd))
                .await
                .expect("answered within a minute");
        let at = written.load(std::sync::atomic::Ordering::SeqCst);
        writer.abort();
        (answer, at)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_signed_opens_with_the_largest_limits_does_not_keep_an_honest_run_out() {
    let f = start(Some("honest answer")).await;
    let attacker = attacker_http();
    // Each open names 2 x 64 MiB of stake limits: on 7f3543e eight of them reserved the box's
    // whole 1 GiB budget for ten minutes and every other open was refused `busy`.
    let mut opened = 0;
    for _ in 0..24 {
        let (c, o) = (fresh_key(), fresh_key());
        let env = signed(&max_program(&f, &c, &o), &c, &o);
        let r = attacker
            .post(format!("{}/v1/runs", f.url))
            .header("content-type", "application/json")
            .body(env.to_json())
            .send()
            .await
            .expect("send");
        if r.status() == 201 {
            opened += 1;
        }
    }
    assert_eq!(opened, 24, "opening reserves nothing, so none is refused");
    let (_, run) = f.open(&f.program()).await;
    f.run_all(&run, "pick a song", "be brief").await;
    let view = f
        .client
        .wait_result(&run.run_id, std::time::Duration::from_secs(20))
        .await
        .expect("the honest run finishes");
    assert!(view.error.is_none(), "{view:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stake_is_refused_on_its_action_before_its_body_is_read() {
    let f = start(None).await;
    let (c, o) = (fresh_key(), fresh_key());
    let f = Fixture {
        caller: c,
        owner: o,
        ..f
    };
    let p = max_program(&f, &f.caller, &f.owner);
    let (_, run) = f.open(&p).await;
    let hash = run.program_hash.to_hex();
    let huge = 64 << 20;
    // A stake upload under `action` declaring `len` bytes and sending them until refused: the
    // answer and how many bytes went.
    let flood = async |action: &str, len: usize| {
        RawStake::start(&f.url, &run.run_id, action, len)
            .await
            .flood(len)
            .await
    };
    // Signed by a key that is not the caller's: on 7f3543e the box read all 64 MiB into memory
    // and only then checked the signature.
    let forged = stake_action(&run.run_id, &hash, Role::Caller, &[0; 32], &key(9));
    let ((status, body), taken) = flood(&forged, huge).await;
    assert_eq!(status, 403, "{body}");
    // Not the caller's signature (`signature_missing`: none by the key the role names).
    assert!(body.contains("signature"), "{body}");
    assert!(
        taken < 16 << 20,
        "{taken} bytes were sent before the refusal (of {huge})"
    );
    // A role that has staked already: refused before the body too.
    // The largest program has no sources: a request alone.
    let sealed = skillbox_jc::client::seal_stake(
        &run,
        Role::Caller,
        vec![skillbox_jc::client::StakeInput::bytes("request", b"hello")],
    )
    .expect("seal");
    f.client
        .stake(&run, Role::Caller, sealed, &f.caller)
        .await
        .expect("caller stakes");
    let again = stake_action(&run.run_id, &hash, Role::Caller, &[1; 32], &f.caller);
    let ((status, body), taken) = flood(&again, huge).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("\"already_staked\""), "{body}");
    assert!(taken < 16 << 20, "{taken} bytes sent before the refusal");
    // A declared length over the role's limit: refused on the header.
    let owner = stake_action(&run.run_id, &hash, Role::Owner, &[2; 32], &f.owner);
    let over = 80 << 20;
    let ((status, body), taken) = flood(&owner, over).await;
    assert_eq!(status, 413, "{body}");
    assert!(taken < 16 << 20, "{taken} bytes sent before the refusal");
}

#[tokio::test]
async fn a_program_expiring_past_the_boxs_horizon_is_refused() {
    let f = start(None).await;
    let mut p = f.program();
    p.expires_at = (1 << 53) - 1;
    assert_refused(f.client.open(&f.approve(&p)).await, "expires_too_far");
    p.expires_at = skillbox_jc::run::now_secs() + 3600;
    f.client
        .open(&f.approve(&p))
        .await
        .expect("an hour is fine");
}

#[tokio::test]
async fn open_then_delete_leaves_nothing_behind_once_the_horizon_passed() {
    let dir = tempfile::tempdir().expect("dir");
    let list = dir.path().join("spent-programs");
    let now = skillbox_jc::run::now_secs();
    let unlimited = skillbox_jc::run::Rate {
        burst: 1e9,
        per_sec: 1e9,
    };
    let core = echo_core(BoxConfig {
        key_rate: unlimited,
        ..BoxConfig::default()
    })
    .with_spent_log(&list, now)
    .expect("list");
    let f = start(None).await;
    // What the attack used: the farthest expiry the format allows.
    let mut far = f.program();
    far.expires_at = (1 << 53) - 1;
    let e = core.open(&f.approve(&far), now).expect_err("refused");
    assert_eq!(e.code(), "expires_too_far");
    for _ in 0..300 {
        let mut p = f.program();
        p.expires_at = now + 3600;
        let opened = core.open(&f.approve(&p), now).expect("open");
        let hash = skillbox_jc::ProgramHash::from_hex(&opened.program_hash).expect("hash");
        let del = sign_action(
            &PartyAction {
                action: "delete".into(),
                role: Role::Caller,
                run_id: opened.run_id.clone(),
                program_hash: hash.to_hex(),
                stake_sha256: None,
            },
            &f.caller,
        )
        .expect("signs");
        core.delete(&opened.run_id, &del, now).expect("delete");
    }
    let m = core.memory();
    assert_eq!((m.runs, m.spent_runs, m.programs), (0, 300, 300));
    assert_eq!(m.spent_list_lines, 300);
    // Past the horizon everything is forgotten and the list compacted: what an attacker can
    // make the box keep is bounded by its open rate times the horizon.
    core.sweep(now + 3601);
    let m = core.memory();
    assert_eq!(
        (m.runs, m.spent_runs, m.programs, m.spent_list_lines),
        (0, 0, 0, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_uploads_for_one_run_and_role_at_once_one_is_refused() {
    let f = start(Some("ok")).await;
    let (_, run) = f.open(&f.program()).await;
    let first = f.caller_stake(&run, "first", b"a");
    let mut upload = RawStake::begin(&f, &run, Role::Caller, &first, &f.caller).await;
    upload.wr.write_all(&first[..100]).await.expect("part");
    upload.wr.flush().await.expect("flush");
    // Let the box take the first upload's slot.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let second = f.caller_stake(&run, "second", b"b");
    assert_refused(
        f.client.stake(&run, Role::Caller, second, &f.caller).await,
        "upload_in_progress",
    );
    upload.wr.write_all(&first[100..]).await.expect("rest");
    let (status, body) = RawStake::answer(&mut upload.rd).await;
    assert_eq!(status, 200, "{body}");
    // A cut upload gives its slot back: the owner's first try is dropped mid-body.
    let owner = f.owner_stake(&run, "body");
    let mut cut = RawStake::begin(&f, &run, Role::Owner, &owner, &f.owner).await;
    cut.wr.write_all(&owner[..50]).await.expect("part");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    drop(cut);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    f.client
        .stake(&run, Role::Owner, owner, &f.owner)
        .await
        .expect("the owner stakes after its cut upload");
}

#[tokio::test]
async fn a_box_with_an_allow_list_opens_only_programs_of_its_listed_keys() {
    let f = start(None).await;
    let owner_hex = skillbox_jc::dsse::key_hex(&f.owner.verifying_key());
    let g = start_echo(BoxConfig {
        allowed_keys: Some(vec![owner_hex]),
        ..BoxConfig::default()
    })
    .await;
    // Two fresh keys: refused.
    let (c, o) = (fresh_key(), fresh_key());
    let mut p = g.program();
    p.parties.caller.node_key = skillbox_jc::dsse::key_hex(&c.verifying_key());
    p.parties.owner.node_key = skillbox_jc::dsse::key_hex(&o.verifying_key());
    assert_refused(g.client.open(&signed(&p, &c, &o)).await, "key_not_allowed");
    // The listed owner's program, with any caller: opened.
    g.client.open(&g.approve(&g.program())).await.expect("open");
}

#[tokio::test]
async fn opens_past_a_clients_rate_and_a_keys_rate_are_refused() {
    use skillbox_jc::run::Rate;
    let slow = Rate {
        burst: 3.0,
        per_sec: 0.001,
    };
    let f = start_echo(BoxConfig {
        client_rate: slow,
        ..BoxConfig::default()
    })
    .await;
    three_opens_then_limited(&f, "a fourth from this address").await;
    // Another address still opens.
    let r = attacker_http()
        .post(format!("{}/v1/runs", f.url))
        .header("content-type", "application/json")
        .body(f.approve(&f.program()).to_json())
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 201);
    // Per key: the same two keys from any address.
    let g = start_echo(BoxConfig {
        key_rate: slow,
        ..BoxConfig::default()
    })
    .await;
    three_opens_then_limited(&g, "a fourth by these keys").await;
}

#[tokio::test]
async fn box_attestations_past_a_clients_rate_are_refused() {
    // Each is a platform report made for whoever asks: charged like an open.
    let f = start_echo(BoxConfig {
        client_rate: skillbox_jc::run::Rate {
            burst: 3.0,
            per_sec: 0.001,
        },
        ..BoxConfig::default()
    })
    .await;
    let nonce = skillbox_jc::client::new_nonce;
    for _ in 0..3 {
        f.client
            .box_attestation(&nonce())
            .await
            .expect("box attestation");
    }
    let e = f
        .client
        .box_attestation(&nonce())
        .await
        .expect_err("a fourth from this address");
    assert_eq!(remote_code(&e), "rate_limited");
}

/// Three opens of fresh programs go through; the fourth is `rate_limited` (`what`: whose).
async fn three_opens_then_limited(f: &Fixture, what: &str) {
    for _ in 0..3 {
        f.client.open(&f.approve(&f.program())).await.expect("open");
    }
    let e = f
        .client
        .open(&f.approve(&f.program()))
        .await
        .expect_err(what);
    assert_eq!(remote_code(&e), "rate_limited");
}

#[tokio::test]
async fn a_run_nobody_stakes_in_gives_its_slot_back() {
    let core = echo_core(BoxConfig {
        max_runs: 1,
        ..BoxConfig::default()
    });
    let f = start(None).await;
    let now = skillbox_jc::run::now_secs();
    let idle = core.open(&f.approve(&f.program()), now).expect("open");
    let e = core
        .open(&f.approve(&f.program()), now)
        .expect_err("the one slot is taken");
    assert_eq!(e.code(), "busy");
    core.sweep(now + BoxConfig::default().unstaked_ttl_secs);
    assert_eq!(
        core.status(&idle.run_id).expect_err("dropped").code(),
        "run_spent"
    );
    core.open(&f.approve(&f.program()), now + 121)
        .expect("the slot is free again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stake_upload_that_dawdles_is_cut_and_gives_its_slot_back() {
    let f = start_with(
        Arc::new(EchoProvider {
            fixed: Some("ok".into()),
        }),
        BoxConfig {
            stake_upload_secs: 1,
            ..BoxConfig::default()
        },
    )
    .await;
    let (_, run) = f.open(&f.program()).await;
    let sealed = f.caller_stake(&run, "slow", b"a");
    // A slowloris: a few bytes, then nothing, holding the role's slot and its memory.
    let mut slow = RawStake::begin(&f, &run, Role::Caller, &sealed, &f.caller).await;
    slow.wr.write_all(&sealed[..10]).await.expect("part");
    let (status, body) = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        RawStake::answer(&mut slow.rd),
    )
    .await
    .expect("cut within the upload time");
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("\"upload_timed_out\""), "{body}");
    f.client
        .stake(&run, Role::Caller, sealed, &f.caller)
        .await
        .expect("the slot is free again");
}

/// The stake that starts its run (the caller's go sent with it, the owner's already in), its
/// connection closed while the box opens it: the box drops the request's handler, but the run
/// still runs — its start is part of the task that takes the stake, not of the answer nobody
/// waits for. Before, the run stayed `running` with nobody to run it until the box restarted,
/// its slot and stake bytes held all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_by_a_stake_whose_client_hung_up_still_runs() {
    let f = start(Some("ran anyway")).await;
    // A hang-up before the box has the whole body takes nothing (the stake is not taken, and
    // that is not this test): then again, later.
    for after_ms in [300, 1000, 3000] {
        let run = hang_up_on_the_last_stake(&f, after_ms).await;
        let deadline = std::time::Instant::now() + WAIT;
        let taken = loop {
            let view = f.client.status(&run.run_id).await.expect("status");
            if view.state != skillbox_jc::run::Phase::Open || view.staked.contains(&Role::Caller) {
                break true;
            }
            if std::time::Instant::now() > deadline {
                break false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        if !taken {
            continue;
        }
        let view = f.client.wait_result(&run.run_id, WAIT).await;
        let status = f.client.status(&run.run_id).await.map(|v| v.state);
        let view = view.unwrap_or_else(|e| panic!("the run never ended: {e:?}, {status:?}"));
        assert_eq!(view.error, None);
        return;
    }
    panic!("the box never took the stake");
}

/// A run whose owner staked and sent its go, and whose caller's stake with its go is sent
/// whole, its connection closed `after_ms` later, the box's answer unread.
async fn hang_up_on_the_last_stake(f: &Fixture, after_ms: u64) -> VerifiedRun {
    let mut p = f.program();
    p.caller_inputs.sources.clear();
    p.caller_inputs.request_max_bytes = MAX_STAKE_BYTES - 18;
    p.validate().expect("valid");
    let (_, run) = f.open(&p).await;
    let owner = skillbox_jc::client::seal_stake(
        &run,
        Role::Owner,
        vec![skillbox_jc::client::StakeInput::bytes("body", b"answer")],
    )
    .expect("seal");
    let taken = f
        .stake_and_submit_as(&run, Role::Owner, owner)
        .await
        .expect("the owner's stake and go");
    assert!(taken.submitted);
    // A large request, so that opening it keeps the stake's task busy after the hang-up.
    let request = vec![b'r'; 48 << 20];
    let sealed = skillbox_jc::client::seal_stake(
        &run,
        Role::Caller,
        vec![skillbox_jc::client::StakeInput::bytes("request", &request)],
    )
    .expect("seal");
    let hash = run.program_hash.to_hex();
    let digest = Sha256::digest(&sealed);
    let action = stake_action(&run.run_id, &hash, Role::Caller, &digest, &f.caller);
    let go = sign_action(
        &PartyAction {
            action: "submit".into(),
            role: Role::Caller,
            run_id: run.run_id.clone(),
            program_hash: hash.clone(),
            stake_sha256: None,
        },
        &f.caller,
    )
    .expect("signs");
    let go = base64::engine::general_purpose::STANDARD.encode(go.to_json());
    let more = format!("{}: {go}\r\n", skillbox_jc::server::SUBMIT_ACTION_HEADER);
    let RawStake { rd, mut wr } =
        RawStake::start_with(&f.url, &run.run_id, &action, &more, sealed.len()).await;
    wr.write_all(&sealed).await.expect("body");
    tokio::time::sleep(std::time::Duration::from_millis(after_ms)).await;
    drop((rd, wr));
    run
}

/// Whoever opened a run cannot keep the platform's report maker busy with it: a run is
/// attested at most `MAX_ATTESTATIONS_PER_RUN` times, then `rate_limited`, and another run's
/// attestation is still made.
#[tokio::test]
async fn a_run_is_attested_a_bounded_number_of_times() {
    let f = start(None).await;
    let flooded = f.client.open(&f.approve(&f.program())).await.expect("open");
    let nonce = |i: u32| format!("{i:032x}");
    for i in 0..skillbox_jc::run::MAX_ATTESTATIONS_PER_RUN {
        f.client
            .attestation(&flooded.run_id, &nonce(i))
            .await
            .expect("within the ceiling");
    }
    let e = f
        .client
        .attestation(&flooded.run_id, &nonce(99))
        .await
        .expect_err("past the ceiling");
    assert_eq!(remote_code(&e), "rate_limited");
    let other = f.client.open(&f.approve(&f.program())).await.expect("open");
    f.client
        .attestation(&other.run_id, &nonce(1))
        .await
        .expect("another run is attested");
}

/// An attester whose first `fails` reports fail (a platform's transient error).
struct Flaky {
    inner: std::sync::Arc<dyn skillbox_jc::attest::Attester>,
    fails: std::sync::atomic::AtomicU32,
}

impl skillbox_jc::attest::Attester for Flaky {
    skillbox_jc::same_identity_as_inner!();
    fn attest(
        &self,
        statement: &skillbox_jc::attest::Statement,
    ) -> skillbox_jc::Result<skillbox_jc::attest::Attestation> {
        let left = self.fails.load(std::sync::atomic::Ordering::SeqCst);
        if left > 0 {
            self.fails
                .store(left - 1, std::sync::atomic::Ordering::SeqCst);
            return Err(skillbox_jc::JcError::Internal(
                "the platform's report failed".into(),
            ));
        }
        self.inner.attest(statement)
    }
}

/// Only attestations made count against a run's ceiling: a platform failing for a while uses
/// none of it up, and the run is attested once it recovers.
#[tokio::test]
async fn failed_attestations_do_not_use_up_a_runs_ceiling() {
    let f = start(None).await;
    let flaky = std::sync::Arc::new(Flaky {
        inner: skillbox_testkit::box_fixture::dev_attester(),
        fails: std::sync::atomic::AtomicU32::new(skillbox_jc::run::MAX_ATTESTATIONS_PER_RUN + 2),
    });
    let core = skillbox_testkit::box_fixture::core_attested_by(
        flaky,
        std::sync::Arc::new(skillbox_testkit::box_fixture::EchoProvider { fixed: None }),
        BoxConfig::default(),
    );
    let now = skillbox_jc::run::now_secs();
    let opened = core.open(&f.approve(&f.program()), now).expect("open");
    let nonce = "00112233445566778899aabbccddeeff";
    for i in 0..skillbox_jc::run::MAX_ATTESTATIONS_PER_RUN + 2 {
        let e = core
            .attest(&opened.run_id, nonce, now)
            .expect_err("the platform fails");
        assert_ne!(e.code(), "rate_limited", "failure {i} was counted");
    }
    core.attest(&opened.run_id, nonce, now)
        .expect("attested once the platform recovers");
}
