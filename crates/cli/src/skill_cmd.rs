//! `skillbox skill check` and `skillbox manifest check`: no node needed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;
use serde_json::{Value, json};
use skillbox_skill::{CheckError, Diagnostic, check_manifest_document, check_skill, openwop};

use crate::node_cmd::said;
use crate::peer_text;

/// The most characters of one printed line that quotes a file's text.
const SHOWN_CAP: usize = 4096;

/// A file's text (a field name, a value, a schema error quoting either) as the terminal gets
/// it: one line, no control, escape, bidi or invisible character. A SKILL.md or pack.json is
/// often someone else's, and its YAML or JSON escapes write ESC, BEL and C1 controls into keys
/// (`"\e]52;c;…\a": 1` set the clipboard through `skill check`'s warning).
fn shown(text: &str) -> String {
    peer_text::text(text, SHOWN_CAP)
}

#[derive(clap::Subcommand, Debug)]
pub enum SkillCommand {
    /// Check SKILL.md documents: a file, or a skill folder holding SKILL.md. Exit 1 on any error.
    Check {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// One JSON object per input, in an array.
        #[arg(long)]
        json: bool,
    },
    /// Import a SKILL.md (a file or a skill folder), or an OpenWOP pack.json / AgentManifest
    /// (a `.json` file), into the running node.
    Add(crate::node_cmd::SkillAddArgs),
    /// Set what the owner stakes for a skill: `provider=ID model=ID key=SOURCE` (empty clears).
    ///
    /// None of them is a secret, so all may be on the command line (which other users of this
    /// machine can read): `key=` names the source holding the API key, and the key itself goes
    /// in with `skillbox source add NAME --secret` (standard input, not shown at a terminal). A
    /// `key=` that is not a secret source of the node's is refused before anything is sent.
    ///
    /// `bodyMaxTokens=N modelContextTokens=N`: the body allowance and a remote model's context
    /// in tokens (empty: the provider's defaults, 49,152 / 128,000 OpenAI and Anthropic, 16,384 /
    /// 32,768 OpenRouter, 1,024 / 4,096 self-hosted, 1,024 `local`). Declare the context your server really takes (Ollama's
    /// `num_ctx`): a caller's program must name both, as the advert carries them. A remote
    /// body runs only within as many bytes as the allowance has tokens.
    Set(crate::agents_cmd::SkillSetArgs),
    /// List the node's skills, offered or not (and why not).
    List(crate::node_cmd::SkillListArgs),
    /// Show one skill: declaration, manifest, state (never the body).
    Show(crate::node_cmd::SkillNameArgs),
    /// Remove a skill and its body source.
    Rm(crate::node_cmd::SkillNameArgs),
}

#[derive(clap::Subcommand, Debug)]
pub enum ManifestCommand {
    /// Check AgentManifests or pack.json files against the OpenWOP schemas. Exit 1 on any error.
    Check {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

pub fn run_skill(global: &crate::Global, cmd: SkillCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SkillCommand::Check { paths, json } => {
            let reports: Vec<SkillReport> = paths.iter().map(|p| check_skill_path(p)).collect();
            print_reports(&reports, json, SkillReport::print)?;
            Ok(exit_for(reports.iter().all(|r| r.valid)))
        }
        SkillCommand::Add(args) if args.path.extension().is_some_and(|e| e == "json") => {
            crate::agents_cmd::pack_add(global, &args.path, args.json)
        }
        SkillCommand::Add(args) => crate::node_cmd::skill_add(global, args),
        SkillCommand::Set(args) => crate::agents_cmd::skill_set(global, args),
        SkillCommand::List(args) => crate::node_cmd::skill_list(global, args),
        SkillCommand::Show(args) => crate::node_cmd::skill_show(global, args),
        SkillCommand::Rm(args) => crate::node_cmd::skill_rm(global, args),
    }
}

pub fn run_manifest(_global: &crate::Global, cmd: ManifestCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ManifestCommand::Check { files, json } => {
            let reports: Vec<Value> = files.iter().map(|f| check_manifest_path(f)).collect();
            print_reports(&reports, json, print_manifest_report)?;
            Ok(exit_for(
                reports.iter().all(|r| r["valid"] == Value::Bool(true)),
            ))
        }
    }
}

fn exit_for(all_valid: bool) -> ExitCode {
    if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn print_reports<T: Serialize>(reports: &[T], json: bool, human: fn(&T)) -> anyhow::Result<()> {
    if json {
        println!(
            "{}",
            skillbox_node::terminal_json::to_string(&reports).context("serializing the report")?
        );
    } else {
        reports.iter().for_each(human);
    }
    Ok(())
}

#[derive(Serialize)]
struct SkillReport {
    path: String,
    valid: bool,
    #[serde(rename = "agentId", skip_serializing_if = "Option::is_none")]
    agent_id: Option<String>,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
    /// What a valid skill would spend of the owner's: provider, model, key source and the
    /// ceilings it asks for (a node holds them to its `[ceilings]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    spends: Option<Value>,
}

impl SkillReport {
    fn print(&self) {
        let verdict = if self.valid { "ok" } else { "INVALID" };
        let path = shown(&self.path);
        match &self.agent_id {
            Some(id) => println!("{path}: {verdict} ({})", shown(id)),
            None => println!("{path}: {verdict}"),
        }
        for e in &self.errors {
            println!("  error: {}", shown(&e.to_string()));
        }
        for w in &self.warnings {
            println!("  warning: {}", shown(&w.to_string()));
        }
        if let Some(spends) = &self.spends {
            print_spends(
                spends,
                "asks for ceilings (a node applies at most its [ceilings])",
            );
        }
    }
}

/// A file, or a folder holding SKILL.md. The fallback name is the folder's name (a skill's folder
/// is its name in the Agent Skills layout); a loose file contributes its stem unless it is SKILL.md.
pub(crate) fn resolve_skill_path(path: &Path) -> (PathBuf, Option<String>) {
    let file_name = |p: &Path| p.file_name().and_then(|n| n.to_str()).map(str::to_owned);
    if path.is_dir() {
        return (path.join("SKILL.md"), file_name(path));
    }
    let stem = path.file_stem().and_then(|s| s.to_str());
    let fallback = match stem {
        Some(s) if s.eq_ignore_ascii_case("skill") => path.parent().and_then(file_name),
        Some(s) => Some(s.to_owned()),
        None => None,
    };
    (path.to_path_buf(), fallback)
}

fn check_skill_path(path: &Path) -> SkillReport {
    let (file, fallback) = resolve_skill_path(path);
    let mut report = SkillReport {
        path: path.display().to_string(),
        valid: false,
        agent_id: None,
        errors: Vec::new(),
        warnings: Vec::new(),
        spends: None,
    };
    let bytes = match read_limited(&file, skillbox_skill::document::MAX_DOCUMENT) {
        Ok(b) => b,
        Err(e) => {
            report.errors.push(Diagnostic::document(None, e));
            return report;
        }
    };
    match check_skill(&bytes, fallback.as_deref(), openwop::DEFAULT_NAMESPACE) {
        Ok(checked) => {
            report.valid = true;
            report.agent_id = Some(checked.agent_id);
            report.warnings = checked.warnings;
            let d = &checked.declaration;
            report.spends = Some(json!({
                "provider": d.provider.as_ref().map(ToString::to_string),
                "model": d.model,
                "key": d.key,
                "limits": d.limits,
            }));
        }
        Err(CheckError::Document(e)) => report.errors = e.problems,
        Err(CheckError::Manifest { located, .. }) => report.errors = located,
    }
    report
}

/// Read at most `limit + 1` bytes so an oversized file is refused without loading all of it.
fn read_limited(path: &Path, limit: usize) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() > limit {
        return Err(format!(
            "{} is over the limit of {limit} bytes",
            path.display()
        ));
    }
    Ok(bytes)
}

/// Largest manifest or pack.json accepted.
const MAX_MANIFEST_FILE: usize = 4 * 1024 * 1024;

fn check_manifest_path(path: &Path) -> Value {
    let shown = path.display().to_string();
    let failed = |message: String| json!({"path": shown, "valid": false, "error": message});
    let bytes = match read_limited(path, MAX_MANIFEST_FILE) {
        Ok(b) => b,
        Err(e) => return failed(e),
    };
    let doc: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => return failed(format!("not JSON: {e}")),
    };
    let report = check_manifest_document(&doc);
    let mut out = serde_json::to_value(&report).unwrap_or_else(|e| json!({"error": e.to_string()}));
    out["path"] = Value::String(shown);
    out
}

fn print_manifest_report(report: &Value) {
    let text = |v: &Value, absent: &str| shown(v.as_str().unwrap_or(absent));
    let path = text(&report["path"], "?");
    let verdict = said(&report["valid"], "ok", "INVALID");
    if let Some(err) = report.get("error").and_then(Value::as_str) {
        println!("{path}: {verdict}");
        println!("  error: {}", shown(err));
        return;
    }
    println!("{path}: {verdict} ({})", text(&report["kind"], "?"));
    for e in report["packErrors"].as_array().into_iter().flatten() {
        println!(
            "  error: {}: {}",
            text(&e["path"], ""),
            text(&e["message"], "")
        );
    }
    for agent in report["agents"].as_array().into_iter().flatten() {
        let id = text(&agent["agentId"], "<no agentId>");
        let role = text(&agent["role"], "no role");
        let v = said(&agent["valid"], "ok", "INVALID");
        println!("  agent {id} ({role}): {v}");
        for e in agent["errors"].as_array().into_iter().flatten() {
            let p = e["path"].as_str().filter(|p| !p.is_empty()).unwrap_or("/");
            println!("    error: {}: {}", shown(p), text(&e["message"], ""));
        }
    }
}

/// What `skill add` (a SKILL.md, or each skill of a pack) says past the verdict: the import's
/// warnings, each with its field, and what the skill spends of the owner's (see
/// [`print_spends`]).
pub(crate) fn print_import_notes(imported: &Value) {
    for w in imported["warnings"].as_array().into_iter().flatten() {
        let message = w["message"].as_str().unwrap_or("");
        let line = match w["field"].as_str() {
            Some(field) => format!("{field}: {message}"),
            None => message.to_owned(),
        };
        say!("  warning: {}", shown(&line));
    }
    print_spends(&imported["spends"], "ceilings in force");
}

/// What a skill spends of its owner's when a peer calls it — provider, model, key source, and
/// its ceilings under `ceilings` — since a SKILL.md may be someone else's and that is what it
/// commits the owner to. All of it is the file's text, cleaned.
fn print_spends(spends: &Value, ceilings: &str) {
    let part = |what: &str, v: &Value| v.as_str().map(|s| format!("{what} {}", shown(s)));
    let parts: Vec<String> = [
        part("provider", &spends["provider"]),
        part("model", &spends["model"]),
        part("key source", &spends["key"]),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !parts.is_empty() {
        say!("  spends: {}", parts.join(", "));
    }
    let set: Vec<String> = skillbox_skill::Limits::FIELDS
        .iter()
        .filter_map(|f| spends["limits"][f].as_u64().map(|n| format!("{f} {n}")))
        .collect();
    if !set.is_empty() {
        say!("  {ceilings}: {}", set.join(", "));
    }
}
