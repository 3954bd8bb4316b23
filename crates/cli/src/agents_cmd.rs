//! `skillbox token add` and `token rotate`, `skillbox skill set` and `skillbox skill add PACK.json`: tenants, what
//! an owner stakes for a skill, and OpenWOP pack import.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::{Map, Value};
use skillbox_node::DataDir;

use crate::node_cmd::{Client, ask, print_state, said};

#[derive(clap::Subcommand, Debug)]
pub enum TokenCommand {
    /// Create an API token for a tenant and print it (only its digest is kept, in config.toml).
    /// It reaches the OpenWOP agent surfaces (inventory, roster, org chart) for that tenant only.
    Add {
        /// The tenantId the token stands for.
        #[arg(long)]
        tenant: String,
        /// The workspaceId within the tenant, if any.
        #[arg(long)]
        workspace: Option<String>,
    },
    /// Replace the operator's token (`api.token`, 0600, in one rename). A running node takes
    /// the new one from its next request: the old token is refused from then on and every
    /// dashboard session ends. The token is not printed; read it from the file.
    Rotate {
        /// Replace the agent token (`agent.token`, what HTTP agent clients send to /mcp and
        /// /a2a) instead; the operator's token and dashboard sessions stay.
        #[arg(long)]
        agent: bool,
    },
}

pub fn run_token(global: &crate::Global, cmd: TokenCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        TokenCommand::Add { tenant, workspace } => {
            let dir = DataDir::new(global.data_dir());
            let token =
                skillbox_node::tenants::add_token(&dir.config(), &tenant, workspace.as_deref())?;
            say!("{token}");
            let _ = writeln!(
                std::io::stderr(),
                "token for tenant {tenant:?}{} added to {} (only its digest is kept: store the token now)",
                workspace
                    .as_deref()
                    .map(|w| format!(", workspace {w:?}"))
                    .unwrap_or_default(),
                dir.config().display()
            );
            Ok(ExitCode::SUCCESS)
        }
        TokenCommand::Rotate { agent: true } => {
            let dir = DataDir::new(global.data_dir());
            dir.rotate_agent_token()?;
            let _ = writeln!(
                std::io::stderr(),
                "{} replaced: the old agent token no longer works (a running node refuses it from its next request); HTTP agent clients that read the file at each connection (a headersHelper) pick the new one up, others need it given again",
                dir.agent_token().display()
            );
            Ok(ExitCode::SUCCESS)
        }
        TokenCommand::Rotate { agent: false } => {
            let dir = DataDir::new(global.data_dir());
            dir.rotate_api_token()?;
            let _ = writeln!(
                std::io::stderr(),
                "{} replaced: the old operator token no longer works (a running node refuses it from its next request) and every dashboard session is signed out; restart the `skillbox mcp` processes that held the old",
                dir.api_token().display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct SkillSetArgs {
    /// The skill's name.
    pub name: String,
    /// `provider=ID`, `model=ID`, `key=SOURCE`, a ceiling (`maxRequestBytes=N`,
    /// `maxSourceBytes=N`, `maxOutputBytes=N`, `callsPerPeerPerDay=N`, `callsPerDay=N`), or the
    /// body allowance and remote model context in tokens (`bodyMaxTokens=N`,
    /// `modelContextTokens=N`); an empty value (`key=`) clears the field (for the tokens: back
    /// to the provider's default).
    #[arg(required = true, value_name = "FIELD=VALUE")]
    pub fields: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

/// `skill set NAME provider=… model=… key=…` → `PATCH /skills/{name}`.
pub fn skill_set(global: &crate::Global, args: SkillSetArgs) -> anyhow::Result<ExitCode> {
    let mut change = Map::new();
    let mut limits = Map::new();
    // No refusal below repeats what was given: an argument that is not a field is as likely
    // a pasted key as a typo, and an error is on the screen, in scrollback and in CI logs.
    for f in &args.fields {
        let Some((k, v)) = f.split_once('=') else {
            bail!(
                "an argument is not FIELD=VALUE (provider=…, model=…, key=SOURCE, maxRequestBytes=…); {KEY_WAY_IN}"
            );
        };
        if skillbox_skill::Limits::FIELDS.contains(&k) {
            if limits.contains_key(k) {
                bail!("{k} is given twice");
            }
            let n = if v.is_empty() {
                Value::Null
            } else {
                Value::from(v.parse::<u64>().ok().with_context(|| {
                    format!("{k}: a ceiling is a whole number (or empty to clear it)")
                })?)
            };
            limits.insert(k.to_owned(), n);
            continue;
        }
        if matches!(k, "bodyMaxTokens" | "modelContextTokens") {
            if change.contains_key(k) {
                bail!("{k} is given twice");
            }
            // The ranges and the fit with the skill's provider are the node's to judge.
            let n = if v.is_empty() {
                Value::Null
            } else {
                Value::from(v.parse::<u64>().ok().with_context(|| {
                    format!("{k}: a whole number of tokens (or empty for the provider's default)")
                })?)
            };
            change.insert(k.to_owned(), n);
            continue;
        }
        if !matches!(k, "provider" | "model" | "key") {
            bail!(
                "an argument names no field skill set changes (provider, model, key, bodyMaxTokens, modelContextTokens, {}); {KEY_WAY_IN}",
                skillbox_skill::Limits::FIELDS.join(", ")
            );
        }
        if change.contains_key(k) {
            bail!("{k} is given twice");
        }
        let v = if v.is_empty() {
            Value::Null
        } else {
            Value::String(v.to_owned())
        };
        change.insert(k.to_owned(), v);
    }
    if !limits.is_empty() {
        change.insert("limits".into(), Value::Object(limits));
    }
    let client = Client::from_data_dir(global)?;
    if let Some(Value::String(key)) = change.get("key") {
        key_names_a_secret(&client, key)?;
    }
    let body = serde_json::to_vec(&Value::Object(change)).context("encoding the change")?;
    let (path, body) = (format!("/skills/{}", args.name), ("application/json", body));
    let Some(b) = client.ask(reqwest::Method::PATCH, &path, Some(body), args.json)? else {
        return Ok(ExitCode::SUCCESS);
    };
    say!(
        "skill {} ({}) now {}",
        b["name"].as_str().unwrap_or(""),
        b["digest"].as_str().unwrap_or(""),
        b["declaration"]["provider"]
            .as_str()
            .map(|p| format!("uses provider {p}"))
            .unwrap_or_else(|| "has no provider".into())
    );
    // The owner's token settings, when it set any (absent: the provider's defaults).
    let tokens: Vec<String> = [
        ("body allowance", &b["bodyMaxTokens"]),
        ("model context", &b["modelContextTokens"]),
    ]
    .into_iter()
    .filter_map(|(what, n)| n.as_u64().map(|n| format!("{what} {n} tokens")))
    .collect();
    if !tokens.is_empty() {
        say!("  {} (yours, carried in the advert)", tokens.join(", "));
    }
    print_state(&b["state"]);
    Ok(ExitCode::SUCCESS)
}

/// How a key goes in, said by every refusal of `skill set` that may hold a pasted one.
const KEY_WAY_IN: &str = "an API key goes in with `skillbox source add NAME --secret` (standard input, not shown), then `skillbox skill set SKILL key=NAME`";

/// `key=` takes the name of a secret source of this node's, nothing else: a key pasted there
/// instead would be kept by the node as the skill's key name, in its store and in `skill show`.
/// Checked here, before the change is sent, against the node's source list; no message repeats
/// the value. One that looks like a provider's key is said to be one: it is on this command
/// line, which other users of this machine read, and in shell history.
fn key_names_a_secret(client: &Client, key: &str) -> anyhow::Result<()> {
    let sources = client
        .ask(reqwest::Method::GET, "/sources", None, false)?
        .unwrap_or_default();
    let held = sources["sources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"].as_str() == Some(key));
    match held {
        Some(s) if s["kind"] == "secret" => Ok(()),
        Some(_) => {
            bail!("key= names a source that is not a secret: nothing was changed; {KEY_WAY_IN}")
        }
        None if skillbox_skill::looks_like_a_provider_key(key) => bail!(
            "key= takes the NAME of a source holding the API key, and this looks like the key \
             itself: nothing was sent or stored. It is on this command line (other users of this \
             machine can read it) and in your shell history: revoke it with the provider; {KEY_WAY_IN}"
        ),
        None => bail!("key= names no source of this node: nothing was changed; {KEY_WAY_IN}"),
    }
}

/// `skill add PACK.json`: an OpenWOP pack.json or AgentManifest, posted as JSON.
pub fn pack_add(global: &crate::Global, path: &PathBuf, json: bool) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let Some(body) = ask(
        global,
        reqwest::Method::POST,
        "/skills",
        Some(("application/json", bytes)),
        json,
    )?
    else {
        return Ok(ExitCode::SUCCESS);
    };
    for s in body["skills"].as_array().into_iter().flatten() {
        let verb = said(&s["replaced"], "replaced", "added");
        say!(
            "{verb} skill {} ({})",
            s["name"].as_str().unwrap_or(""),
            s["agentId"].as_str().unwrap_or("")
        );
        print_state(&s["state"]);
        crate::skill_cmd::print_import_notes(s);
    }
    for a in body["agents"].as_array().into_iter().flatten() {
        say!(
            "{} agent {} (role {}, pack {} {}): listed, not a skill",
            said(&a["replaced"], "replaced", "added"),
            a["agentId"].as_str().unwrap_or(""),
            a["role"].as_str().unwrap_or("unset"),
            a["packName"].as_str().unwrap_or(""),
            a["packVersion"].as_str().unwrap_or("")
        );
    }
    Ok(ExitCode::SUCCESS)
}
