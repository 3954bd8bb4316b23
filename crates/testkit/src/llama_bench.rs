//! llama.cpp's own `llama-bench`, the yardstick for the embedded model: built from the
//! `llama-cpp-python` source package on PyPI (which carries llama.cpp), once, and cached under
//! the target dir (`target/llama-bench/`). Shared by the providers and jc benches.
//!
//! Needs python3 with pip, tar, cmake and a C++ compiler (the same as the build).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The PyPI package whose sdist carries the llama.cpp we compare with.
pub const PACKAGE: &str = "llama-cpp-python==0.3.36";
const SDIST: &str = "llama_cpp_python-0.3.36";

/// Prefill and decode speed as llama-bench reports them (mean over its repetitions).
#[derive(Clone, Copy, Debug)]
pub struct Speeds {
    pub prefill_tps: f64,
    pub decode_tps: f64,
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
    }
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
    Err(format!(
        "{what} failed ({}):\n{}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

/// The `llama-bench` binary, building it on first use (minutes: llama.cpp and its common lib).
pub fn binary() -> Result<PathBuf, String> {
    let root = target_dir().join("llama-bench");
    let bin = root.join("build/bin/llama-bench");
    if bin.is_file() {
        return Ok(bin);
    }
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let source = root.join(SDIST);
    if !source.join("vendor/llama.cpp/CMakeLists.txt").is_file() {
        let download = root.join("download");
        eprintln!("llama-bench: downloading {PACKAGE} (source package) with pip");
        run(
            Command::new("python3")
                .args(["-m", "pip", "download", "--no-binary", ":all:", "--no-deps"])
                .args(["--disable-pip-version-check", "--no-input", "-d"])
                .arg(&download)
                .arg(PACKAGE),
            "pip download",
        )?;
        let archive = download.join(format!("{SDIST}.tar.gz"));
        run(
            Command::new("tar")
                .arg("xzf")
                .arg(&archive)
                .arg("-C")
                .arg(&root),
            "tar",
        )?;
    }
    let llama = source.join("vendor/llama.cpp");
    let build = root.join("build");
    eprintln!("llama-bench: building llama.cpp's llama-bench with cmake (minutes)");
    run(
        Command::new("cmake")
            .arg("-S")
            .arg(&llama)
            .arg("-B")
            .arg(&build)
            .args([
                "-DCMAKE_BUILD_TYPE=Release",
                "-DBUILD_SHARED_LIBS=OFF",
                "-DLLAMA_CURL=OFF",
                "-DLLAMA_OPENSSL=OFF",
                "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_BUILD_SERVER=OFF",
            ]),
        "cmake configure",
    )?;
    run(
        Command::new("cmake")
            .arg("--build")
            .arg(&build)
            .args(["--target", "llama-bench", "-j2"]),
        "cmake build",
    )?;
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!("the build left no {}", bin.display()))
    }
}

/// `llama-bench -m MODEL -t THREADS -p PROMPT -n GEN -o json`.
pub fn measure(
    model: &Path,
    threads: usize,
    prompt: usize,
    generate: usize,
) -> Result<Speeds, String> {
    let bin = binary()?;
    let out = Command::new(&bin)
        .arg("-m")
        .arg(model)
        .args(["-t", &threads.to_string()])
        .args(["-p", &prompt.to_string(), "-n", &generate.to_string()])
        .args(["-o", "json"])
        .output()
        .map_err(|e| format!("llama-bench: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "llama-bench failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("llama-bench output is not JSON: {e}"))?;
    let rows = rows.as_array().ok_or("llama-bench output is not a list")?;
    let speed = |key: &str| {
        rows.iter()
            .find(|r| r[key].as_u64().is_some_and(|n| n > 0))
            .and_then(|r| r["avg_ts"].as_f64())
            .ok_or_else(|| format!("llama-bench reported no {key} test"))
    };
    Ok(Speeds {
        prefill_tps: speed("n_prompt")?,
        decode_tps: speed("n_gen")?,
    })
}
