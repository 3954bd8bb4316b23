//! The box's TLS key bound into its attestation (issue 31 item 2): a box serving HTTPS with a
//! key made at start works end to end, and a node refuses — before any stake — a TLS front with
//! its own key relaying a real box, a box whose attestation binds no key, and a box whose key
//! changes under a verified run. Before any program goes to a box, the box's own attestation
//! admits its key: a front on the path reads no program and no run id, a box statement and a run
//! statement never pass for each other, and a box back with a fresh key is attested again. A
//! run's requests go to the one key its attestation bound, never to another box behind the same
//! URL. Real boxes, real TLS (rustls), on loopback.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::*;
use skillbox_jc::JcError;
use skillbox_jc::attest::{
    Attestation, Attester, Statement, VerifiedRun, VerifyPolicy, verify_attestation,
    verify_box_attestation,
};
use skillbox_jc::client::{BoxClient, OpenedRun, new_nonce, open_result};
use skillbox_jc::dsse::{ApprovedProgram, approved_program};
use skillbox_jc::run::BoxConfig;
use skillbox_jc::tls::BoxTls;

#[tokio::test]
async fn an_https_box_binds_its_tls_key_and_a_run_goes_end_to_end() {
    let (f, spki) = start_tls(Some("song b, then song a"), true).await;
    assert!(f.url.starts_with("https://") && f.client.is_tls());
    let health = f.client.health().await.expect("health over TLS");
    assert_eq!(health.status, "ok");
    let (_, run) = f.open(&f.program()).await;
    assert_eq!(run.tls_spki_sha256.as_deref(), Some(spki.as_str()));
    // The key survives the party's record (a restarted node pins it again).
    let back = skillbox_jc::attest::VerifiedRun::from_record(&run.to_record()).expect("record");
    assert_eq!(back.tls_spki_sha256, run.tls_spki_sha256);
    f.run_all(&run, "which song first?", "You pick songs.")
        .await;
    let view = f.result(&run).await;
    let out = open_result(&view, &f.result_key, &run).expect("caller opens");
    assert_eq!(out.answer, "song b, then song a");
}

#[tokio::test]
async fn a_tls_front_relaying_a_real_box_is_refused_before_any_stake() {
    let (real, _) = start_tls(None, true).await;
    let (front_url, seen) = start_tls_front(&real.url).await;
    let f = Fixture::at(&front_url);
    // The box's own report, relayed, comes over the front's key: refused, no key admitted.
    assert_key_refused(
        f.client.attest_box(&f.policy).await,
        "the front shows its own key",
    );
    // A run opened at the box itself: its report, relayed by the front, is refused too.
    let (approved, run_id) = open_unattested(&real).await;
    assert_key_refused(
        f.client.attest(&approved, &run_id, &f.policy).await,
        "the front shows its own key",
    );
    // The report itself was genuine: straight from the box it verifies.
    let direct = real
        .client
        .attest(&approved, &run_id, &real.policy)
        .await
        .expect("the real box verifies directly");
    // Even with a run verified elsewhere, nothing is staked through the front: its key was
    // never attested, so the handshake is refused before a byte of the stake leaves.
    assert_key_refused(
        f.stake_as_caller(&direct, "q", b"s", &f.caller).await,
        "stake through the front",
    );
    let paths = seen.lock().expect("log").clone();
    assert!(
        paths.iter().any(|p| p.contains("/attestation")),
        "{paths:?}"
    );
    assert!(!paths.iter().any(|p| p.contains("/stakes")), "{paths:?}");
    let status = real.client.status(&run_id).await;
    assert!(
        status.is_err() || status.is_ok_and(|s| s.staked.is_empty()),
        "nothing staked at the box"
    );
}

#[tokio::test]
async fn a_tls_front_on_the_path_reads_no_program() {
    let (real, _) = start_tls(None, true).await;
    let (front_url, front) = start_tls_front_capturing(&real.url).await;
    let f = Fixture::at(&front_url);
    let program = f.program();
    let env = f.approve(&program);
    // The node's open: the box is attested first, over the front's key, and refused there;
    // and a bare open goes over attested keys only, so the front's handshake is refused.
    let through = f.client.open_attested(&env, new_nonce(), &f.policy).await;
    let bare = f.client.open_attesting_for(&env, new_nonce()).await;
    // What the program would have told the path: the program as it travels (base64 of its
    // JSON: the call, the skill, the provider, the sources' names and limits, the prompt), and
    // either party's key, in clear in its signatures.
    let caller = skillbox_jc::dsse::key_hex(&f.caller.verifying_key());
    let owner = skillbox_jc::dsse::key_hex(&f.owner.verifying_key());
    let paths = front.paths.lock().expect("log").clone();
    for (what, needle) in [
        ("the program", env.payload.as_str()),
        ("the call id", program.call_id.as_str()),
        ("the skill", program.skill.name.as_str()),
        ("the caller's key", caller.as_str()),
        ("the owner's key", owner.as_str()),
    ] {
        assert!(!front.read(needle), "the front read {what}: {paths:?}");
    }
    assert!(
        paths
            .iter()
            .all(|p| p.starts_with("/v1/attestation?nonce=")),
        "{paths:?}"
    );
    assert_key_refused(through, "open through the front");
    assert_key_refused(bare, "bare open through the front");
    // Straight at the box, the same open goes through.
    let opened = real
        .client
        .open_attested(&env, new_nonce(), &real.policy)
        .await
        .expect("open at the box");
    real.client
        .attest_opened(
            &approved_program(&env).expect("approved"),
            opened,
            &real.policy,
        )
        .await
        .expect("its run verifies");
}

#[tokio::test]
async fn an_https_box_whose_attestation_binds_no_tls_key_is_refused() {
    let (f, _) = start_tls(None, false).await;
    assert_key_refused(f.client.attest_box(&f.policy).await, "no key bound");
    assert_key_refused(
        f.client
            .open_attested(&f.approve(&f.program()), new_nonce(), &f.policy)
            .await,
        "no key bound, no open",
    );
}

#[tokio::test]
async fn a_box_statement_never_passes_as_a_run_statement_nor_a_run_statement_as_the_box() {
    let f = start(None).await;
    let now = skillbox_jc::run::now_secs();
    let nonce = new_nonce();
    let of_box = f
        .client
        .box_attestation(&nonce)
        .await
        .expect("box attestation");
    let verified = verify_box_attestation(&of_box, &nonce, &f.policy, now).expect("verifies");
    assert_eq!(verified.measurement, MEASUREMENT);
    let run = f.open_attested(&f.program()).await;
    // The box's statement offered for a run (its nonce as the run's): it names no program.
    let err = verify_attestation(&of_box, &run.approved, &run.run_id, &nonce, &f.policy, now)
        .expect_err("a box statement as a run's");
    assert_eq!(err.code(), "statement_program_mismatch", "{err}");
    // The run's statement offered as the box's: it names a run.
    let err = verify_box_attestation(&run.attestation, &run.nonce, &f.policy, now)
        .expect_err("a run statement as the box's");
    assert_eq!(err.code(), "statement_run_mismatch", "{err}");
    // The box's statement for another nonce than asked: refused.
    let err =
        verify_box_attestation(&of_box, &new_nonce(), &f.policy, now).expect_err("another nonce");
    assert!(matches!(err, JcError::NonceMismatch), "{err}");
}

#[tokio::test]
async fn a_box_restarted_with_a_fresh_key_is_attested_again_and_the_next_call_works() {
    let dev = dev_attester();
    let box_statements = Arc::new(AtomicUsize::new(0));
    let first = TlsBoxRuntime::start("127.0.0.1:0", dev.clone(), box_statements.clone());
    let mut f = Fixture::at(&first.url);
    // The box's identity is pinned; its TLS key is whatever it made at start.
    f.policy = VerifyPolicy::new(true).with_box_keys(dev.identity_key().into_iter().collect());
    for _ in 0..3 {
        let run = call_at(&f).await;
        assert_eq!(run.tls_spki_sha256.as_deref(), Some(first.spki.as_str()));
    }
    // Calls on one key: one box attestation, not one per call.
    assert_eq!(box_statements.load(Ordering::SeqCst), 1);
    let addr = first.addr;
    let old_key = first.spki.clone();
    drop(first);
    // Gone: its address refuses connections, and the connections it had are closed.
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let again = TlsBoxRuntime::start(&addr.to_string(), dev, box_statements.clone());
    assert_ne!(again.spki, old_key, "a fresh key at start");
    // The pinned open is refused on the new key; the box is attested again and the call goes on.
    let run = call_at(&f).await;
    assert_eq!(run.tls_spki_sha256.as_deref(), Some(again.spki.as_str()));
    assert_eq!(box_statements.load(Ordering::SeqCst), 2);
    f.run_all(&run, "which song first?", "You pick songs.")
        .await;
    let view = f.result(&run).await;
    open_result(&view, &f.result_key, &run).expect("caller opens");
}

/// Fails the test unless `answer` is `tls_key_not_attested` (`what`: what was to be refused).
#[track_caller]
fn assert_key_refused<T: std::fmt::Debug>(answer: skillbox_jc::Result<T>, what: &str) {
    let err = answer.expect_err(what);
    assert!(matches!(err, JcError::TlsKeyNotAttested), "{what}: {err}");
    assert_eq!(err.code(), "tls_key_not_attested");
}

/// A call's run opened as a node does it ([`BoxClient::open_attested`]), not yet verified.
async fn open_at(f: &Fixture) -> (ApprovedProgram, OpenedRun) {
    let env = f.approve(&f.program());
    let approved = approved_program(&env).expect("approved");
    let opened = f
        .client
        .open_attested(&env, new_nonce(), &f.policy)
        .await
        .expect("open");
    (approved, opened)
}

/// A call's run opened and verified as a node does it.
async fn call_at(f: &Fixture) -> VerifiedRun {
    let (approved, opened) = open_at(f).await;
    f.client
        .attest_opened(&approved, opened, &f.policy)
        .await
        .expect("run verifies")
}

/// An attester counting the box's own statements (those naming no run).
struct Counting {
    inner: Arc<dyn Attester>,
    box_statements: Arc<AtomicUsize>,
}

impl Attester for Counting {
    skillbox_jc::same_identity_as_inner!();
    fn attest(&self, statement: &Statement) -> skillbox_jc::Result<Attestation> {
        if statement.run_id.is_empty() {
            self.box_statements.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.attest(statement)
    }
}

/// An https box with a fresh TLS key in a runtime of its own: dropped, the box is gone with
/// every connection it had (a restart), and its address is free for the next.
struct TlsBoxRuntime {
    url: String,
    addr: std::net::SocketAddr,
    spki: String,
    runtime: Option<tokio::runtime::Runtime>,
}

impl TlsBoxRuntime {
    fn start(addr: &str, attester: Arc<dyn Attester>, count: Arc<AtomicUsize>) -> TlsBoxRuntime {
        let tls = BoxTls::generate(&[]).expect("box TLS key");
        let spki = tls.spki_sha256().to_owned();
        let attester = tls.bind(Arc::new(Counting {
            inner: attester,
            box_statements: count,
        }));
        let provider = Arc::new(EchoProvider {
            fixed: Some("song b".into()),
        });
        let core = Arc::new(core_attested_by(attester, provider, BoxConfig::default()));
        // The old box may not have let go of the address yet.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let listener = loop {
            match std::net::TcpListener::bind(addr) {
                Ok(l) => break l,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("bind {addr}: {e}"),
            }
        };
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("box runtime");
        let listener = {
            let _in = runtime.enter();
            tokio::net::TcpListener::from_std(listener).expect("listener")
        };
        runtime
            .spawn(async move { skillbox_jc::server::serve_tls(listener, core, &[], &tls).await });
        TlsBoxRuntime {
            url: format!("https://{addr}"),
            addr,
            spki,
            runtime: Some(runtime),
        }
    }
}

impl Drop for TlsBoxRuntime {
    fn drop(&mut self) {
        if let Some(r) = self.runtime.take() {
            r.shutdown_background();
        }
    }
}

#[tokio::test]
async fn a_run_verified_on_one_key_stakes_nowhere_else() {
    // Two honest boxes: a run verified at the first cannot be staked at the second URL
    // through the first's client (another key, never attested to this client).
    let (a, _) = start_tls(None, true).await;
    let (b, _) = start_tls(None, true).await;
    let (_, run_a) = a.open(&a.program()).await;
    let b_client_holding_nothing = BoxClient::new(&b.url).expect("client");
    assert_key_refused(
        b_client_holding_nothing.status(&run_a.run_id).await,
        "no key attested to this client yet",
    );
    // The client of the first box talks to it on the key it verified.
    a.client.status(&run_a.run_id).await.expect("status");
}

#[test]
fn plain_http_is_for_loopback_only() {
    for url in [
        "http://10.0.0.5:7480",
        "http://box.example",
        "http://127.0.0.1@evil.example/",
        "ftp://127.0.0.1/",
    ] {
        assert!(
            matches!(BoxClient::new(url), Err(JcError::BadRequest(_))),
            "{url}"
        );
    }
    for url in [
        "http://127.0.0.1:7480",
        "http://localhost:7480",
        "http://[::1]:7480",
        "https://box.example",
    ] {
        BoxClient::new(url).expect(url);
    }
}

#[test]
fn the_tls_key_follows_the_storage_key_across_restarts() {
    use skillbox_jc::run::store::KeyFile;
    use skillbox_jc::tls::BoxTls;
    let dir = tempfile::tempdir().expect("dir");
    let first = KeyFile::load_or_create(&dir.path().join("store.key")).expect("key");
    let again = KeyFile::load_or_create(&dir.path().join("store.key")).expect("same key");
    let other = KeyFile::load_or_create(&dir.path().join("other.key")).expect("other key");
    let names = ["box.example:7480".to_owned()];
    let a = BoxTls::derived(&first, &names).expect("tls");
    // A restarted box on the same store serves the key its runs' attestations bound.
    assert_eq!(
        a.spki_sha256(),
        BoxTls::derived(&again, &[]).expect("tls").spki_sha256()
    );
    assert_ne!(
        a.spki_sha256(),
        BoxTls::derived(&other, &names).expect("tls").spki_sha256()
    );
    assert_ne!(
        BoxTls::generate(&[]).expect("fresh").spki_sha256(),
        BoxTls::generate(&[]).expect("fresh").spki_sha256()
    );
}

/// The path sees an open's size even over the pinned connection: unpadded it told skills,
/// prompt templates and how many sources a caller chose apart. An open's body is padded to its
/// size bucket, and the box opens the padded body.
#[tokio::test]
async fn an_opens_size_is_its_bucket_not_its_program() {
    let (f, _) = start_tls(Some("ok"), true).await;
    let with_template = |extra: usize| {
        let mut p = f.program();
        p.prompt_template = format!("{}{{{{skill}}}}\n{{{{request}}}}", "x".repeat(extra));
        f.approve(&p)
    };
    let short = with_template(0);
    let padded = skillbox_jc::client::open_body(&short).len();
    assert!(padded.is_power_of_two() && padded >= 1024 && padded >= short.to_json().len());
    // Templates of other lengths within the bucket: other programs, one size on the wire.
    let mut told_apart = 0;
    let mut same_size = 0;
    for extra in (8..=256).step_by(8) {
        let long = with_template(extra);
        if long.to_json().len() > padded {
            break;
        }
        same_size += 1;
        if skillbox_jc::client::open_body(&long).len() != padded {
            told_apart += 1;
        }
    }
    assert!(same_size > 0, "no template fits the short one's bucket");
    assert_eq!(
        told_apart, 0,
        "{told_apart} of {same_size} programs told apart by size"
    );
    // The box opens a padded body (the open attests the box first, then goes pinned).
    let (_, run) = f.open(&f.program()).await;
    assert!(!run.run_id.is_empty());
}

/// Audit P5: two honest boxes behind one URL (a TCP pass-through balancer), both attested. A
/// run opened on box A is sealed to A's run key and bound to A's TLS key; its stake, status and
/// result must go to A only — before, they went over any connection showing any key admitted
/// for the URL, so box B received the run's sealed stake and result requests.
#[tokio::test]
async fn a_runs_requests_go_to_its_own_box_not_another_behind_the_same_url() {
    let path = PathSwitch::start().await;
    let names = [path.host.clone()];
    let (a, a_key) = start_tls_named(Some("song b"), true, &names).await;
    let (b, b_key) = start_tls_named(None, true, &names).await;
    path.relay_to(&[&a.url, &b.url]);
    let f = Fixture::at(&path.url);
    let run = call_at(&f).await;
    assert_eq!(run.tls_spki_sha256.as_deref(), Some(a_key.as_str()));
    // The balancer sends the next connections to B, which is attested too: an open could land
    // there, so its key is one the URL's opens accept.
    path.send_to(1).await;
    let at_b = f.client.attest_box(&f.policy).await.expect("B attested");
    assert_eq!(at_b.tls_spki_sha256.as_deref(), Some(b_key.as_str()));
    let before = path.received(1);
    let songs = [b's'; 4000];
    let staked = f
        .stake_as_caller(&run, "which song first?", &songs, &f.caller)
        .await;
    // A handshake only (its hello, about 1.5 KiB): the sealed stake (over 4 KiB) never
    // reached B.
    let at_b = path.received(1) - before;
    assert!(at_b < 4096, "box B received {at_b} bytes of run A's stake");
    let status = f.client.status(&run.run_id).await;
    let result = f.client.send_result_once(&run.run_id, Duration::ZERO).await;
    assert_key_refused(staked, "run A's stake at box B");
    assert_key_refused(status, "run A's status at box B");
    assert_key_refused(result, "run A's result at box B");
    // Back on A, the run goes on: its requests go to the key it bound.
    path.send_to(0).await;
    f.run_all(&run, "which song first?", "You pick songs.")
        .await;
    let view = f.result(&run).await;
    assert_eq!(
        open_result(&view, &f.result_key, &run)
            .expect("caller opens")
            .answer,
        "song b"
    );
}

/// Audit P1 follow-up: a run's attestation was asked over a connection showing any key, so a
/// TLS front on the path read the run id from its request. With the box's key admitted, it is
/// asked over attested keys only; a front answering in the box's place reads no run id.
#[tokio::test]
async fn a_tls_front_on_the_path_reads_no_run_id() {
    let path = PathSwitch::start().await;
    let (real, _) = start_tls_named(None, true, std::slice::from_ref(&path.host)).await;
    let (front_url, front) = start_tls_front_capturing(&real.url).await;
    path.relay_to(&[&real.url, &front_url]);
    let f = Fixture::at(&path.url);
    let (approved, opened) = open_at(&f).await;
    let run_id = opened.opened.run_id.clone();
    // The front takes the path; the run's attestation is asked now.
    path.send_to(1).await;
    let asked = f.client.attest(&approved, &run_id, &f.policy).await;
    let paths = front.paths.lock().expect("log").clone();
    assert!(!front.read(&run_id), "the front read the run id: {paths:?}");
    assert_key_refused(asked, "the run's attestation through the front");
    // The box itself answers it.
    path.send_to(0).await;
    let run = f
        .client
        .attest(&approved, &run_id, &f.policy)
        .await
        .expect("the run verifies at its box");
    assert_eq!(run.run_id, run_id);
}
