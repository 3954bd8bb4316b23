//! `skillbox box`: run a box (joint compute) — its own process, its own keys, its own HTTP API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use skillbox_jc::attest::{
    Attester, BoxConfiguration, ConfigBound, GpuAttester, GpuBound, InsecureDevAttester,
    measure_file,
};
use skillbox_jc::registry::ProviderRegistry;
use skillbox_jc::run::{BoxConfig, BoxCore};
use skillbox_node::config::BoxPin;
use skillbox_providers::{ProviderId, ProviderSettings, local};

#[derive(clap::Args, Debug, Clone)]
pub struct BoxArgs {
    /// Address to listen on. Loopback by default: a box is reached by the nodes that use it.
    #[arg(long, default_value = "127.0.0.1:7480")]
    pub listen: SocketAddr,
    /// Attest with the software `insecure-dev` attester: NO hardware isolation. Nodes accept it
    /// only when their config allows it and the program lists it.
    #[arg(long)]
    pub insecure_dev: bool,
    /// A hardware attester instead: `sev-snp` or `tdx` through Linux configfs-tsm (inside a
    /// confidential VM), `nitro` through the Nitro Secure Module (`/dev/nsm`, inside an AWS
    /// Nitro Enclave). Untested on hardware so far.
    #[arg(long, value_parser = ["sev-snp", "tdx", "nitro"])]
    pub attester: Option<String>,
    /// The configfs-tsm report directory.
    #[arg(long, default_value = "/sys/kernel/config/tsm/report")]
    pub tsm_dir: std::path::PathBuf,
    /// SEV-SNP: VCEK/VLEK and ASK/ARK certificate files (PEM or DER), besides the host's
    /// certificate table.
    #[arg(long = "snp-certs")]
    pub snp_certs: Vec<std::path::PathBuf>,
    /// TDX: the collateral JSON (fetched by the operator; the box never reaches Intel).
    #[arg(long)]
    pub tdx_collateral: Option<std::path::PathBuf>,
    /// A box whose model runs on NVIDIA GPUs: the program that collects their evidence (run with
    /// the requester nonce as hex, it prints NVIDIA's serialized evidence list). Every
    /// attestation then binds the GPU reports' hash, and the configuration names the GPU count.
    #[arg(long, value_name = "PATH")]
    pub gpu_evidence_cmd: Option<PathBuf>,
    /// Also look for GPUs under this directory (a double of `/sys` and `/dev`, as `--tsm-dir`
    /// is of configfs; tests). The system's own root is always looked at: this can only add
    /// GPUs the box must attest, never hide one.
    #[arg(long, hide = true, value_name = "DIR")]
    pub gpu_root: Option<PathBuf>,
    /// Base URL for a provider, `ID=URL` (repeatable), e.g. `openai-compatible:vllm=http://127.0.0.1:8000/v1`.
    /// Programs must name this URL as the provider's host.
    #[arg(long = "provider-url", value_parser = parse_provider_url)]
    pub provider_urls: Vec<(ProviderId, String)>,
    /// A DNS name the box is reached by (repeatable). The box answers only requests whose
    /// `Host` is its bound address, `localhost` on loopback, or one of these (DNS rebinding).
    #[arg(long = "name")]
    pub names: Vec<String>,
    /// Serve HTTPS with a TLS key made at start and bound into every attestation: nodes pin
    /// that key, so no TLS front or proxy can sit between (issue 31). Always on off loopback,
    /// where nodes reach a box over https only.
    #[arg(long)]
    pub tls: bool,
    /// Memory set aside for opened stakes, in MiB: a run that would go over is refused `busy`.
    #[arg(long, default_value_t = 1024)]
    pub stake_budget_mib: u64,
    /// Runs open at once; one more is refused `busy` (a caller with another box moves there).
    #[arg(long, value_name = "N", default_value_t = BoxConfig::default().max_runs)]
    pub max_runs: usize,
    /// Runs not yet staked in that one client address (an IPv6 /64) may have opened; at most
    /// half of `--max-runs`.
    #[arg(long, value_name = "N", default_value_t = BoxConfig::default().max_unstaked_per_client)]
    pub max_unstaked_per_client: usize,
    /// The part of the stake budget one client address may hold, in MiB. Default: a quarter
    /// of `--stake-budget-mib`.
    #[arg(long)]
    pub stake_budget_per_client_mib: Option<u64>,
    /// Latest program expiry the box opens, in seconds from now (programs are remembered as
    /// spent until they expire); later ones are refused `expires_too_far`.
    #[arg(long, value_name = "SECS", default_value_t = BoxConfig::default().max_program_ttl_secs)]
    pub max_program_ttl_secs: u64,
    /// Open and stake requests per second one client address may make (bursts of 4x);
    /// more are refused `rate_limited`.
    #[arg(long, value_name = "N", default_value_t = BoxConfig::default().client_rate.per_sec)]
    pub client_rate: f64,
    /// Opens per second one program key may make (bursts of 4x).
    #[arg(long, value_name = "N", default_value_t = BoxConfig::default().key_rate.per_sec)]
    pub key_rate: f64,
    /// Serve only programs one of whose parties has this node key (64 hex digits; repeatable).
    /// Without any `--allow-key`/`--allow-keys-file`, anyone who reaches the box may use it.
    #[arg(long = "allow-key", value_name = "HEX", value_parser = parse_node_key)]
    pub allow_keys: Vec<String>,
    /// A file of allowed node keys, one per line (`#` comments), read at start.
    #[arg(long, value_name = "PATH")]
    pub allow_keys_file: Option<PathBuf>,
    /// The insecure-dev identity key (made on first start; default `<data dir>/box/insecure-dev.key`).
    /// The same key across restarts is what nodes pin.
    #[arg(long)]
    pub key_file: Option<std::path::PathBuf>,
    /// The key the box's run store is sealed under (insecure-dev: 32 random bytes made 0600 on
    /// first start; default `<data dir>/box/store.key`). Open runs, their stakes and results are
    /// kept in `<data dir>/box/runs.sqlite` under it, so a restarted box finishes its runs.
    /// Insecure-dev only: a box with hardware isolation keeps its runs in memory, since a key
    /// file on its host's disk would give the host every stake.
    #[arg(long, value_name = "PATH")]
    pub store_key_file: Option<PathBuf>,
    /// The crash harness's failpoint: abort right after this step is on disk (`opened`,
    /// `staked`, `at_provider`, `result`).
    #[arg(long, hide = true, value_name = "STEP")]
    pub crash_at: Option<String>,
    /// Print what a node pins for this box (a `[[boxes.pins]]` entry for its config) and exit.
    #[arg(long)]
    pub show_identity: bool,
    /// GGUF file of the `local` provider (another instruct model, e.g. a larger one). Default:
    /// `SKILLBOX_MODEL`, else the SmolLM2 that `skillbox model fetch` installs in the data dir.
    /// Its chat template comes from the file (or ChatML when it has none).
    #[arg(long, value_name = "PATH")]
    pub local_model: Option<PathBuf>,
    /// Compute threads of the local model. Default: the machine's physical cores. Fewer when the
    /// box shares its cores with other work: llama.cpp's threads wait for each other hundreds of
    /// times a token, and a busy machine makes each wait long
    #[arg(long, value_name = "N", env = "SKILLBOX_LOCAL_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub local_threads: Option<u16>,
    /// Local generations decoded together in one batch; further calls wait.
    #[arg(long, value_name = "N", default_value_t = local::DEFAULT_PARALLEL as u16,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub local_parallel: u16,
    /// Tokens per local generation, prompt and answer (each of `--local-parallel` holds this
    /// much KV cache). Default: the model's training context, at most 4096.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(16..))]
    pub local_context: Option<u32>,
}

fn parse_node_key(s: &str) -> Result<String, String> {
    let k = s.trim().to_ascii_lowercase();
    if k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(k)
    } else {
        Err("a node key is 64 hex digits".into())
    }
}

/// The allow-list from the flags and the file; `None` when neither names a key.
fn allowed_keys(args: &BoxArgs) -> anyhow::Result<Option<Vec<String>>> {
    let mut keys = args.allow_keys.clone();
    if let Some(path) = &args.allow_keys_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the allow-list {}", path.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let key = parse_node_key(line)
                .map_err(|e| anyhow::anyhow!("{} line {}: {e}", path.display(), n + 1))?;
            keys.push(key);
        }
        if keys.is_empty() {
            // An empty file would silently mean "anyone": refuse it.
            bail!("the allow-list {} names no key", path.display());
        }
    }
    Ok((!keys.is_empty()).then_some(keys))
}

fn rate(per_sec: f64) -> anyhow::Result<skillbox_jc::run::Rate> {
    if !(per_sec.is_finite() && per_sec > 0.0) {
        bail!("a rate is a positive number of requests per second");
    }
    Ok(skillbox_jc::run::Rate {
        burst: (per_sec * 4.0).max(1.0),
        per_sec,
    })
}

fn parse_provider_url(s: &str) -> Result<(ProviderId, String), String> {
    let (id, url) = s.split_once('=').ok_or("expected ID=URL")?;
    let id: ProviderId = id.parse().map_err(|e| format!("{e}"))?;
    if id == ProviderId::Local {
        return Err("the local provider has no URL".into());
    }
    Ok((id, url.to_owned()))
}

pub fn run(global: &crate::Global, args: BoxArgs) -> anyhow::Result<ExitCode> {
    crate::init_logs("info", None);
    // Every file the box makes (its run store, its spent-program list and their SQLite
    // journals) is its user's alone, whatever the umask and however the data dir's mode
    // drifts later (a restore, a `chmod -R a+rX`): audit 32 A32-4.
    private_umask();
    own_dirs(global, &args)?;
    trusted_files(global, &args)?;
    if let Some(platform) = &args.attester {
        return run_hardware(global, &args, platform);
    }
    if !args.insecure_dev {
        bail!(
            "choose an attester: --attester sev-snp|tdx inside a confidential VM, \
             --attester nitro inside a Nitro Enclave, or \
             --insecure-dev for development — that box has no hardware isolation"
        );
    }
    let exe = std::env::current_exe().context("locating the box executable")?;
    let measurement = measure_file(&exe).context("measuring the box executable")?;
    let key_file = args
        .key_file
        .clone()
        .unwrap_or_else(|| global.data_dir().join("box").join("insecure-dev.key"));
    let dev = InsecureDevAttester::with_key_file(&key_file, measurement)
        .with_context(|| format!("the box identity key {}", key_file.display()))?;
    if args.show_identity {
        print!(
            "{}",
            BoxPin {
                url: format!("http://{}", args.listen),
                platform: dev.platform().to_owned(),
                measurements: vec![dev.measurement().to_owned()],
                key: Some(dev.public_key_hex()),
                policy: None,
                release_log: None,
                gpu: None,
            }
            .render()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let attester: Arc<dyn Attester> = Arc::new(dev);
    let providers = provider_registry(global, &args, 0);
    serve(global, args, attester, providers)
}

/// The box reads its identity key, its run-store key, its spent-program list and its runs from
/// `<data dir>/box` (or the key files' own directories): one another user owns, may write to
/// or may swap would hand the box their keys (the identity nodes pin, the key its stakes are
/// sealed under at rest) or an emptied spent list. Each is made if missing (0700), so one about
/// to be made is judged by where it sits, then refused, naming it, unless it is this user's
/// alone — before any key is read or made.
fn own_dirs(global: &crate::Global, args: &BoxArgs) -> anyhow::Result<()> {
    let data_dir = global.data_dir();
    let box_dir = data_dir.join("box");
    let key_dirs = [&args.key_file, &args.store_key_file]
        .into_iter()
        .flatten()
        .map(|key| match key.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        });
    let ours = [("data dir", data_dir.clone()), ("box's directory", box_dir)];
    let dirs = ours
        .iter()
        .cloned()
        .chain(key_dirs.map(|d| ("box key's directory", d)));
    for (what, dir) in dirs {
        crate::own_dir::make_private(what, &dir)?;
    }
    // The box's own directories are listed by nobody else (audit 32 A32-4): a key file's
    // directory may be a shared one of the operator's, and keeps its mode.
    for (what, dir) in &ours {
        if skillbox_jc::own_dir::close_to_others(dir)
            .with_context(|| format!("setting mode of the {what} {}", dir.display()))?
        {
            tracing::info!(path = %dir.display(), "{what} was open to other users' listing: made 0700");
        }
    }
    Ok(())
}

/// Files the box trusts by their path (audit 32 A32-3, A32-6): the model the local provider
/// loads (llama.cpp maps it shared, so a write after the box hashed it would change the running
/// model under its attested digest), the allow-list (another user's line would be their node
/// key, served), the GPU evidence collector (run as the box's user at every attestation, with
/// the box's keys in reach). Each must be this user's or root's, written by nobody else, in
/// directories nobody else can swap it out of (`skillbox_jc::own_dir::check_file`), before it
/// is read, hashed or run. The collector must be named by an absolute path: a bare name would
/// be looked up on `PATH`, whose directories are not this rule's.
fn trusted_files(global: &crate::Global, args: &BoxArgs) -> anyhow::Result<()> {
    use skillbox_jc::own_dir::check_file;
    check_file("model file", &model_path(global, args))?;
    if let Some(list) = &args.allow_keys_file {
        check_file("allow-list", list)?;
    }
    if let Some(collector) = &args.gpu_evidence_cmd {
        if !collector.is_absolute() {
            bail!(
                "--gpu-evidence-cmd {}: name the collector by its absolute path (a bare or \
                 relative name is looked up where others may have put a program of that name)",
                collector.display()
            );
        }
        check_file("GPU evidence collector", collector)?;
    }
    Ok(())
}

/// Files this process makes are readable and writable by its user only (umask 077).
pub(crate) fn private_umask() {
    // SAFETY: umask only sets this process's file-creation mask; it cannot fail.
    unsafe {
        libc::umask(0o077);
    }
}

/// A box attesting with configfs-tsm (SEV-SNP or TDX).
fn run_hardware(
    global: &crate::Global,
    args: &BoxArgs,
    platform: &str,
) -> anyhow::Result<ExitCode> {
    let platform: skillbox_attest::Platform = platform
        .parse()
        .map_err(|_| anyhow::anyhow!("unknown attester {platform:?}"))?;
    if platform == skillbox_attest::Platform::Nitro {
        return run_nitro(global, args);
    }
    let mut certs = Vec::new();
    for f in &args.snp_certs {
        certs.push(std::fs::read(f).with_context(|| format!("reading {}", f.display()))?);
    }
    let collateral = args
        .tdx_collateral
        .as_ref()
        .map(|f| std::fs::read(f).with_context(|| format!("reading {}", f.display())))
        .transpose()?;
    let tsm = skillbox_jc::tsm::TsmAttester::open(&args.tsm_dir, platform, certs, collateral)
        .with_context(|| format!("the {platform} attester at {}", args.tsm_dir.display()))?;
    let mut attester: Arc<dyn Attester> = Arc::new(tsm);
    let (mut count, mut found) = (0, 0);
    if let Some(program) = &args.gpu_evidence_cmd {
        // Asked once now: the GPU count goes into the configuration the host launched with.
        let gpus = skillbox_jc::tsm::CommandGpus::new(program.clone());
        found = GpuAttester::evidence(&gpus, &[0u8; 32])
            .context("the box's GPU evidence")?
            .len();
        count = u32::try_from(found).context("GPU count")?;
        attester = Arc::new(GpuBound::new(attester, Arc::new(gpus)));
    }
    refuse_unattested_gpus(args, found)?;
    // The local model offloads to GPUs only when the attested configuration names them.
    let providers = provider_registry(global, args, count);
    let config =
        BoxConfiguration::new(providers.table(), allowed_keys(args)?.as_deref()).with_gpus(count);
    if args.show_identity {
        // Every platform's pin as the node's config takes it (a TDX pin with its policy table),
        // naming the configuration hash the host must launch the guest with.
        let url = format!("https://<this box's name>:{}", args.listen.port());
        let hash = config.sha256()?;
        let pin = crate::pin_identity::hardware_pin(url, platform, attester.as_ref(), &hash)?;
        print!(
            "{}",
            crate::pin_identity::launch_note(platform, attester.as_ref(), &hash)
        );
        print!("{}", pin.render());
        return Ok(ExitCode::SUCCESS);
    }
    // HOST_DATA / MRCONFIGID must be this configuration's hash, or the box does not start.
    let bound = ConfigBound::new(attester, config).context("the box's launch configuration")?;
    serve(global, args.clone(), Arc::new(bound), providers)
}

/// A box attesting with the Nitro Secure Module. Its configuration is in the enclave image
/// (PCR2), which the pin names: there is no host-set field to bind at launch.
fn run_nitro(global: &crate::Global, args: &BoxArgs) -> anyhow::Result<ExitCode> {
    use skillbox_jc::nsm::{NitroAttester, NsmDevice};
    let device = NsmDevice::open().context("the nitro attester")?;
    let nitro = NitroAttester::open(Box::new(device)).context("the nitro attester")?;
    if args.gpu_evidence_cmd.is_some() {
        // Its GPUs would be attested by nothing: the Nitro path binds no GPU evidence.
        bail!("--gpu-evidence-cmd: a Nitro Enclave box attests no GPU (an enclave has none)");
    }
    refuse_unattested_gpus(args, 0)?;
    if args.show_identity {
        let url = format!("https://<this box's name>:{}", args.listen.port());
        print!("{}", crate::pin_identity::nitro_pin(url, &nitro)?.render());
        return Ok(ExitCode::SUCCESS);
    }
    let providers = provider_registry(global, args, 0);
    serve(global, args.clone(), Arc::new(nitro), providers)
}

/// A hardware box starts only when every NVIDIA GPU its system shows is one it attests (review
/// 24b G3): a host that passes a GPU into the guest of a box started without
/// `--gpu-evidence-cmd` (or with a collector naming fewer GPUs) would have the box attest
/// `gpus = 0` while a CUDA build's llama.cpp may still use the GPU (its op offload, on by
/// default, moves the operations of 32-token and larger batches, the prompt's, to a GPU backend
/// whatever the layer count), its traffic passing through buffers the host reads unless the GPU
/// is in CC mode, which only its evidence shows.
fn refuse_unattested_gpus(args: &BoxArgs, attested: usize) -> anyhow::Result<()> {
    let system = system_root();
    let roots = std::iter::once(system.as_path()).chain(args.gpu_root.as_deref());
    for root in roots {
        let seen = skillbox_jc::attest::VisibleGpus::under(root);
        if seen.count() <= attested {
            continue;
        }
        if args.gpu_evidence_cmd.is_none() {
            bail!(
                "this machine shows {} NVIDIA GPU(s) ({}) but the box was started without \
                 --gpu-evidence-cmd: nobody would attest them. Start the box with \
                 --gpu-evidence-cmd PATH (a collector printing their evidence), or launch the \
                 guest without the GPUs",
                seen.count(),
                seen.describe()
            );
        }
        bail!(
            "this machine shows {} NVIDIA GPU(s) ({}) but --gpu-evidence-cmd gave evidence for \
             {attested}: every GPU the box sees must be attested",
            seen.count(),
            seen.describe()
        );
    }
    Ok(())
}

/// The root a box looks for NVIDIA GPUs under: `/`, always, in a release build, so no flag and
/// no environment of the operator's can hide a GPU. A debug build (the tests') looks under
/// `SKILLBOX_DEBUG_SYSTEM_ROOT` instead where that is set, so the tests on a developer machine
/// with an NVIDIA GPU of its own look at a directory double (and a test can put a GPU in it):
/// the seam replaces the root, never the check. A debug binary is no box anyone pins: the
/// image it would run in measures other than the release build's the owners pin.
fn system_root() -> PathBuf {
    #[cfg(debug_assertions)]
    {
        if let Some(root) = std::env::var_os("SKILLBOX_DEBUG_SYSTEM_ROOT") {
            return PathBuf::from(root);
        }
    }
    PathBuf::from("/")
}

/// The providers this box reaches, from its flags; the local model's layers on `gpus` GPUs
/// (those its attested configuration names: 0 offloads no layer; a hardware box sees no GPU it
/// does not attest, [`refuse_unattested_gpus`]).
fn provider_registry(global: &crate::Global, args: &BoxArgs, gpus: u32) -> ProviderRegistry {
    let mut settings = ProviderSettings::new(model_path(global, args));
    settings.local_threads = args.local_threads.map(usize::from);
    settings.local_parallelism = usize::from(args.local_parallel);
    settings.local_context = args.local_context.map(|n| n as usize);
    settings.local_gpus = gpus;
    for (id, url) in &args.provider_urls {
        settings = settings.with_base_url(id.clone(), url.clone());
    }
    ProviderRegistry::from_settings(&settings)
}

/// The local provider's model file: `--local-model`, else `SKILLBOX_MODEL`, else the data dir's.
fn model_path(global: &crate::Global, args: &BoxArgs) -> PathBuf {
    args.local_model
        .clone()
        .unwrap_or_else(|| local::default_model_path(&global.data_dir()))
}

fn serve(
    global: &crate::Global,
    args: BoxArgs,
    attester: Arc<dyn Attester>,
    providers: ProviderRegistry,
) -> anyhow::Result<ExitCode> {
    let allowed_keys = allowed_keys(&args)?;
    let views = providers.views();
    let spent = global.data_dir().join("box").join("spent-programs");
    let runs = global.data_dir().join("box").join("runs.sqlite");
    // A run store only where its key is no secret kept from the host: insecure-dev. A box with
    // hardware isolation would keep its opened stakes and run keys under a key file on its
    // host's disk; it keeps its runs in memory (no platform sealing key is built).
    let insecure = attester.platform() == skillbox_jc::program::INSECURE_DEV;
    if !insecure && args.store_key_file.is_some() {
        anyhow::bail!(
            "--store-key-file: a {} box keeps no run store (its host could read the key); \
             its runs live in memory",
            attester.platform()
        );
    }
    let store_key = if insecure {
        let store_key_file = args
            .store_key_file
            .clone()
            .unwrap_or_else(|| global.data_dir().join("box").join("store.key"));
        Some(
            skillbox_jc::run::store::KeyFile::load_or_create(&store_key_file)
                .with_context(|| format!("the box storage key {}", store_key_file.display()))?,
        )
    } else {
        None
    };
    let allowed_count = allowed_keys.as_ref().map(Vec::len);
    // TLS (issue 31 item 2): the key is made before the core, so every statement binds it; from
    // the storage key where there is one, so a box restarted on its run store serves the key
    // its runs bound, fresh otherwise.
    let tls = (args.tls || !args.listen.ip().is_loopback())
        .then(|| match &store_key {
            Some(key) => skillbox_jc::tls::BoxTls::derived(key, &args.names),
            None => skillbox_jc::tls::BoxTls::generate(&args.names),
        })
        .transpose()
        .context("making the box's TLS key")?;
    let attester = match &tls {
        Some(t) => t.bind(attester),
        None => attester,
    };
    let core = BoxCore::new(
        attester.clone(),
        providers,
        BoxConfig {
            stake_budget_bytes: args.stake_budget_mib.saturating_mul(1 << 20),
            stake_budget_per_client_bytes: args
                .stake_budget_per_client_mib
                .unwrap_or(args.stake_budget_mib / 4)
                .saturating_mul(1 << 20),
            max_runs: args.max_runs,
            max_unstaked_per_client: args.max_unstaked_per_client,
            max_program_ttl_secs: args.max_program_ttl_secs,
            client_rate: rate(args.client_rate)?,
            key_rate: rate(args.key_rate)?,
            allowed_keys,
            ..BoxConfig::default()
        },
    )
    .with_spent_log(&spent, skillbox_jc::run::now_secs())
    .with_context(|| format!("the spent-program list {}", spent.display()))?;
    let core = match &store_key {
        Some(key) => core
            .with_run_store(&runs, key, skillbox_jc::run::now_secs())
            .with_context(|| format!("the run store {}", runs.display()))?,
        None => core,
    };
    let core = Arc::new(core.with_failpoint(args.crash_at.clone()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let addr = listener.local_addr().context("listener address")?;
        // First line: the URL (tests and scripts read it).
        let scheme = if tls.is_some() { "https" } else { "http" };
        println!("box listening on {scheme}://{addr}");
        let isolation = if attester.platform() == skillbox_jc::program::INSECURE_DEV {
            " (NO hardware isolation)"
        } else {
            ""
        };
        println!(
            "platform {}{isolation}, measurement {}",
            attester.platform(),
            attester.measurement()
        );
        if let Some(n) = allowed_count {
            println!("serving only programs with a party among {n} allowed node key(s)");
        }
        if let Some(key) = attester.identity_key() {
            println!("identity key {key} (pin it: skillbox box --show-identity)");
        }
        if let Some(t) = &tls {
            println!(
                "TLS key sha256 {} (bound into every attestation)",
                t.spki_sha256()
            );
        }
        for v in views {
            match (v.available, v.reason) {
                (true, _) => println!(
                    "provider {}: available{}",
                    v.id,
                    v.host.map(|h| format!(" at {h}")).unwrap_or_default()
                ),
                (false, reason) => println!(
                    "provider {}: unavailable ({})",
                    v.id,
                    reason.unwrap_or_default()
                ),
            }
        }
        // The runs a restart found running go on (a task each).
        core.resume();
        match &tls {
            Some(tls) => skillbox_jc::server::serve_tls(listener, core, &args.names, tls).await,
            None => skillbox_jc::server::serve_named(listener, core, &args.names).await,
        }
        .context("serving the box API")
    })?;
    Ok(ExitCode::SUCCESS)
}
