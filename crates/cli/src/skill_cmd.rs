//! `skillbox skill check` and `skillbox manifest check`: no node needed.

use std::process::ExitCode;

#[derive(clap::Subcommand, Debug)]
pub enum SkillCommand {}

#[derive(clap::Subcommand, Debug)]
pub enum ManifestCommand {}

pub fn run_skill(_global: &crate::Global, cmd: SkillCommand) -> anyhow::Result<ExitCode> {
    match cmd {}
}

pub fn run_manifest(_global: &crate::Global, cmd: ManifestCommand) -> anyhow::Result<ExitCode> {
    match cmd {}
}
