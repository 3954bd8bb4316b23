//! `skillbox demo`: a box and two nodes on loopback (temporary data dirs), a `provider: local`
//! skill on the owner, a private source on the caller, one call end to end through the box with
//! the embedded model. Every part is the real one: HTTP box with insecure-dev attestation,
//! libp2p between the nodes, SQLite stores, HPKE stakes; only the processes are shared.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use skillbox_jc::attest::{Attester, InsecureDevAttester};
use skillbox_jc::registry::ProviderRegistry;
use skillbox_jc::run::{BoxConfig, BoxCore};
use skillbox_node::{Config, DataDir, Node};
use skillbox_providers::local::{self, LocalOptions, LocalProvider};

/// The demo's skill, tuned for the embedded 135M model: it answers a short, concrete question
/// well (a one-sentence description), while longer instructions, worked examples and open
/// questions ("what do I like, who next?") made it fill templates ("I enjoy [genre]"), echo the
/// prompt's tags or invent artists. Measured candidates and their answers: issue 29's note.
const SKILL: &str = "---
name: song-mood
description: Describes in one sentence the mood of someone's listening history. Use when asked what mood or feel a person's music has.
provider: local
requiredSources: spotify_songs
license: Apache-2.0
---
You are a helpful assistant who knows music. The user's songs are in the source block. Answer briefly.
";
const SKILL_NAME: &str = "song-mood";
const SOURCE_NAME: &str = "spotify_songs";
const SOURCE: &str = "Radiohead - Weird Fishes\nBonobo - Kerala\nMassive Attack - Teardrop\n\
Portishead - Roads\nThom Yorke - Dawn Chorus\nBoards of Canada - Roygbiv\n";
const REQUEST: &str = "Describe the mood of these songs in one sentence.";
/// The answer's cap (bytes; about a third as many tokens): room for a few sentences from a larger
/// model, and a short stop for a small one that rambles.
const ANSWER_MAX_BYTES: u64 = 768;
/// The skill's body allowance in tokens: room for its ~25-token body in any model's tokenizer
/// (`--model`), and a prompt the 135M model reads in a few seconds instead of the default's ~20.
const BODY_MAX_TOKENS: u64 = 64;

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Keep the nodes' data dirs here instead of a temporary dir (to look at them afterwards).
    #[arg(long)]
    pub keep: Option<std::path::PathBuf>,
    /// Run the box's `local` provider on this instruct GGUF instead of the embedded SmolLM2-135M
    /// (any llama.cpp chat model with a chat template: a 0.5-3B instruct model answers far
    /// better, and slower). Never fetched or replaced; a missing or unreadable file stops the
    /// demo before anything starts.
    #[arg(long, value_name = "GGUF")]
    pub model: Option<std::path::PathBuf>,
}

/// A node running in this process, and how to reach its API.
struct RunningNode {
    /// Over the node's socket (`api.sock`): the operator's token goes only there.
    http: reqwest::Client,
    token: String,
    peer_id: String,
    listen: Vec<String>,
}

async fn start_node(
    dir: &Path,
    box_url: &str,
    bootstrap: Vec<String>,
) -> anyhow::Result<RunningNode> {
    let mut config = Config::on_loopback(box_url, bootstrap);
    config.schedules.advertise_secs = 2;
    config.schedules.board_ttl_secs = 6;
    // A short answer: the embedded model runs on the CPU.
    config.calls.output_max_bytes = ANSWER_MAX_BYTES;
    let dd = DataDir::new(dir);
    dd.init(&config)
        .with_context(|| format!("initialising {}", dir.display()))?;
    let token = dd.load_api_token()?;
    let mut node = Node::open(dir)?;
    let peers = node.start_peers().await?;
    node.start_calls()?;
    let listener = node.bind(None).await?;
    tokio::spawn(async move {
        if let Err(e) = node.serve(listener, std::future::pending()).await {
            eprintln!("node stopped: {e}");
        }
    });
    // Loopback nodes only, through their sockets: no proxy from the environment.
    let http = reqwest::Client::builder()
        .unix_socket(dd.api_socket())
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .context("HTTP client")?;
    Ok(RunningNode {
        http,
        token,
        peer_id: peers.peer_id.clone(),
        listen: peers
            .listen_addrs
            .iter()
            .map(|a| format!("{a}/p2p/{}", peers.peer_id))
            .collect(),
    })
}

/// The demo's requests to its nodes.
struct Api;

impl Api {
    async fn call(
        &self,
        node: &RunningNode,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<Value> {
        let mut req = node
            .http
            .request(
                method,
                format!("{}{path}", skillbox_reach::backend::SOCKET_BASE),
            )
            .bearer_auth(&node.token);
        if let Some((ct, bytes)) = body {
            req = req.header("content-type", ct).body(bytes);
        }
        let resp = req.send().await.context("calling a demo node")?;
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!("{path}: {status}: {}", v["message"].as_str().unwrap_or(""));
        }
        Ok(v)
    }
}

pub fn run(global: &crate::Global, args: DemoArgs) -> anyhow::Result<ExitCode> {
    // The nodes' keys, tokens and config go under `--keep`, and the demo then runs what it
    // finds there: a dir another user may write to or swap would run their config and keys.
    // Made first (so a dir about to be made is judged by where it sits), then checked.
    if let Some(keep) = &args.keep {
        crate::own_dir::make_private("data dir", keep)?;
    }
    let model = match &args.model {
        // The user's own model: never fetched or replaced; a wrong path is said before anything
        // starts (a file that is no GGUF is said when the box loads it, below).
        Some(path) => match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() => path.clone(),
            Ok(_) => bail!("--model {}: not a file (give a .gguf file)", path.display()),
            Err(_) => bail!("--model {}: no such file", path.display()),
        },
        None => {
            let path = local::default_model_path(&global.data_dir());
            if !path.is_file() {
                // pip runs in the data dir and the model every box loads lands there: not in
                // one another user may write to or swap.
                crate::own_dir::make_private("data dir", &global.data_dir())?;
                say!("fetching the embedded model (SmolLM2-135M-Instruct, ~100 MB) ...");
                local::fetch_model(&global.data_dir()).context("fetching the embedded model")?;
            }
            path
        }
    };
    let tmp = tempfile::tempdir().context("temporary dir")?;
    let root = args.keep.clone().unwrap_or_else(|| tmp.path().to_owned());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let code = rt.block_on(demo(global, &root, &model))?;
    // The nodes and the box run on this runtime: stop them before the dirs go.
    rt.shutdown_timeout(Duration::from_secs(2));
    Ok(code)
}

async fn demo(_global: &crate::Global, root: &Path, model: &Path) -> anyhow::Result<ExitCode> {
    let t0 = Instant::now();
    let step = |what: &str| say!("[{:>6.2}s] {what}", t0.elapsed().as_secs_f64());

    // 1. The model, then the box. Two generations at once: the output guard's default
    // (`regenerate`) asks the model twice on every run, the answer and a neutral round, side by
    // side (one at a time, the second waited for the first's held answer). The model is loaded
    // before anything starts, so a file that is no usable chat model stops the demo at once,
    // saying why.
    let local = Arc::new(LocalProvider::with_options(
        model.to_owned(),
        LocalOptions {
            parallel: 2,
            ..LocalOptions::default()
        },
    ));
    let loaded = local
        .model()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("loading the model (an instruct GGUF with a chat template)")?;
    step(&format!(
        "model {} loaded ({} threads, {} tokens of context)",
        model.display(),
        loaded.threads(),
        loaded.context_tokens()
    ));
    let attester: Arc<dyn Attester> =
        Arc::new(InsecureDevAttester::for_current_exe().context("measuring this executable")?);
    let mut providers = ProviderRegistry::new();
    providers.register_local(local);
    let core = Arc::new(BoxCore::new(
        attester.clone(),
        providers,
        BoxConfig {
            // Greedy decoding: the same question gets the same answer each run, and the 135M
            // model stays on the question (sampling at 0.2 gave the same sentence or a near one;
            // higher temperatures wandered off it).
            temperature: 0.0,
            ..BoxConfig::default()
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the box")?;
    let box_url = format!("http://{}", listener.local_addr().context("box address")?);
    tokio::spawn(async move {
        if let Err(e) = skillbox_jc::server::serve(listener, core).await {
            eprintln!("box stopped: {e}");
        }
    });
    step(&format!(
        "box at {box_url}: platform {} (NO hardware isolation), measurement {}…",
        attester.platform(),
        &attester.measurement()[..16]
    ));

    // 2. Two nodes: the owner of the skill, and a caller that bootstraps from it.
    let owner = start_node(&root.join("owner"), &box_url, vec![]).await?;
    step(&format!("owner node {} up", owner.peer_id));
    let api = Api;
    use reqwest::Method;
    // 3. The owner installs a `provider: local` skill; its body goes to the owner's source store.
    //    Before the caller starts, so the first advert the caller reads is the one with the
    //    allowance below (a call built from an older advert is refused `program_mismatch`).
    let imported = api
        .call(
            &owner,
            Method::POST,
            "/skills",
            Some(("text/markdown", SKILL.as_bytes().to_vec())),
        )
        .await?;
    let skill = imported["name"]
        .as_str()
        .or_else(|| imported.pointer("/imported/0/name").and_then(Value::as_str))
        .unwrap_or(SKILL_NAME)
        .to_owned();
    step(&format!(
        "owner installed skill {skill:?} (provider local); body in its encrypted source store"
    ));
    // The body's allowance: a `local` run reads a prompt padded to it and answers at its speed,
    // whatever the body (so its time does not tell the body's length). The default (1,024
    // tokens) fits any body the embedded model serves, and costs the 135M model on two cores
    // about 20 s a call; this body is ~25 tokens, so its owner declares what it needs.
    api.call(
        &owner,
        Method::PATCH,
        &format!("/skills/{skill}"),
        Some((
            "application/json",
            serde_json::to_vec(&json!({ "bodyMaxTokens": BODY_MAX_TOKENS }))?,
        )),
    )
    .await?;
    step(&format!(
        "owner set the skill's body allowance to {BODY_MAX_TOKENS} tokens (its body fits; the model reads a prompt padded to it)"
    ));
    let caller = start_node(&root.join("caller"), &box_url, owner.listen.clone()).await?;
    step(&format!(
        "caller node {} up, connected to the owner",
        caller.peer_id
    ));

    // 4. The caller holds a private source the skill asks for, marked shareable by its human
    //    (only shareable sources can ever be staked; consent is still asked per call).
    api.call(
        &caller,
        Method::PUT,
        &format!("/sources/{SOURCE_NAME}?kind=text&shareable=true"),
        Some(("text/plain", SOURCE.as_bytes().to_vec())),
    )
    .await?;
    step(&format!(
        "caller stored private source {SOURCE_NAME:?} ({} bytes), marked shareable",
        SOURCE.len()
    ));

    // 5. The caller sees the skill on its board, with the allowance its owner set: an advert
    // from before the PATCH can still reach the caller first, and a program built on it is
    // refused `program_mismatch` (review 32 R32-12).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let board = api.call(&caller, Method::GET, "/board", None).await?;
        let on = board["board"].as_array().into_iter().flatten().any(|r| {
            r["skill"].as_str() == Some(skill.as_str())
                && r["peer"].as_str() == Some(owner.peer_id.as_str())
                && r["bodyMaxTokens"].as_u64() == Some(BODY_MAX_TOKENS)
        });
        if on {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the owner's skill did not reach the caller's board with its {BODY_MAX_TOKENS}-token allowance in 30 s"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    step("the caller's board shows the owner's skill");

    // 6. The call: sources omitted, so the skill's requiredSources this node holds are applied.
    let body = json!({ "peer": owner.peer_id, "skill": skill, "request": REQUEST });
    let started = api
        .call(
            &caller,
            Method::POST,
            "/calls",
            Some(("application/json", serde_json::to_vec(&body)?)),
        )
        .await?;
    let id = started["id"].as_str().context("call id")?.to_owned();
    step(&format!(
        "caller: call {id} requested — request: {REQUEST:?}"
    ));
    let (mut last_c, mut last_o) = (String::new(), String::new());
    let deadline = Instant::now() + Duration::from_secs(600);
    let (c, o) = loop {
        let c = api
            .call(&caller, Method::GET, &format!("/calls/{id}"), None)
            .await?;
        let o = api
            .call(&owner, Method::GET, &format!("/calls/{id}"), None)
            .await
            .unwrap_or(Value::Null);
        let (sc, so) = (
            c["state"].as_str().unwrap_or("").to_owned(),
            o["state"].as_str().unwrap_or("").to_owned(),
        );
        if sc != last_c {
            step(&format!("caller: {sc}"));
            last_c = sc.clone();
            if sc == "awaiting_consent" {
                // The shipped policy asks before a call discloses sources. The demo plays the
                // caller's human and approves once, after printing what approval discloses.
                step(&format!(
                    "caller asks its human: {}",
                    c.pointer("/disclosure/text")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                ));
                // The yes answers the question printed (its digest, shown with it).
                let yes =
                    serde_json::to_vec(&json!({ "decision": "allow", "question": c["question"] }))?;
                api.call(
                    &caller,
                    Method::POST,
                    &format!("/approvals/{id}"),
                    Some(("application/json", yes)),
                )
                .await?;
                step("the caller's human approves (skillbox approve ID)");
            }
        }
        if so != last_o && !so.is_empty() {
            step(&format!("owner:  {so}"));
            last_o = so.clone();
        }
        let done = |s: &str| matches!(s, "answered" | "ran" | "failed");
        if done(&sc) && (done(&so) || sc == "failed") {
            break (c, o);
        }
        if Instant::now() > deadline {
            bail!("the call did not finish in 10 minutes (caller {sc}, owner {so})");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    say!();
    if c["state"] != "answered" {
        let failure = &c["failure"];
        let text = |k: &str| failure[k].as_str().unwrap_or("").to_owned();
        say!("call failed: {} ({})", text("message"), text("code"));
        return Ok(ExitCode::from(1));
    }
    say!("answer (only the caller can open it):");
    // The model's words, with nothing a terminal would obey (the demo's owner is this
    // machine's, but it is still a model's output).
    let answer = skillbox_reach::catalog::clean_untrusted_lines(c["answer"].as_str().unwrap_or(""));
    say!("{}", answer.trim());
    say!();
    // The owner's copy: it alone has `guard_acted` (from the box's note sealed to the owner);
    // the caller's copy of the same signed receipt says nothing of the guard.
    say!(
        "receipt as the owner holds it (signed by the box's run key; guard_acted is from a note the box sealed to the owner alone, absent from the caller's copy):"
    );
    say!(
        "{}",
        skillbox_node::terminal_json::to_string(&o["receipt"]).unwrap_or_default()
    );
    say!(
        "the owner never saw the request or {SOURCE_NAME:?}; the caller never saw the skill body; the box was insecure-dev (no hardware isolation)"
    );
    Ok(ExitCode::SUCCESS)
}
