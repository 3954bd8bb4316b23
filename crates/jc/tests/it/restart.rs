//! A box with a run store (issue 33 item 3), in process: a second `BoxCore` opened on the same
//! data dir stands for the restarted box (the first one is abandoned mid-step, its provider
//! request left hanging), and finishes every run the first had at any phase — with the same run
//! keys, so the receipt verifies against the first box's attestation. The attack half: the
//! store's files never hold a stake, a skill body or an API key in plaintext, and a tampered,
//! moved or cut row is refused with a closed code, never used and never a panic.
//! The same with real processes and kill -9 is the crash harness (`crates/cli/tests/it/crash.rs`).

use crate::support::*;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use skillbox_jc::JcError;
use skillbox_jc::attest::VerifiedRun;
use skillbox_jc::client::{BoxClient, StakeInput, open_result, seal_stake, verify_receipt};
use skillbox_jc::program::{Program, ProgramHash, Role};
use skillbox_jc::run::store::{KeyFile, RunStore};
use skillbox_jc::run::{BoxConfig, BoxCore, Phase, RunFailure, now_secs};
use skillbox_providers::{ChatRequest, Completion, FinishReason, Provider, Reply, Usage};

const BODY: &str = "BODY-SECRET-7f3a91 answer in haiku";
const REQUEST: &str = "REQUEST-SECRET-c04e22 what do I like?";
const API_KEY: &str = "sk-KEY-SECRET-5b8d0e";

/// The restart tests' provider: answers once its gate is open (a shut one never opens: the
/// box it serves is abandoned at its provider), recording every request.
fn gate(open: bool) -> Arc<Gated> {
    Gated::new(answering("answered the request"), open)
}

struct Dir {
    _tmp: tempfile::TempDir,
    path: PathBuf,
}

impl Dir {
    fn new() -> Dir {
        let tmp = tempfile::tempdir().expect("dir");
        let path = tmp.path().join("box");
        Dir { _tmp: tmp, path }
    }

    fn db(&self) -> PathBuf {
        self.path.join("runs.sqlite")
    }

    /// A box on this data dir (the store key made on first use), served on loopback.
    async fn start(&self, provider: Arc<dyn Provider>) -> (Arc<BoxCore>, BoxClient) {
        self.start_with(provider, BoxConfig::default()).await
    }

    async fn start_with(
        &self,
        provider: Arc<dyn Provider>,
        config: BoxConfig,
    ) -> (Arc<BoxCore>, BoxClient) {
        let key = KeyFile::load_or_create(&self.path.join("store.key")).expect("store key");
        let core = Arc::new(
            core_with(provider, config)
                .with_run_store(&self.db(), &key, now_secs())
                .expect("run store"),
        );
        core.resume();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(skillbox_jc::server::serve(listener, core.clone()));
        (core, BoxClient::new(&url).expect("client"))
    }

    /// Every byte under the data dir (the database, its WAL, the key file excepted).
    fn scan(&self, secrets: &[&str]) -> Vec<String> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.path).expect("data dir").flatten() {
            let p = entry.path();
            if p.file_name().is_some_and(|n| n == "store.key") {
                continue;
            }
            let bytes = std::fs::read(&p).expect("read");
            for s in secrets {
                if skillbox_testkit::leak::contains(&bytes, s) {
                    found.push(format!("{s} in {}", p.display()));
                }
            }
        }
        found
    }
}

/// A program whose owner stakes a key too (an API key is the owner's secret beside the body).
fn program(f: &Fixture) -> Program {
    let mut p = f.program();
    p.owner_inputs.key_max_bytes = 64;
    p
}

/// A party's stake: the caller's request, the owner's body, model and key.
fn sealed(run: &VerifiedRun, role: Role) -> Vec<u8> {
    let inputs = match role {
        Role::Caller => vec![
            StakeInput::bytes("request", REQUEST.as_bytes()),
            StakeInput::bytes("spotify_songs", b"song a"),
        ],
        Role::Owner => vec![
            StakeInput::bytes("body", BODY.as_bytes()),
            StakeInput::bytes("model", b"smollm2"),
            StakeInput::bytes("key", API_KEY.as_bytes()),
        ],
    };
    seal_stake(run, role, inputs).expect("seal")
}

/// Open and verify on `client`: the run the parties will follow through the restart.
async fn open(f: &Fixture, client: &BoxClient, p: &Program) -> VerifiedRun {
    let env = f.approve(p);
    let approved = skillbox_jc::dsse::approved_program(&env).expect("approved");
    let opened = client.open(&env).await.expect("open");
    client
        .attest(&approved, &opened.run_id, &f.policy)
        .await
        .expect("attest")
}

async fn stake(f: &Fixture, client: &BoxClient, run: &VerifiedRun, role: Role) {
    client
        .stake(run, role, sealed(run, role), f.key(role))
        .await
        .expect("stake");
}

async fn submit(f: &Fixture, client: &BoxClient, run: &VerifiedRun, role: Role) -> bool {
    client
        .submit(&run.run_id, &run.program_hash, role, f.key(role))
        .await
        .expect("submit")
}

/// `p` opened at `client`, both parties' stakes in and both gos given (the owner's starts it).
async fn started(f: &Fixture, client: &BoxClient, p: &Program) -> VerifiedRun {
    let run = open(f, client, p).await;
    stake(f, client, &run, Role::Owner).await;
    stake(f, client, &run, Role::Caller).await;
    assert!(!submit(f, client, &run, Role::Caller).await);
    assert!(submit(f, client, &run, Role::Owner).await);
    run
}

/// The parties' view after the restart: the answer opens and the receipt verifies against the
/// first box's attestation.
async fn answered(f: &Fixture, client: &BoxClient, run: &VerifiedRun) -> String {
    let view = client.wait_result(&run.run_id, WAIT).await.expect("result");
    assert_eq!(view.error, None);
    verify_receipt(&view, run).expect("the receipt verifies with the first box's run key");
    open_result(&view, &f.result_key, run)
        .expect("the answer opens")
        .answer
}

#[derive(Clone, Copy, Debug)]
enum At {
    Opened,
    OneStake,
    /// The caller's stake with its submit (`stake_and_submit`), nothing of the owner's yet.
    GoWithStake,
    Submitted,
    Provider,
    Finished,
}

/// The first box stops at `at`; the second, on the same data dir, finishes the run. Returns
/// how often each box asked the provider.
async fn restart_at(at: At) -> (usize, usize) {
    let f = start(None).await;
    let dir = Dir::new();
    let first = gate(matches!(at, At::Finished));
    let (_core1, c1) = dir.start(first.clone()).await;
    let run = open(&f, &c1, &program(&f)).await;
    match at {
        At::Opened => {}
        At::OneStake => stake(&f, &c1, &run, Role::Owner).await,
        At::GoWithStake => {
            let taken = c1
                .stake_and_submit(&run, Role::Caller, sealed(&run, Role::Caller), &f.caller)
                .await
                .expect("stake with submit");
            assert!(taken.submitted);
        }
        At::Submitted | At::Provider | At::Finished => {
            stake(&f, &c1, &run, Role::Owner).await;
            stake(&f, &c1, &run, Role::Caller).await;
            assert!(!submit(&f, &c1, &run, Role::Caller).await);
            if !matches!(at, At::Submitted) {
                assert!(submit(&f, &c1, &run, Role::Owner).await);
            }
        }
    }
    match at {
        At::Provider => first.wait_asked().await,
        At::Finished => {
            c1.wait_result(&run.run_id, WAIT)
                .await
                .expect("first box finished");
        }
        _ => {}
    }
    let found = dir.scan(&[BODY, REQUEST, API_KEY]);
    assert!(found.is_empty(), "{at:?}: plaintext on disk: {found:?}");
    // The restart: a new box on the same files; the first is never asked again.
    let second = gate(true);
    let (core2, c2) = dir.start(second.clone()).await;
    match at {
        At::Opened => {
            stake(&f, &c2, &run, Role::Owner).await;
            stake(&f, &c2, &run, Role::Caller).await;
            assert!(!submit(&f, &c2, &run, Role::Caller).await);
            assert!(submit(&f, &c2, &run, Role::Owner).await);
        }
        At::OneStake => {
            // The stake the first box answered is still there: a repeat is `already_staked`.
            assert_refused(
                c2.stake(&run, Role::Owner, sealed(&run, Role::Owner), &f.owner)
                    .await,
                "already_staked",
            );
            stake(&f, &c2, &run, Role::Caller).await;
            assert!(!submit(&f, &c2, &run, Role::Caller).await);
            assert!(submit(&f, &c2, &run, Role::Owner).await);
        }
        At::Submitted => {
            // The caller's submit survived: the owner's is the second one.
            assert!(submit(&f, &c2, &run, Role::Owner).await);
        }
        At::GoWithStake => {
            // The go taken with the stake was on disk before the box answered: after the
            // restart the owner's stake and submit are all the run waits for.
            let view = c2.status(&run.run_id).await.expect("status");
            assert_eq!(
                (view.staked, view.submitted),
                (vec![Role::Caller], vec![Role::Caller])
            );
            stake(&f, &c2, &run, Role::Owner).await;
            assert!(submit(&f, &c2, &run, Role::Owner).await);
        }
        At::Provider | At::Finished => {
            // Both submitted: the run is underway or done; a repeated submit changes nothing.
            let e = c2
                .submit(&run.run_id, &run.program_hash, Role::Owner, &f.owner)
                .await;
            assert!(
                e.as_ref().is_err_and(|e| remote_code(e) == "wrong_state"),
                "{at:?}: {e:?}"
            );
        }
    }
    let answer = answered(&f, &c2, &run).await;
    assert!(answer.starts_with("answered "), "{answer}");
    let status = core2.status(&run.run_id).expect("status");
    assert_eq!(status.state, Phase::Done);
    let found = dir.scan(&[BODY, REQUEST, API_KEY]);
    assert!(
        found.is_empty(),
        "{at:?}: plaintext on disk after: {found:?}"
    );
    (first.times_asked(), second.times_asked())
}

/// A run goes to the provider again only when the box died while it was there.
#[tokio::test]
async fn a_restarted_box_finishes_its_runs_from_every_phase() {
    for at in [At::Opened, At::OneStake, At::GoWithStake, At::Submitted] {
        assert_eq!(restart_at(at).await, (0, 1), "{at:?}");
    }
    assert_eq!(
        restart_at(At::Provider).await,
        (1, 1),
        "in flight when the box died: asked once more"
    );
    assert_eq!(
        restart_at(At::Finished).await,
        (1, 0),
        "the result was kept: never asked again"
    );
}

/// The disk refuses every write of a run's record (a real SQLite failure: a trigger that aborts
/// the statement, as a full disk or an I/O error would) while `on`.
fn records_refused(db: &Path, on: bool) {
    let conn = rusqlite::Connection::open(db).expect("db");
    let sql = if on {
        "CREATE TRIGGER refuse_insert BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'disk full'); END;
         CREATE TRIGGER refuse_update BEFORE UPDATE ON runs BEGIN SELECT RAISE(ABORT, 'disk full'); END;"
    } else {
        "DROP TRIGGER refuse_insert; DROP TRIGGER refuse_update;"
    };
    conn.execute_batch(sql).expect("triggers");
}

/// A go whose record the disk refused is answered `storage_failed` and not held: the run stays
/// open (the go that would have started it does not leave it running with nobody to run it),
/// and the same gos sent again once the disk takes writes start it. The same for a go sent
/// with its stake: the stake, on disk, is kept; the go is not.
#[tokio::test]
async fn a_go_the_disk_did_not_take_is_not_held_and_goes_again() {
    let f = start(None).await;
    let dir = Dir::new();
    let provider = gate(true);
    let (core, c) = dir.start(provider.clone()).await;

    // Separate submits: the first go, then the one that would start the run, each refused
    // by the disk once.
    let run = open(&f, &c, &program(&f)).await;
    stake(&f, &c, &run, Role::Owner).await;
    stake(&f, &c, &run, Role::Caller).await;
    let refused_go = |role: Role, held: Vec<Role>| {
        let (f, c, dir, run) = (&f, &c, &dir, &run);
        async move {
            records_refused(&dir.db(), true);
            assert_refused(
                c.submit(&run.run_id, &run.program_hash, role, f.key(role))
                    .await,
                "storage_failed",
            );
            let view = c.status(&run.run_id).await.expect("status");
            assert_eq!(
                (view.state, view.submitted),
                (Phase::Open, held),
                "{role:?}"
            );
            records_refused(&dir.db(), false);
        }
    };
    refused_go(Role::Caller, vec![]).await;
    assert!(!submit(&f, &c, &run, Role::Caller).await);
    refused_go(Role::Owner, vec![Role::Caller]).await;
    assert!(submit(&f, &c, &run, Role::Owner).await);
    assert!(answered(&f, &c, &run).await.starts_with("answered "));

    // The go sent with the stake that would start the run: the stake is kept, the go is not.
    let run = open(&f, &c, &program(&f)).await;
    let owner = c
        .stake_and_submit(&run, Role::Owner, sealed(&run, Role::Owner), &f.owner)
        .await
        .expect("owner's stake and go");
    assert!(owner.submitted);
    records_refused(&dir.db(), true);
    assert_refused(
        c.stake_and_submit(&run, Role::Caller, sealed(&run, Role::Caller), &f.caller)
            .await,
        "storage_failed",
    );
    let view = c.status(&run.run_id).await.expect("status");
    assert_eq!(
        (view.state, view.staked.len(), view.submitted),
        (Phase::Open, 2, vec![Role::Owner])
    );
    records_refused(&dir.db(), false);
    assert!(submit(&f, &c, &run, Role::Caller).await);
    assert!(answered(&f, &c, &run).await.starts_with("answered "));
    assert_eq!(provider.times_asked(), 2);
    drop(core);
}

fn rows(db: &Path, sql: &str) -> Vec<(String, Vec<u8>)> {
    let conn = rusqlite::Connection::open(db).expect("db");
    let mut q = conn.prepare(sql).expect("query");
    q.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect()
}

fn set(db: &Path, sql: &str, blob: &[u8], id: &str) {
    let conn = rusqlite::Connection::open(db).expect("db");
    conn.execute(sql, rusqlite::params![blob, id])
        .expect("write");
}

/// Flipped, cut and swapped rows are refused with closed codes: a run whose record does not
/// open is spent (`run_spent`) and its rows removed; a run whose stake does not open fails
/// `interrupted` with a signed receipt. The box starts either way; a store under another
/// key does not open at all.
#[tokio::test]
async fn a_tampered_persisted_run_is_refused_not_used() {
    let f = start(None).await;
    let dir = Dir::new();
    let (core1, c1) = dir.start(gate(false)).await;
    let mut runs = Vec::new();
    for _ in 0..4 {
        let run = open(&f, &c1, &program(&f)).await;
        stake(&f, &c1, &run, Role::Owner).await;
        runs.push(run);
    }
    drop(core1);
    let db = dir.db();
    let records = rows(&db, "SELECT id, sealed FROM runs ORDER BY id");
    let record = |id: &str| {
        records
            .iter()
            .find(|(i, _)| i == id)
            .expect("row")
            .1
            .clone()
    };
    // 0: a bit flipped in its record. 1: its record cut short. 2 and 3: records swapped.
    let mut flipped = record(&runs[0].run_id);
    let mid = flipped.len() / 2;
    flipped[mid] ^= 1;
    set(
        &db,
        "UPDATE runs SET sealed = ?1 WHERE id = ?2",
        &flipped,
        &runs[0].run_id,
    );
    set(
        &db,
        "UPDATE runs SET sealed = ?1 WHERE id = ?2",
        &record(&runs[1].run_id)[..10],
        &runs[1].run_id,
    );
    let (r2, r3) = (record(&runs[2].run_id), record(&runs[3].run_id));
    set(
        &db,
        "UPDATE runs SET sealed = ?1 WHERE id = ?2",
        &r3,
        &runs[2].run_id,
    );
    set(
        &db,
        "UPDATE runs SET sealed = ?1 WHERE id = ?2",
        &r2,
        &runs[3].run_id,
    );

    // A fifth run: sound record, its owner stake flipped.
    let (core2, c2) = dir.start(gate(true)).await;
    for run in &runs {
        let e = core2.status(&run.run_id).expect_err("refused");
        assert!(matches!(e, JcError::RunSpent(_)), "{e}");
    }
    assert!(
        rows(&db, "SELECT id, sealed FROM runs").is_empty(),
        "refused rows stay"
    );
    let run = open(&f, &c2, &program(&f)).await;
    stake(&f, &c2, &run, Role::Owner).await;
    drop(core2);
    let stakes = rows(&db, "SELECT run_id, sealed FROM stakes");
    assert_eq!(stakes.len(), 1);
    let mut bad = stakes[0].1.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x80;
    set(
        &db,
        "UPDATE stakes SET sealed = ?1 WHERE run_id = ?2",
        &bad,
        &run.run_id,
    );
    let (_core3, c3) = dir.start(gate(true)).await;
    let view = c3
        .wait_result(&run.run_id, WAIT)
        .await
        .expect("a failed result");
    assert_eq!(view.error, Some(RunFailure::Interrupted));
    verify_receipt(&view, &run).expect("signed by the run's key all the same");

    // Another storage key: the whole store is refused, the box does not start on it.
    std::fs::remove_file(dir.path.join("store.key")).expect("remove key");
    let key = KeyFile::load_or_create(&dir.path.join("store.key")).expect("a new key");
    let e = core_with(gate(true), BoxConfig::default())
        .with_run_store(&db, &key, now_secs())
        .err()
        .expect("refused");
    assert_eq!(e.code(), "storage_failed");
}

/// Rewrite a run's record as the box would (form 3, sealed under the storage key the test
/// owns), one version on: `edit` changes its JSON; `cut` writes only the JSON's first half.
fn rewrite_record(
    store: &RunStore,
    id: &str,
    edit: impl FnOnce(&mut serde_json::Value),
    cut: bool,
) {
    let run = store
        .load()
        .expect("load")
        .into_iter()
        .find(|r| r.id == id)
        .expect("row");
    let bytes = run.record.expect("the row opens");
    assert_eq!(bytes[0], 3, "the record form this test writes");
    let len = u32::from_be_bytes(bytes[66..70].try_into().expect("4 bytes")) as usize;
    let mut record: serde_json::Value =
        serde_json::from_slice(&bytes[70..70 + len]).expect("record JSON");
    let version = record["version"].as_u64().expect("version") + 1;
    record["version"] = version.into();
    edit(&mut record);
    let mut json = serde_json::to_vec(&record).expect("JSON");
    if cut {
        json.truncate(json.len() / 2);
    }
    let mut out = bytes[..66].to_vec();
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&bytes[70 + len..]);
    store.put_run(id, version, &out).expect("put");
}

/// A run record's program envelope.
fn envelope_of(record: &serde_json::Value) -> skillbox_jc::dsse::Envelope {
    serde_json::from_value(record["envelope"].clone()).expect("envelope")
}

/// An edit for [`rewrite_record`]: the record's program names `skillbox.prompt/v1` (what the
/// box's previous build opened), signed by `signers`.
fn older_template<'a>(
    signers: &'a [&'a ed25519_dalek::SigningKey],
) -> impl FnOnce(&mut serde_json::Value) + 'a {
    move |record| {
        let mut p = skillbox_jc::dsse::approved_program(&envelope_of(record))
            .expect("approved")
            .program;
        p.prompt_template = "skillbox.prompt/v1".into();
        let mut env = skillbox_jc::dsse::sign_program(&p, signers[0]).expect("sign");
        for key in &signers[1..] {
            env.sign(key).expect("sign");
        }
        record["envelope"] = serde_json::to_value(env).expect("envelope");
    }
}

/// R3 (review 22b): a box upgraded across the prompt-template change reads back runs its
/// previous build opened under `skillbox.prompt/v1`. Their rows open under the storage key,
/// so nothing was tampered with: an open run fails `prompt_template_unknown` with a receipt
/// signed by its run key (what both nodes polling it get), never reaching the provider; a
/// finished one is served as it was. A row whose bytes are wrong although sealed right (a
/// program only one party signed, a record cut short) is still refused as tampered
/// (`run_spent`), and the older program opened afresh is still refused at open.
#[tokio::test]
async fn a_stored_run_of_an_older_template_fails_with_its_code_not_as_tampered() {
    let f = start(None).await;
    let dir = Dir::new();
    let (core1, c1) = dir.start(gate(true)).await;
    let waiting = open(&f, &c1, &program(&f)).await;
    stake(&f, &c1, &waiting, Role::Owner).await;
    let done = started(&f, &c1, &program(&f)).await;
    answered(&f, &c1, &done).await;
    let one_signer = open(&f, &c1, &program(&f)).await;
    let cut = open(&f, &c1, &program(&f)).await;
    drop(core1);

    // The rows as the previous build wrote them, sealed under the box's own storage key.
    let key = KeyFile::load_or_create(&dir.path.join("store.key")).expect("store key");
    let store = RunStore::open(&dir.db(), &key).expect("store");
    let both = [&f.caller, &f.owner];
    let mut older_env = None;
    rewrite_record(
        &store,
        &waiting.run_id,
        |record| {
            older_template(&both)(record);
            older_env = Some(envelope_of(record));
        },
        false,
    );
    let older_env = older_env.expect("rewritten");
    rewrite_record(&store, &done.run_id, older_template(&both), false);
    rewrite_record(
        &store,
        &one_signer.run_id,
        older_template(&[&f.caller]),
        false,
    );
    rewrite_record(&store, &cut.run_id, |_| {}, true);
    drop(store);

    let second = gate(true);
    let (core2, c2) = dir.start(second.clone()).await;
    let view = c2
        .wait_result(&waiting.run_id, WAIT)
        .await
        .expect("the run fails, with a result both nodes fetch");
    assert_eq!(view.error, Some(RunFailure::PromptTemplateUnknown));
    assert!(view.sealed_output.is_none());
    // Signed by the run's key, for the program it was opened under.
    let opened_under = VerifiedRun {
        program_hash: ProgramHash::of(&older_env.payload_bytes().expect("payload")),
        ..waiting.clone()
    };
    verify_receipt(&view, &opened_under).expect("the receipt verifies");
    assert_eq!(second.times_asked(), 0, "a run of the older template ran");
    assert_eq!(answered(&f, &c2, &done).await, "answered the request");
    for run in [&one_signer, &cut] {
        let e = core2.status(&run.run_id).expect_err("refused");
        assert!(matches!(e, JcError::RunSpent(_)), "{e}");
    }
    // Read back from the store, the older program is still refused at open.
    assert_refused(c2.open(&older_env).await, "prompt_template_unknown");
}

/// The store key file is made 0600, and the box refuses one of the wrong length.
#[test]
fn the_store_key_file_is_private_and_checked() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("box").join("store.key");
    KeyFile::load_or_create(&path).expect("made");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    KeyFile::load_or_create(&path).expect("read back");
    std::fs::write(&path, b"short").expect("write");
    assert!(KeyFile::load_or_create(&path).is_err());

    // In a folder others may write (a `--store-key-file` there), someone made the old
    // predictable temporary names first, one a file they can read, one a link to another
    // file: neither receives a key.
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).expect("dir");
    let planted = shared.join("store.tmp");
    std::fs::write(&planted, b"theirs").expect("plant");
    let elsewhere = shared.join("elsewhere");
    std::fs::write(&elsewhere, b"theirs").expect("plant");
    #[cfg(unix)]
    std::os::unix::fs::symlink(&elsewhere, shared.join("store.key.tmp")).expect("link");
    KeyFile::load_or_create(&shared.join("store.key")).expect("made beside them");
    for file in [&planted, &elsewhere] {
        assert_eq!(
            std::fs::read(file).expect("read"),
            b"theirs",
            "{}",
            file.display()
        );
    }
    let key = std::fs::read(shared.join("store.key")).expect("the key");
    assert_eq!(key.len(), 32);
    let left: Vec<_> = std::fs::read_dir(&shared)
        .expect("list")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") && n != "store.tmp" && n != "store.key.tmp")
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// The box keeps at most `max_kept_runs` (at least twice `max_runs`) runs at once, finished
/// ones included, across a restart too: one more open is refused `busy`, unless a finished run
/// was fetched twice (both parties), which then makes room.
#[tokio::test]
async fn kept_runs_are_bounded_and_one_more_open_is_busy() {
    let f = start(None).await;
    let dir = Dir::new();
    let config = BoxConfig {
        max_runs: 1,
        max_kept_runs: 2,
        ..BoxConfig::default()
    };
    let (_core1, c1) = dir.start_with(gate(true), config.clone()).await;
    let mut runs = Vec::new();
    for _ in 0..2 {
        let run = started(&f, &c1, &program(&f)).await;
        answered(&f, &c1, &run).await;
        runs.push(run);
    }
    let (first, second) = (&runs[0], &runs[1]);
    assert_refused(c1.open(&f.approve(&program(&f))).await, "busy");
    let (_core2, c2) = dir.start_with(gate(true), config).await;
    assert_refused(c2.open(&f.approve(&program(&f))).await, "busy");
    // Both parties fetched the first run's result: it makes room, the other is kept.
    c2.result(&first.run_id).await.expect("caller fetches");
    c2.result(&first.run_id).await.expect("owner fetches");
    c2.open(&f.approve(&program(&f)))
        .await
        .expect("room made by a run fetched twice");
    assert_refused(c2.result(&first.run_id).await, "run_spent");
    c2.result(&second.run_id).await.expect("the other is kept");
}

/// A run store written before the record's form 2 (the sealed answer in base64 inside the
/// record's JSON, where form 2 keeps it raw after it) is still read: a finished run written in
/// form 1 is served the very bytes it was served before the restart.
#[tokio::test]
async fn a_finished_run_in_the_older_record_form_is_still_served() {
    use base64::Engine as _;
    let f = start(None).await;
    let dir = Dir::new();
    let (core1, c1) = dir.start(gate(true)).await;
    let run = started(&f, &c1, &program(&f)).await;
    answered(&f, &c1, &run).await;
    let served = core1.result_json(&run.run_id).expect("served");

    // The same record in form 1, written as a newer version of the row.
    let key = KeyFile::load_or_create(&dir.path.join("store.key")).expect("store key");
    let store = RunStore::open(&dir.db(), &key).expect("store");
    let loaded = store.load().expect("load");
    let record = loaded[0].record.as_ref().expect("the record opens");
    assert_eq!(record[0], 3, "written in form 3");
    let json_len = u32::from_be_bytes(record[66..70].try_into().expect("4 bytes")) as usize;
    let mut json: serde_json::Value =
        serde_json::from_slice(&record[70..70 + json_len]).expect("record JSON");
    let blobs = &record[70 + json_len..];
    assert_eq!(blobs[0], 1, "the sealed answer is there");
    let len = u64::from_be_bytes(blobs[1..9].try_into().expect("8 bytes")) as usize;
    assert_eq!(
        &blobs[9 + len..],
        &[0u8; 9][..],
        "no owner note: an unguarded program"
    );
    json["finished"]["sealed_output"] = base64::engine::general_purpose::STANDARD
        .encode(&blobs[9..9 + len])
        .into();
    let version = json["version"].as_u64().expect("version") + 1;
    json["version"] = version.into();
    let mut old = vec![1u8];
    old.extend_from_slice(&record[1..66]);
    old.extend_from_slice(&serde_json::to_vec(&json).expect("json"));
    store
        .put_run(&run.run_id, version, &old)
        .expect("form 1 written");
    drop(store);

    let (core2, c2) = dir.start(gate(true)).await;
    assert_eq!(core2.result_json(&run.run_id).expect("served"), served);
    assert!(answered(&f, &c2, &run).await.starts_with("answered "));
}

/// A guarded run's owner note is padded to its body's size bucket (within the program's body
/// limit, here 1 MiB) and kept for an hour: the run store keeps what makes it again (its seal's seed, what it says)
/// instead of its bytes, and the box lets go of the bytes once the owner fetched them. Before the
/// restart, fetched again, and after the restart, the note is the same sealed bytes, which the
/// receipt binds and the owner opens; a record of the older form with the note itself is still
/// served.
#[tokio::test]
async fn a_guarded_runs_owner_note_is_made_again_the_same_not_kept() {
    use skillbox_jc::client::open_owner_note;
    let f = start(None).await;
    let dir = Dir::new();
    let (core1, c1) = dir.start(gate(true)).await;
    let mut p = program(&f);
    p.owner_inputs.body_max_bytes = 1 << 20;
    p.guard = Some(skillbox_guard::GuardSpec {
        action: skillbox_guard::Action::Withhold,
        ..skillbox_guard::GuardSpec::default_for(false)
    });
    p.receipt = skillbox_jc::program::ReceiptSpec::for_guard(true);
    let run = started(&f, &c1, &p).await;
    let first = c1.wait_result(&run.run_id, WAIT).await.expect("result");
    let receipt = verify_receipt(&first, &run).expect("the receipt verifies");
    let note = first.owner_note.clone().expect("a guarded run's note");
    // Padded to the one small length of every note, not to the 1 MiB limit (257 KiB).
    let plain = skillbox_jc::run::OWNER_NOTE_PADDED + 1;
    assert_eq!(
        note.len() as u64,
        skillbox_jc::seal::sealed_len(plain).div_ceil(3) * 4,
        "padded to the fixed note length"
    );
    // The same note and answer, and the owner opens the note.
    let same = |view: &skillbox_jc::run::ResultView, when: &str| {
        assert_eq!(view.owner_note.as_ref(), Some(&note), "{when}");
        assert_eq!(view.sealed_output, first.sealed_output, "{when}");
        assert_eq!(view.receipt, first.receipt, "{when}");
        let opened =
            open_owner_note(view, &receipt, &note_key(&f.owner), &run).expect("the owner opens it");
        assert!(opened.is_some(), "{when}");
    };
    same(&first, "first fetch");
    // Its bytes were let go at the first fetch: this one makes them again.
    let again = c1.wait_result(&run.run_id, WAIT).await.expect("result");
    same(&again, "made again");
    drop(core1);

    let records = rows(&dir.db(), "SELECT id, sealed FROM runs");
    assert_eq!(records.len(), 1);
    assert!(
        records[0].1.len() < 32 * 1024,
        "the finished record holds the note: {} bytes",
        records[0].1.len()
    );
    let (core2, c2) = dir.start(gate(true)).await;
    let after = c2.wait_result(&run.run_id, WAIT).await.expect("result");
    same(&after, "after the restart");
    drop(core2);

    // Form 2: the sealed note itself after the sealed answer.
    let key = KeyFile::load_or_create(&dir.path.join("store.key")).expect("store key");
    let store = RunStore::open(&dir.db(), &key).expect("store");
    let loaded = store.load().expect("load");
    let record = loaded[0].record.as_ref().expect("the record opens");
    assert_eq!(record[0], 3);
    let json_len = u32::from_be_bytes(record[66..70].try_into().expect("4 bytes")) as usize;
    let mut json: serde_json::Value =
        serde_json::from_slice(&record[70..70 + json_len]).expect("record JSON");
    let blobs = &record[70 + json_len..];
    let len = u64::from_be_bytes(blobs[1..9].try_into().expect("8 bytes")) as usize;
    let sealed_note = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(&note)
            .expect("base64")
    };
    let version = json["version"].as_u64().expect("version") + 1;
    json["version"] = version.into();
    let json = serde_json::to_vec(&json).expect("json");
    let mut old = vec![2u8];
    old.extend_from_slice(&record[1..66]);
    old.extend_from_slice(&(json.len() as u32).to_be_bytes());
    old.extend_from_slice(&json);
    old.extend_from_slice(&blobs[..9 + len]);
    old.push(1);
    old.extend_from_slice(&(sealed_note.len() as u64).to_be_bytes());
    old.extend_from_slice(&sealed_note);
    store
        .put_run(&run.run_id, version, &old)
        .expect("form 2 written");
    drop(store);
    let (_core3, c3) = dir.start(gate(true)).await;
    let form2 = c3.wait_result(&run.run_id, WAIT).await.expect("result");
    same(&form2, "from a form 2 record");
}

/// A storage key only the measured box could have (what a platform sealing key would be).
struct PlatformSealed;
impl skillbox_jc::run::store::StorageKey for PlatformSealed {
    fn key_bytes(&self) -> skillbox_jc::Result<zeroize::Zeroizing<[u8; 32]>> {
        Ok(zeroize::Zeroizing::new([5u8; 32]))
    }
    fn sealed_by_platform(&self) -> bool {
        true
    }
}

/// The host of a box with hardware isolation reads its data dir: a run store there under a key
/// file beside it would hand the host every opened stake and run key. Such a box is refused a
/// run store under a key its host can read — nothing is written — and takes one only under a
/// key its platform seals.
#[test]
fn a_box_with_hardware_isolation_keeps_no_run_store_its_host_can_read() {
    let dir = Dir::new();
    let key = KeyFile::load_or_create(&dir.path.join("store.key")).expect("store key");
    let hardware = || {
        skillbox_testkit::box_fixture::core_attested_by(
            Arc::new(SaysHardware(skillbox_testkit::box_fixture::dev_attester())),
            gate(true),
            BoxConfig::default(),
        )
    };
    let e = hardware()
        .with_run_store(&dir.db(), &key, now_secs())
        .err()
        .expect("a key file refused on a hardware box");
    assert_eq!(e.code(), "storage_failed");
    assert!(
        !dir.db().exists(),
        "a run store was made before the refusal"
    );
    hardware()
        .with_run_store(&dir.db(), &PlatformSealed, now_secs())
        .expect("a platform-sealed key is taken");
    // Insecure-dev (no secret kept from anyone) keeps its key file store, as before.
    core_with(gate(true), BoxConfig::default())
        .with_run_store(&dir.path.join("dev.sqlite"), &key, now_secs())
        .expect("insecure-dev keeps a run store");
}

/// A model that repeats the first half of its instructions (the skill body) word for word.
struct Repeat;

/// [`Repeat`], counting requests.
fn repeating() -> Arc<Gated> {
    Gated::new(Arc::new(Repeat), true)
}

impl Provider for Repeat {
    fn complete<'a>(&'a self, request: ChatRequest, _key: Option<&'a str>) -> Reply<'a> {
        Box::pin(async move {
            Ok(Completion {
                text: skillbox_testkit::prompt::body_of(&request.system)
                    .split_whitespace()
                    .take(16)
                    .collect::<Vec<_>>()
                    .join(" "),
                finish: FinishReason::Stop,
                usage: Usage::default(),
            })
        })
    }
}

/// A guarded program of the skill `shed-secrets-skill` whose per-answer limits are off, so
/// only the owner's day limits stand.
fn day_program(f: &Fixture) -> Program {
    let mut p = f.program();
    p.skill.name = "shed-secrets-skill".into();
    p.guard = Some(skillbox_guard::GuardSpec {
        threshold_permille: 1000,
        max_copied_words: 0,
        ..skillbox_guard::GuardSpec::default_for(false)
    });
    p.receipt = skillbox_jc::program::ReceiptSpec::for_guard(true);
    p
}

/// A run of `p` (as a new call: a program runs once) at the box of `client`, the owner staking
/// [`SHED_BODY`] with day limits of half the body and half a secret: its result.
async fn day_run(f: &Fixture, client: BoxClient, p: Program) -> skillbox_jc::run::ResultView {
    let run = day_submit(f, &client, p).await;
    client.wait_result(&run.run_id, WAIT).await.expect("result")
}

/// [`day_run`] up to both submits, without waiting for the result.
async fn day_submit(f: &Fixture, client: &BoxClient, p: Program) -> VerifiedRun {
    let limits = skillbox_jc::day::DayLimits {
        coverage_permille: 500,
        canary_coverage_permille: 500,
    }
    .to_bytes();
    let p = Program {
        call_id: format!("call-{}", skillbox_jc::client::new_nonce()),
        ..p
    };
    let run = open(f, client, &p).await;
    let caller = f.caller_stake(&run, REQUEST, b"song a");
    let owner = f.owner_stake_with(&run, SHED_BODY, Some(&limits));
    for (role, sealed) in [(Role::Caller, caller), (Role::Owner, owner)] {
        client
            .stake(&run, role, sealed, f.key(role))
            .await
            .expect("stake");
    }
    submit(f, client, &run, Role::Caller).await;
    submit(f, client, &run, Role::Owner).await;
    run
}

/// Whoever reads the store's file between runs (the host) sees a day book row written for an
/// answer that carried nothing of the body as for one that carried half: a row written only
/// when an answer covered something would tell it that the answer did.
#[tokio::test]
async fn the_day_book_is_written_whether_or_not_the_answer_carried_anything() {
    let f = start(None).await;
    let dir = Dir::new();
    let (_core, client) = dir.start(gate(true)).await;
    let view = day_run(&f, client, day_program(&f)).await;
    assert_eq!(view.error, None);
    let day_rows = rows(&dir.db(), "SELECT hex(row), sealed FROM day_book");
    assert_eq!(
        day_rows.len(),
        1,
        "no row for an answer that carried nothing"
    );
}

/// A skill body of made-up words (nothing a canary could be), 32 of them: two to a region.
const SHED_BODY: &str = "kalomi nupera sitove zubade figohu kalonu mipera sitozu vebade \
    fihugo lomika peranu tosive badezu gohufi nukalo ramipe vesito dezuba hufigo kamilo \
    penura siveto bazude fighou lokami nupesa tovesi zubeda figuho kanolu mirape";

/// The day book is on disk with the run's result: a caller whose released answer took half
/// the body (the guard's per-answer limits off, so only the day limits stand) is refused
/// `coverage_exceeded` by the restarted box too, its provider never asked. Without the book in
/// the store, a restart (what a box operator can cause at will) would give every caller a
/// fresh day. The file names neither party nor the skill.
#[tokio::test]
async fn a_restarted_box_still_refuses_a_caller_past_the_day_limits() {
    let f = start(None).await;
    let dir = Dir::new();
    let p = day_program(&f);
    let go = |client: BoxClient, p: Program| day_run(&f, client, p);
    let first = repeating();
    let (core1, c1) = dir.start(first.clone()).await;
    let view = go(c1, p.clone()).await;
    assert_eq!(view.error, None, "the first answer is released");
    assert_eq!(first.times_asked(), 1);
    // The first box is gone (as killed: nothing more is written).
    drop(core1);

    let second = repeating();
    let (_core2, c2) = dir.start(second.clone()).await;
    let view = go(c2, p.clone()).await;
    assert_eq!(view.error, Some(RunFailure::CoverageExceeded));
    assert_eq!(second.times_asked(), 0, "the provider was asked");

    let owner = hex::encode(f.owner.verifying_key().to_bytes());
    let caller = hex::encode(f.caller.verifying_key().to_bytes());
    let owner_raw = f.owner.verifying_key().to_bytes();
    let found = dir.scan(&["shed-secrets-skill", &owner, &caller]);
    assert!(found.is_empty(), "the store names the parties: {found:?}");
    for entry in std::fs::read_dir(&dir.path).expect("data dir").flatten() {
        let bytes = std::fs::read(entry.path()).expect("read");
        assert!(
            !bytes.windows(32).any(|w| w == owner_raw),
            "{} holds the owner's key",
            entry.path().display()
        );
    }
    let day_rows = rows(&dir.db(), "SELECT hex(row), sealed FROM day_book");
    assert_eq!(day_rows.len(), 1);
    drop(_core2);

    // A flipped row does not open: refused and dropped at start, never a panic (a host that
    // can write the file could as well delete it: no rollback protection, as for runs).
    let mut flipped = day_rows[0].1.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    set(
        &dir.db(),
        "UPDATE day_book SET sealed = ?1 WHERE hex(row) = ?2",
        &flipped,
        &day_rows[0].0,
    );
    let third = repeating();
    let (_core3, c3) = dir.start(third.clone()).await;
    assert!(rows(&dir.db(), "SELECT hex(row), sealed FROM day_book").is_empty());
    let view = go(c3, p.clone()).await;
    assert_eq!(view.error, None);
    assert_eq!(third.times_asked(), 1);
}

/// Review F3 through a restart: two runs of one (owner, caller, skill), the first held at the
/// provider, the second submitted meanwhile — it waits for the first's count and never
/// reaches the provider. The box restarts with both running; its marks are memory only, so
/// the resumed runs take theirs anew, one at a time: one is answered (half the body), the
/// other is checked against it and refused, the provider asked once. A third box reads the
/// counted tally back (the day rows of a key are written one run at a time, so the last row
/// written is the newest tally) and refuses a fresh run.
#[tokio::test]
async fn overlapping_runs_of_one_key_resume_one_at_a_time_after_a_restart() {
    let f = start(None).await;
    let dir = Dir::new();
    let p = || Program {
        call_id: format!("call-{}", skillbox_jc::client::new_nonce()),
        ..day_program(&f)
    };
    let held = gate(false);
    let (_core1, c1) = dir.start(held.clone()).await;
    let first = day_submit(&f, &c1, p()).await;
    held.wait_asked().await;
    let second = day_submit(&f, &c1, p()).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        held.times_asked(),
        1,
        "the second run of the key went to the provider while the first was there"
    );

    // The restart: the first box is never asked again.
    let repeat = repeating();
    let (core2, c2) = dir.start(repeat.clone()).await;
    let mut errors = Vec::new();
    for run in [&first, &second] {
        let view = c2.wait_result(&run.run_id, WAIT).await.expect("result");
        errors.push(view.error);
    }
    errors.sort_by_key(|e| e.is_some());
    assert_eq!(errors, vec![None, Some(RunFailure::CoverageExceeded)]);
    assert_eq!(repeat.times_asked(), 1, "both were asked");
    drop(core2);

    let third = repeating();
    let (_core3, c3) = dir.start(third.clone()).await;
    let view = day_run(&f, c3, p()).await;
    assert_eq!(view.error, Some(RunFailure::CoverageExceeded));
    assert_eq!(third.times_asked(), 0);
}
