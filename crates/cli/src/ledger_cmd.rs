//! `skillbox ledger`: the node's disclosure ledger — which of this node's sources (and, as an
//! owner, which skill bodies, models and keys) left for which box, for whose skill, under which
//! decision — and `skillbox ledger verify`, the check of its chain and signatures.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use reqwest::Method;
use serde_json::Value;
use skillbox_node::ledger::{self, Line};

use crate::call_cmd::query_path;
use crate::node_cmd::{Client, print_json};
use skillbox_node::store::rfc3339;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LedgerArgs {
    /// Only entries naming this source.
    #[arg(long)]
    pub source: Option<String>,
    /// Only entries with this peer.
    #[arg(long)]
    pub peer: Option<String>,
    /// Only entries of this call.
    #[arg(long)]
    pub call: Option<String>,
    /// Only entries since: unix milliseconds, or a span back from now (30m, 24h, 7d).
    #[arg(long)]
    pub since: Option<String>,
    /// How to print: a table, JSON, JSON Lines (the export `ledger verify --file` reads) or CSV.
    #[arg(long, value_parser = ["table", "json", "jsonl", "csv"], default_value = "table")]
    pub format: String,
    /// The same as `--format json`.
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Option<LedgerCommand>,
}

#[derive(clap::Subcommand, Debug)]
pub enum LedgerCommand {
    /// Check the ledger's sequence, hashes, chain, signatures, signed head, the head kept
    /// outside the database and its index (exit 1 if broken).
    Verify {
        /// Check an exported JSON Lines file instead of the running node's ledger (needs --key).
        #[arg(long, requires = "key")]
        file: Option<PathBuf>,
        /// The node key (hex) the export's signatures must verify under (GET /ledger's nodeKey).
        #[arg(long)]
        key: Option<String>,
        /// A head saved earlier with `skillbox ledger head`: the ledger must extend it (nothing
        /// up to it removed or rewritten since, a redacted line's text included), whoever holds
        /// the node key now. A head saved before version 2 pins only a redacted line's hash: such
        /// a line up to it reads `unpinned_redaction`.
        #[arg(long)]
        head: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Print the ledger's signed head (JSON, version 2: it also pins what each redacted line up
    /// to it shows) once it verifies: keep it somewhere this machine cannot rewrite, and check
    /// the ledger against it later with `ledger verify --head`.
    Head,
}

pub fn run(global: &crate::Global, args: LedgerArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        Some(LedgerCommand::Verify {
            file,
            key,
            head,
            json,
        }) => return verify(global, file, key, head, json),
        Some(LedgerCommand::Head) => return head(global),
        None => {}
    }
    let filters = [
        ("source", &args.source),
        ("peer", &args.peer),
        ("call", &args.call),
        ("since", &args.since),
    ];
    let path = query_path("/ledger", &filters);
    let client = Client::from_data_dir(global)?;
    let body = client.send(Method::GET, &path, None)?.body;
    let format = if args.json {
        "json"
    } else {
        args.format.as_str()
    };
    if format == "json" {
        print_json(&body)?;
        return Ok(ExitCode::SUCCESS);
    }
    let lines: Vec<Line> = serde_json::from_value(body["entries"].clone())
        .context("reading the node's ledger entries")?;
    match format {
        "jsonl" => say!("{}", ledger::to_jsonl(&lines)?.trim_end()),
        "csv" => say!("{}", ledger::to_csv(&lines)?.trim_end()),
        _ => {
            table(&lines);
            // What a human reads is checked as it is shown: a view filters the signed entries,
            // and an edit of them (or of the database under them) is said here, not only by
            // `ledger verify`.
            let v = client.send(Method::GET, "/ledger/verify", None)?.body;
            if v["ok"].as_bool() != Some(true) {
                say!(
                    "WARNING: the ledger does NOT verify (entry {}: {}): run `skillbox ledger verify`",
                    v["brokenAt"],
                    v["reason"].as_str().unwrap_or("unknown")
                );
                return Ok(ExitCode::from(1));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn table(lines: &[Line]) {
    if lines.is_empty() {
        say!("nothing has been staked or decided yet");
        return;
    }
    for l in lines {
        let e = &l.entry;
        let (what, through) = (e.summary(), e.through());
        let seen = match (&e.provider, &e.provider_host) {
            (Some(p), Some(h)) => format!("; provider {p} at {h}"),
            (Some(p), None) => format!("; provider {p}"),
            _ => String::new(),
        };
        say!(
            "{:>5} {} {:<6} {} · call {} · {} skill {} · {through}{seen}",
            e.seq,
            rfc3339(e.at),
            e.role,
            what,
            e.call,
            if e.role == "caller" { "peer's" } else { "your" },
            e.skill,
        );
    }
}

fn head(global: &crate::Global) -> anyhow::Result<ExitCode> {
    let v = Client::from_data_dir(global)?
        .send(Method::GET, "/ledger/verify", None)?
        .body;
    if v["ok"].as_bool() != Some(true) || v["signedHead"].is_null() {
        say!(
            "ledger BROKEN at entry {}: {} — no head to save (see `skillbox ledger verify`)",
            v["brokenAt"],
            v["reason"].as_str().unwrap_or("unknown")
        );
        return Ok(ExitCode::from(1));
    }
    say!("{}", serde_json::to_string(&v["signedHead"])?);
    Ok(ExitCode::SUCCESS)
}

fn verify(
    global: &crate::Global,
    file: Option<PathBuf>,
    key: Option<String>,
    head: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let anchor = match &head {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading the saved head {}", p.display()))?;
            Some(ledger::parse_head(&text).map_err(anyhow::Error::msg)?)
        }
        None => None,
    };
    let verdict: Value = match (file, key) {
        (Some(f), Some(k)) => {
            let text = std::fs::read_to_string(&f)
                .with_context(|| format!("reading the ledger export {}", f.display()))?;
            let v = ledger::verify_export_anchored(&text, &k, anchor.as_ref())
                .map_err(anyhow::Error::msg)?;
            serde_json::to_value(v)?
        }
        _ => {
            let client = Client::from_data_dir(global)?;
            let own = client.send(Method::GET, "/ledger/verify", None)?.body;
            match &anchor {
                // The node's own check, then the whole ledger read back and checked here
                // against the saved head under the node's key.
                Some(a) if own["ok"].as_bool() == Some(true) => {
                    let page = client.send(Method::GET, "/ledger", None)?.body;
                    let lines: Vec<Line> = serde_json::from_value(page["entries"].clone())
                        .context("reading the node's ledger entries")?;
                    let key = page["nodeKey"].as_str().unwrap_or_default();
                    let text = ledger::to_jsonl(&lines)?;
                    let v = ledger::verify_export_anchored(&text, key, Some(a))
                        .map_err(anyhow::Error::msg)?;
                    serde_json::to_value(v)?
                }
                _ => own,
            }
        }
    };
    let ok = verdict["ok"].as_bool() == Some(true);
    if json {
        print_json(&verdict)?;
    } else if ok {
        say!(
            "ledger verified: {} entries, chained and signed by the node key{}",
            verdict["entries"],
            verdict["head"]
                .as_str()
                .map(|h| format!(", head {h}"))
                .unwrap_or_default()
        );
        // An export that masked a source name (one that reads as a pasted provider key) is
        // intact, but those lines' text is not checked by their hashes, and the masked names
        // are not in it to check: say which, and what vouches for their text — the saved head
        // for those up to it, else only the node key, whose holder can sign any text.
        let redacted: Vec<u64> = verdict["redacted"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        if !redacted.is_empty() {
            let list = |seqs: &[u64]| {
                seqs.iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let upto = anchor.as_ref().map_or(0, |a| a.seq);
            let (pinned, unpinned): (Vec<u64>, Vec<u64>) =
                redacted.iter().partition(|&&s| s <= upto);
            say!(
                "with {} redacted entries ({}): a source name masked, each checked by its hash's place in the chain and the node key's signature over it, not by the masked name",
                redacted.len(),
                list(&redacted)
            );
            if !pinned.is_empty() {
                say!(
                    "  {}: their text as shown is pinned by the saved head (as it read when the head was saved)",
                    list(&pinned)
                );
            }
            if !unpinned.is_empty() {
                say!(
                    "  {}: their text as shown is vouched for only by the node key's signature, which whoever holds the key can make for any text (a head saved later, `skillbox ledger head`, pins it)",
                    list(&unpinned)
                );
            }
        }
    } else if verdict["reason"] == "unpinned_redaction" {
        say!(
            "ledger NOT verified against the saved head at entry {}: unpinned_redaction — the entry is redacted (a source name masked) and the saved head is of version 1 (saved before `skillbox ledger head` pinned redacted lines), which pins only its hash, not what it shows; every other check passed. Check it against a head of version 2 (`skillbox ledger head`, saved while the node can be trusted)",
            verdict["brokenAt"]
        );
    } else {
        say!(
            "ledger BROKEN at entry {}: {} ({} entries before it verify)",
            verdict["brokenAt"],
            verdict["reason"].as_str().unwrap_or("unknown"),
            verdict["entries"]
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
