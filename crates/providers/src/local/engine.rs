//! The engine: one worker thread per loaded model owns the llama.cpp context and decodes every
//! generation in flight together. Each generation is a llama.cpp sequence with its own part of
//! one KV cache; every step is one `llama_decode` of a batch holding the next token of each
//! generation that is decoding plus prompt chunks of those still reading their prompt, so several
//! calls cost little more than one (decoding a small model is bound by memory bandwidth, not
//! arithmetic). The async threads only hand jobs over and await the answer.

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::{Inner, REPEAT_LAST_N, REPEAT_PENALTY, TOP_P, Timing, backend};
use crate::{ChatRequest, Completion, FinishReason, ProviderError, Usage};

/// Tokens in one decode step (llama.cpp's logical and physical batch).
pub(crate) const BATCH_TOKENS: usize = 512;

/// What a finished job hands back.
pub(crate) type Outcome = Result<(Completion, Timing), ProviderError>;

/// One generation to run. `reply` is called exactly once, from the worker thread, after the
/// generation's KV cells are free again.
pub(crate) struct Job {
    pub request: ChatRequest,
    pub cancel: Arc<AtomicBool>,
    pub reply: Reply,
}

/// How a job is answered (once).
pub(crate) type Reply = Box<dyn FnOnce(Outcome) + Send>;

impl Job {
    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// Counters, for tests and the bench: how the batching went.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    steps: AtomicU64,
    shared_steps: AtomicU64,
    max_sequences: AtomicUsize,
    prompt_tokens_fed: AtomicU64,
    attended_cells: AtomicU64,
    widest_window: AtomicU64,
    memory_ops: AtomicU64,
    chunk_tokens_beside_held: AtomicU64,
    padding_drops_outside_own_step: AtomicU64,
    held_steps: AtomicU64,
    held_steps_under_their_cost: AtomicU64,
    held_steps_past_their_cost: AtomicU64,
    held_steps_capped: AtomicU64,
    held_public_cells: AtomicU64,
    most_references_in_a_step: AtomicUsize,
}

/// A snapshot of the engine's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// `llama_decode` calls so far.
    pub steps: u64,
    /// Of those, steps that carried more than one generation.
    pub shared_steps: u64,
    /// Most generations carried by one step.
    pub max_sequences: usize,
    /// Tokens fed before sampling so far, prompts, their padding and reference tokens: under
    /// an allowance a run feeds as many as a body of exactly the allowance would (review 27
    /// F1), the span and one.
    pub prompt_tokens_fed: u64,
    /// The KV cells llama.cpp's attention spanned, summed over steps: each step's window as its
    /// graph computed it (llama-cpp-2's attention window probe), not the engine's idea of it.
    /// Today a decode step's window is `pad256(real prompt + answer so far)` (review 28 R28-1,
    /// open: see the slot's plan).
    pub attended_cells: u64,
    /// The widest window of any step so far.
    pub widest_window: u64,
    /// llama.cpp memory operations (`seq_rm`, `seq_cp`) so far: under an allowance a run
    /// drops its padding once and clears its sequence once, whatever the padding (review 28
    /// R28-8), and a finish that moves a slot down copies and clears once more.
    pub memory_ops: u64,
    /// Prompt tokens of other runs fed in steps that carried a held run past its reference:
    /// 0, for the hold costs such a step as single tokens (review 30 R30-2).
    pub chunk_tokens_beside_held: u64,
    /// Padding drops timed in a step that did not carry their run: 0, for a drop goes in the
    /// timed step that carries its run's next token (review 31 R31-11). Its work is linear in
    /// the padding, the allowance less the body, so it counts as the run's own step (whose
    /// real time the hold replaces by its public cost), never as time that passes as it came.
    pub padding_drops_outside_own_step: u64,
    /// Steps that carried a held run past its reference: each paced to its public cost
    /// (review 31 R31-1).
    pub held_steps: u64,
    /// Of those, steps that ended, as the worker's timeline shows them to every run, before
    /// their public cost: their real time, the held runs' bodies, in every other run's time
    /// (a neighbour prefilling between them waited through them). 0: each is paced.
    pub held_steps_under_their_cost: u64,
    /// Of those, steps whose real time outran their public cost (the load rose past the
    /// margin after the reference): each ended on the next rung of its public cost's ladder
    /// past its real end (review 32 R32-2), and their held runs leave on the ladder.
    pub held_steps_past_their_cost: u64,
    /// Of those, steps whose public cost was more than [`STEP_CAP`] times their real time and
    /// that ended on the lowest rung of its ladder down at or above that (review 32 R32-1):
    /// no run's step is slowed past that bound by a neighbour's cost.
    pub held_steps_capped: u64,
    /// The public cells of those steps, summed: every token's public window, none real
    /// (review 32 R32-3: a held run's steps count the same whatever its body).
    pub held_public_cells: u64,
    /// Most reference steps measured in one step: 1, for a step carrying several was charged
    /// whole to each (review 32 R32-1).
    pub most_references_in_a_step: usize,
}

/// How the engine runs (resolved: no defaults left open).
#[derive(Clone, Copy, Debug)]
pub(crate) struct EngineConfig {
    pub threads: usize,
    pub parallel: usize,
    /// Tokens per generation (prompt and answer).
    pub context: usize,
    /// Whether any work may go to a GPU: only when the attested configuration names GPUs.
    pub offload: bool,
}

pub(crate) struct Engine {
    jobs: Mutex<Sender<Vec<Job>>>,
    counters: Arc<Counters>,
}

/// llama.cpp's context constructor mutates the model (see llama-cpp-2's `new_context`), so
/// contexts are made one at a time in the process.
static CONTEXT_LOCK: Mutex<()> = Mutex::new(());

impl Engine {
    /// Starts the worker thread and waits until it has its context (KV cache allocated).
    pub fn start(inner: Arc<Inner>, config: EngineConfig) -> Result<Engine, ProviderError> {
        let (jobs, rx) = mpsc::channel::<Vec<Job>>();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let counters = Arc::new(Counters::default());
        let worker_counters = counters.clone();
        std::thread::Builder::new()
            .name("skillbox-local-model".into())
            .spawn(move || work(inner, config, rx, worker_counters, ready_tx))
            .map_err(|e| unavailable(format!("cannot start its worker thread: {e}")))?;
        ready_rx
            .recv()
            .map_err(|_| unavailable("its worker thread stopped while starting"))??;
        Ok(Engine {
            jobs: Mutex::new(jobs),
            counters,
        })
    }

    /// Hands jobs to the worker; jobs sent together are admitted together (as far as there are
    /// free sequences), so they decode in the same steps.
    pub fn submit(&self, jobs: Vec<Job>) -> Result<(), ProviderError> {
        let sender = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        sender.send(jobs).map_err(|mpsc::SendError(jobs)| {
            for job in jobs {
                (job.reply)(Err(unavailable("its worker thread has stopped")));
            }
            unavailable("its worker thread has stopped")
        })
    }

    pub fn stats(&self) -> EngineStats {
        EngineStats {
            steps: self.counters.steps.load(Ordering::Relaxed),
            shared_steps: self.counters.shared_steps.load(Ordering::Relaxed),
            max_sequences: self.counters.max_sequences.load(Ordering::Relaxed),
            prompt_tokens_fed: self.counters.prompt_tokens_fed.load(Ordering::Relaxed),
            attended_cells: self.counters.attended_cells.load(Ordering::Relaxed),
            widest_window: self.counters.widest_window.load(Ordering::Relaxed),
            memory_ops: self.counters.memory_ops.load(Ordering::Relaxed),
            chunk_tokens_beside_held: self
                .counters
                .chunk_tokens_beside_held
                .load(Ordering::Relaxed),
            padding_drops_outside_own_step: self
                .counters
                .padding_drops_outside_own_step
                .load(Ordering::Relaxed),
            held_steps: self.counters.held_steps.load(Ordering::Relaxed),
            held_steps_under_their_cost: self
                .counters
                .held_steps_under_their_cost
                .load(Ordering::Relaxed),
            held_steps_past_their_cost: self
                .counters
                .held_steps_past_their_cost
                .load(Ordering::Relaxed),
            held_steps_capped: self.counters.held_steps_capped.load(Ordering::Relaxed),
            held_public_cells: self.counters.held_public_cells.load(Ordering::Relaxed),
            most_references_in_a_step: self
                .counters
                .most_references_in_a_step
                .load(Ordering::Relaxed),
        }
    }
}

fn unavailable(what: impl std::fmt::Display) -> ProviderError {
    ProviderError::Unavailable(format!("local model: {what}"))
}

fn cancelled() -> ProviderError {
    ProviderError::Unavailable("local model run cancelled".into())
}

/// One generation in flight.
///
/// Under an owner's allowance the slot feeds `padding` throwaway tokens besides its prompt, so
/// its prefill costs what a body of exactly the allowance would: the prompt's work was linear
/// in the body's real tokens, and a caller timing its calls read the body's length off it
/// (review 27 F1, ~9-22 ms a token). The plan, in feeding order: the prompt but its last
/// token; the padding, at the positions that follow (causal attention: no prompt token sees
/// it); then, once the padding's cells are dropped, the prompt's last token at its own
/// position, whose logits give the first answer token. So the answer is the one the prompt
/// alone gives, the padding is gone before decoding (the cells hold the answer's budget as
/// admission promised), and how the plan splits into steps depends only on its length, the
/// allowance's. The last token has a step of its own and the padding's removal is asked for
/// even when the padding is empty (a body filling its allowance exactly): that run used to be
/// one step and one memory operation shorter (review 28 R28-8).
///
/// The decode is not padded but held (review 28 R28-1): once the padding is dropped, each
/// decode step attends over llama.cpp's window of the real prompt plus the answer (rounded up
/// to 256 cells), and its flash attention works only on the cells a token may see, so a
/// decode step costs more for a longer body (`EngineStats::attended_cells` counts the
/// windows): ~20 ms a step at a 60-token body, 35-45 ms at 900, one call's answer time told
/// the length. The padding cannot stay in the slot's stream invisible to the answer:
/// llama.cpp requires each decode's first position to follow the sequence's highest one, so
/// a padding cell moved past the answer stops the next decode, and in a stream of its own
/// every live cell is the sequence's. A pool shared by all sequences with the padding in a
/// companion sequence and dense attention keeps the work at the span's, but then a
/// generation's cells interleave with the others' and its answer is no longer the same alone
/// and batched. So under an allowance the plan has one more throwaway token after the
/// padding, fed in a step of its own, the *reference step*: one token attending over the
/// whole span, what an answer step of a body of exactly the allowance costs, measured now on
/// this machine under this load (its cell goes with the padding's). The answer is released
/// at [`Hold::release`]: that cost over the span's cells for the steps after it
/// ([`span_cells`]) and the neighbours' public cells, plus the time that was not its own
/// steps' (others' steps, the engine's work): public values and
/// the machine's speed, not the body's length (`Timing::hold_until`). Review 30 closed the
/// ways around it: a reference is read only by runs of its own window (R30-1), a held run's
/// steps carry no prompt chunk and a reference step nothing else (R30-2, R30-9), a run past
/// its hold leaves on a ladder, not at its end (R30-2), and a held answer keeps its place
/// until it leaves (R30-9). Review 31 R31-1: every step carrying a held run lasts its public
/// cost ([`Worker::pace_held_step`]), for a neighbour reading its prompt between a held run's
/// steps waited through their real time before its own hold began; the held run's own time
/// after its reference is then public but where a step outran its cost, and it leaves at its
/// end or on the ladder of what outran.
struct Slot {
    seq: i32,
    job: Job,
    prompt: Vec<LlamaToken>,
    padding: usize,
    /// Whether the padding's cells were dropped (only then may the prompt's last token go in:
    /// llama.cpp wants a sequence's positions consecutive).
    padding_dropped: bool,
    /// Whether the padding was dropped in the step being built and the slot's token is not in
    /// it yet (R31-11: the drop's time must be its own step's).
    dropped_in_step: bool,
    /// Whether the run is under an owner's allowance: its plan has a reference step and its
    /// answer a release time (R28-1).
    held: bool,
    /// What the answer's release time is made of, once the reference step ran.
    hold: Option<Hold>,
    /// Tokens of the plan (prompt and padding) already decoded.
    fed: usize,
    budget: usize,
    generated: Vec<LlamaToken>,
    /// The last sampled token, to be decoded in the next step.
    next: Option<LlamaToken>,
    sampler: LlamaSampler,
    admitted: Instant,
    first_token: Option<Instant>,
    decode_steps: usize,
}

enum Step {
    Continue,
    Done(FinishReason),
}

impl Slot {
    /// Position of the answer token this slot feeds next.
    fn position(&self) -> i32 {
        let pos = self.prompt.len() + self.generated.len() - 1;
        i32::try_from(pos).unwrap_or(i32::MAX)
    }

    /// Tokens this slot feeds before it samples: its prompt, its padding and, under an
    /// allowance, the reference token.
    fn plan_len(&self) -> usize {
        self.prompt.len() + self.padding + usize::from(self.held)
    }

    /// The prompt and its padding: the allowance's span under one (what `usage` reports).
    fn span(&self) -> usize {
        self.prompt.len() + self.padding
    }

    /// The plan's `k`th token and its position (see [`Slot`]). The padding and the reference
    /// token repeat the prompt's first token: what a token costs does not depend on which it
    /// is. The reference token is one more throwaway token, never the prompt's, so the
    /// prompt's tokens go in the same chunks as without an allowance and its answer is the
    /// same.
    fn planned(&self, k: usize) -> (LlamaToken, usize) {
        let last = self.prompt.len().saturating_sub(1);
        if k < last {
            (self.prompt[k], k)
        } else if k < last + self.padding + usize::from(self.held) {
            (self.prompt[0], k)
        } else {
            (self.prompt[last], last)
        }
    }

    /// Whether the plan but its last token is in and the padding's cells (none, if the prompt
    /// fills the span) are still to be dropped.
    fn padding_to_drop(&self) -> bool {
        !self.padding_dropped && self.fed + 1 == self.plan_len()
    }

    /// Where the next prompt chunk must stop: before the reference token, which goes alone;
    /// then before the prompt's last token, which waits for the padding's removal.
    fn chunk_end(&self) -> usize {
        let plan = self.plan_len();
        if self.padding_dropped {
            plan
        } else if self.held && plan >= 2 && self.fed < plan - 2 {
            plan - 2
        } else {
            plan - 1
        }
    }

    /// Whether this step carries the slot's reference token (and only it).
    fn reference_due(&self) -> bool {
        self.held && self.hold.is_none() && self.plan_len() >= 2 && self.fed + 2 == self.plan_len()
    }

    /// Whether a step of `turn` carries this slot (review 30 R30-2, R30-9).
    fn carried_in(&self, turn: Turn) -> bool {
        match turn {
            Turn::Reference => self.reference_due(),
            Turn::Held => self.next.is_some() || self.held_running(),
            Turn::Chunks => self.next.is_none() && !self.held_running(),
            Turn::Mixed => true,
        }
    }

    /// Whether this is a held run past its reference step: its steps are costed by the hold,
    /// so what else goes in them must be costable from public values (review 30 R30-2).
    fn held_running(&self) -> bool {
        self.hold.is_some()
    }

    /// The cells the slot's next token attends over as far as anyone may know: the window of
    /// the span (the allowance's, under one) and the answer so far, not of the real prompt.
    fn public_window(&self) -> usize {
        window_of(self.span() + self.generated.len())
    }

    fn on_token(&mut self, inner: &Inner, token: LlamaToken) -> Step {
        if self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
        if inner.is_stop(token) {
            return Step::Done(FinishReason::Stop);
        }
        self.generated.push(token);
        if self.generated.len() >= self.budget {
            return Step::Done(FinishReason::Length);
        }
        self.next = Some(token);
        Step::Continue
    }

    /// The run's answer and timing, its last step ending at `step_end` (paced, R31-1).
    fn outcome(&self, inner: &Inner, finish: FinishReason, step_end: Instant) -> Outcome {
        let now = Instant::now().max(step_end);
        let first = self.first_token.unwrap_or(now);
        let text = inner.tokenizer.decode_tokens(&self.generated, true);
        Ok((
            Completion {
                text,
                finish,
                usage: Usage {
                    // Under an allowance, the allowance's figure: the real one is the body's
                    // length one field away from a receipt.
                    prompt_tokens: self.span() as u64,
                    completion_tokens: self.generated.len() as u64,
                    cost: None,
                },
            },
            Timing {
                prompt: first - self.admitted,
                decode: now - first,
                decoded_tokens: self.decode_steps,
                hold_until: self.hold.map(|hold| hold.release(now).0),
                rung: self.hold.map(|hold| hold.release(now).1),
                reference_after: self.hold.map(|hold| hold.reference_ended - self.admitted),
                admitted: Some(self.admitted),
                held_cells: self.hold.map(|hold| hold.cells(self.span())),
                held_steps: self.hold.map(|hold| hold.steps),
                others: self.hold.map(|hold| hold.others(now)),
                outran: self.hold.map(|hold| hold.outran),
            },
        ))
    }
}

/// The median of `values` (the lower one of an even count: of a young ring's two entries,
/// not the one a stalled step set, review 32 R32-1); 0 for none.
fn median(values: &VecDeque<f64>) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().collect();
    sorted.sort_by(f64::total_cmp);
    sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0.0)
}

/// llama.cpp's attention window for `cells` cells in use: rounded up to 256.
fn window_of(cells: usize) -> usize {
    cells.div_ceil(256).max(1) * 256
}

/// How much longer than measured a held answer waits: the reference is one step, and a step
/// of the same work varies by about this much on a loaded machine.
const RELEASE_MARGIN: f64 = 1.25;

/// Each rung of the release ladder is this many times the one below (review 30 R30-2).
const LADDER: f64 = 1.5;

/// The longest an answer is held: a clock fault must not hold one for ever.
const HOLD_MAX: Duration = Duration::from_secs(86_400);

/// `cells` window cells at `cost_per_cell`, with [`RELEASE_MARGIN`]; nothing for a cost that
/// is no positive number, at most [`HOLD_MAX`].
#[cfg(test)]
fn cells_time(cost_per_cell: f64, cells: usize) -> Duration {
    margin_time(cost_per_cell * cells as f64)
}

/// `seconds` with [`RELEASE_MARGIN`]; nothing for no positive number, at most [`HOLD_MAX`].
fn margin_time(seconds: f64) -> Duration {
    let seconds = seconds * RELEASE_MARGIN;
    if seconds.is_finite() && seconds > 0.0 {
        Duration::from_secs_f64(seconds.min(HOLD_MAX.as_secs_f64()))
    } else {
        Duration::ZERO
    }
}

/// The most a step carrying a held run is paced to, in times its real time, before its ladder
/// down (review 32 R32-1; see [`paced`]).
const STEP_CAP: f64 = 3.0;

/// The public cost of a step carrying held runs past their reference (review 31 R31-1, review
/// 32 R32-1), from each carried slot's public cells and, for a held run past its reference,
/// its cost per cell: for each held run, its own cells at its own cost — its window's
/// reference steps, the step's fixed part and its cells, what R30-1 keeps it from being
/// under-costed by — and every other token's cells at `marginal`, the cheapest cost per cell
/// any window's references measured (the fixed part spread over the widest window: at most
/// that much above what a cell really adds), never above the run's own; the dearest of these,
/// with the margin. Before, the dearest held run's cost per cell was charged for every cell
/// of the step: a narrow run (its fixed part over 256 cells, 9× a cell's real cost) paced a
/// wide neighbour's steps 8-12× their real time for as long as it answered. Now a step costs
/// its fixed part once per run at most, whatever any run's window. `None`: no held run.
fn step_cost(carried: &[(usize, Option<f64>)], marginal: Option<f64>) -> Option<Duration> {
    let all: usize = carried.iter().map(|&(cells, _)| cells).sum();
    carried
        .iter()
        .filter(|&&(cells, _)| cells > 0)
        .filter_map(|&(cells, cost)| {
            let cost = cost?;
            let rate = marginal.map_or(cost, |m| m.min(cost));
            Some(cost * cells as f64 + rate * (all - cells) as f64)
        })
        .reduce(f64::max)
        .map(margin_time)
}

/// How a held step's time was shown (review 32 R32-1, R32-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pace {
    /// Its public cost.
    Public,
    /// Its real time outran its public cost: the next rung of that cost's ladder past it.
    Past,
    /// Its public cost was over [`STEP_CAP`] times its real time: the lowest rung of that
    /// cost's ladder down at or above that.
    Capped,
}

/// What a step carrying a held run, of public cost `public` and real time `real`, lasts as
/// every run sees it. Its public cost (R31-1: a held run's body, which its real time follows,
/// shows no one), unless:
/// - its real time outran it (the load rose past the margin after the reference): then the
///   first rung `public × LADDER^k` at or past its real end (R32-2: before, its real end,
///   the continuous excess, the body's share in it, showed every neighbour; now a rung, as the
///   held run's own release does);
/// - it is more than [`STEP_CAP`] times the real time (a neighbour's cost, a stalled
///   reference): then the lowest rung `public / LADDER^k` at or above `STEP_CAP × real`
///   (R32-1: no run's step is slowed more than `STEP_CAP × LADDER` past its real time by what
///   others' references measured; what shows is a rung of the real time, not the time).
fn paced(public: Duration, real: Duration) -> (Duration, Pace) {
    if real > public {
        // No cost (none measured) climbs from a millisecond, as the release does.
        let mut rung = public.max(Duration::from_millis(1));
        while rung < real && rung < HOLD_MAX {
            rung = rung.mul_f64(LADDER).min(HOLD_MAX);
        }
        return (rung, Pace::Past);
    }
    let floor = real.mul_f64(STEP_CAP);
    if public <= floor {
        return (public, Pace::Public);
    }
    let mut rung = public;
    while rung.div_f64(LADDER) >= floor {
        rung = rung.div_f64(LADDER);
    }
    (rung, Pace::Capped)
}

/// The window cells of a run's `steps` steps after its reference step (R28-1), each costed
/// as a step of a body filling the allowance would be: one token over the span and the answer
/// so far, `window_of(span + j)` cells. Every input is public: the span (`frame_max +
/// allowance + user`) and the answer's steps. At the cost per cell that reference steps of the
/// same window measured (R30-1), this overestimates a step's fixed part, never underestimates
/// it: answers come late, not early.
fn span_cells(span: usize, steps: usize) -> usize {
    (0..steps).map(|j| window_of(span + j)).sum()
}

/// When an answer held for `held` after its reference step may leave, its run having ended
/// at `ended` (review 30 R30-2): at `reference_ended + held` if the run ended by then, else
/// at the first rung `held × LADDER^k` past the end. A run outlasts its hold only when the
/// machine or the neighbours it shared steps with slowed it past the margin, and then the
/// real end — the body's length under that load — would show; on the ladder what shows is
/// the rung, a factor of 1.5 wide: how much the load outran the hold.
///
/// The rung does not hide the body under load (review 31 R31-2, open): the body's share of a
/// decode step is 30-50 % (10 ms against 14.4 ms a step for a 60- and a 900-token body here),
/// so a short body's steps outrun their public cost at a load about 1.45× higher than a full
/// body's — ≈ 0.9 of a rung. For any load in a band above the margin (1.25-1.8× the
/// reference's: rung 0 against 1; 1.8-2.7×: 1 against 2; ...) the rung differs with the
/// body, about a bit a loaded call, not only at a rung's edge. Closing it needs a public
/// cost that follows the load during the run (references measured while it decodes).
pub(crate) fn release_at(
    reference_ended: Instant,
    held: Duration,
    ended: Instant,
) -> (Instant, u32) {
    let held = held.min(HOLD_MAX);
    if reference_ended + held >= ended {
        return (reference_ended + held, 0);
    }
    // A hold of nothing (no measured cost) climbs from a millisecond, never stands still.
    let mut rung = held.max(Duration::from_millis(1));
    let mut k = 0;
    while reference_ended + rung < ended && rung < HOLD_MAX {
        rung = rung.mul_f64(LADDER).min(HOLD_MAX);
        k += 1;
    }
    (reference_ended + rung, k)
}

/// What a held run's release time is made of (R28-1, review 30): every part public or the
/// machine's, none the body's.
#[derive(Clone, Copy, Debug)]
struct Hold {
    /// The cost per window cell of reference steps of this run's window (the median of the
    /// last few, this run's included).
    cost_per_cell: f64,
    /// When the run's reference step ended.
    reference_ended: Instant,
    /// Steps the run took part in after its reference step.
    steps: usize,
    /// The cells the other slots' tokens in those steps attend over, each at its public
    /// window (a held neighbour's span, not its body): their share of a step shared with this
    /// run, costed like this run's own (review 30 R30-2).
    neighbour_cells: usize,
    /// The time of those steps as paced (review 31 R31-1): each lasted its public cost — its
    /// tokens' public cells at the dearest cost per cell of its held runs — or, where its real
    /// time outran that, its real time. The rest of the run's time — steps it was kept out of
    /// (another run's reference, prompt chunks kept out of held steps), admitting others — is
    /// others' work and the engine's, none of this body's, and passes as it came (review 30
    /// R30-2).
    own_time: Duration,
    /// How far those steps' real time outran their public cost, summed: the only part of the
    /// run's time its body can be in (the load rose past the margin after the reference).
    outran: Duration,
}

impl Hold {
    /// The window cells the hold costs: the run's steps over the span, as [`span_cells`]
    /// counts them, and its neighbours' public cells.
    fn cells(&self, span: usize) -> usize {
        span_cells(span, self.steps).saturating_add(self.neighbour_cells)
    }

    /// The run's time after its reference that was not its own steps': others' steps, the
    /// engine's work (R31-9: `Timing::others`).
    fn others(&self, ended: Instant) -> Duration {
        ended
            .saturating_duration_since(self.reference_ended)
            .saturating_sub(self.own_time)
    }

    /// When the answer may leave, the run having ended at `ended`, and on which rung. Its own
    /// steps were paced to their public cost (R31-1), so its time after the reference is
    /// public but where a step outran that cost: held is that time less the outrun, the run's
    /// own steps at their public cost and the rest as it came, and a run that outran leaves
    /// on the ladder of it (R30-2), at its end otherwise.
    fn release(&self, ended: Instant) -> (Instant, u32) {
        let held = self
            .own_time
            .saturating_sub(self.outran)
            .saturating_add(self.others(ended))
            .min(HOLD_MAX);
        release_at(self.reference_ended, held, ended)
    }
}

/// The last reference steps' costs per window cell, kept per window (review 30 R30-1): a run
/// is held by the median of the steps of its own window, so neither one step that ran quickly
/// nor one the scheduler stalled sets it, and a caller's calls with another span (a long user
/// message, another skill's allowance) cannot set it either — a step's fixed part spread over
/// a wider window's cells costs a narrower run's steps short of their real time.
#[derive(Debug, Default)]
pub(crate) struct ReferenceCosts {
    by_window: HashMap<usize, VecDeque<f64>>,
}

impl ReferenceCosts {
    /// Records a reference step over `window` cells; returns the cost per cell a run of that
    /// window is held by ([`ReferenceCosts::cost_per_cell`]). Bounded: one ring per 256 cells
    /// of context.
    pub(crate) fn record(&mut self, window: usize, cost_per_cell: f64) -> f64 {
        let ring = self.by_window.entry(window).or_default();
        if ring.len() == REFERENCE_STEPS_KEPT {
            ring.pop_front();
        }
        ring.push_back(cost_per_cell);
        self.cost_per_cell(window)
    }

    /// The cost per cell a run of `window` is held by: the median of its window's ring, and a
    /// step over it no dearer than the median step of any wider window measured (review 32
    /// R32-1): a step over fewer cells does no more work, so a ring inflated by a stalled or
    /// engineered sample — a young ring's, an unusual window only one caller uses — is held
    /// to what the wider windows measured. 0 with no ring.
    fn cost_per_cell(&self, window: usize) -> f64 {
        let own = self.by_window.get(&window).map_or(0.0, median);
        self.by_window
            .iter()
            .filter(|&(&wider, ring)| wider > window && !ring.is_empty())
            .map(|(&wider, ring)| median(ring) * wider as f64 / window.max(1) as f64)
            .fold(own, f64::min)
    }

    /// The cheapest cost per cell of any window's references: a step's fixed part spread
    /// over the widest cells measured, plus what a cell adds. What a step charges the cells of
    /// tokens other than a held run's own ([`step_cost`]). `None` before any reference.
    fn marginal(&self) -> Option<f64> {
        self.by_window
            .keys()
            .map(|&window| self.cost_per_cell(window))
            .filter(|cost| cost.is_finite() && *cost > 0.0)
            .reduce(f64::min)
    }
}

/// Which slots a step carries (review 30 R30-2, R30-9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    /// Only reference tokens: what one token over the span costs, nothing else in it.
    Reference,
    /// The decoding slots and the held runs' last prompt tokens, no prompt chunk: a held
    /// run's step, costable from public values.
    Held,
    /// Only prompt chunks of runs not yet held; held runs wait a step, and its time passes
    /// into their release as it came (it is not their body's).
    Chunks,
    /// No held run is past its reference, or no chunk waits: everything fits in one step.
    Mixed,
}

fn sampler_for(request: &ChatRequest, n_vocab: i32) -> LlamaSampler {
    let penalties =
        LlamaSampler::penalties(n_vocab, REPEAT_LAST_N as i32, REPEAT_PENALTY, 0.0, 0.0);
    if request.temperature > 0.0 && request.temperature.is_finite() {
        let seed = request.seed.unwrap_or_else(super::fresh_seed);
        // llama.cpp reads u32::MAX as "pick a random seed".
        let seed = match (seed ^ (seed >> 32)) as u32 {
            u32::MAX => u32::MAX - 1,
            s => s,
        };
        LlamaSampler::chain_simple([
            penalties,
            LlamaSampler::temp(request.temperature),
            LlamaSampler::top_p(TOP_P, 1),
            LlamaSampler::dist(seed),
        ])
    } else {
        LlamaSampler::chain_simple([penalties, LlamaSampler::greedy()])
    }
}

fn context_params(config: &EngineConfig) -> LlamaContextParams {
    let threads = i32::try_from(config.threads).unwrap_or(i32::MAX);
    let parallel = u32::try_from(config.parallel).unwrap_or(u32::MAX);
    let cells = u32::try_from(config.context.saturating_mul(config.parallel)).unwrap_or(u32::MAX);
    LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(cells))
        .with_n_batch(BATCH_TOKENS as u32)
        .with_n_ubatch(BATCH_TOKENS as u32)
        .with_n_seq_max(parallel)
        // One pool of cells for all sequences: a batch mixing any sequences is one ubatch (split
        // KV streams would need equal-length runs of consecutive sequence ids).
        // A KV stream of its own per sequence: a generation's attention never sees another's
        // cells, so its answer is the same alone or batched.
        .with_kv_unified(false)
        // With no layer on a GPU, llama.cpp still moves the KV cache (`offload_kqv`) and the
        // matrix work of prompt batches of 32+ tokens (`op_offload`) to a compiled-in GPU
        // backend by default: the whole prompt would cross to a device the attestation does
        // not name.
        .with_offload_kqv(config.offload)
        .with_op_offload(config.offload)
        .with_n_threads(threads)
        .with_n_threads_batch(threads)
}

fn work(
    inner: Arc<Inner>,
    config: EngineConfig,
    rx: Receiver<Vec<Job>>,
    counters: Arc<Counters>,
    ready: mpsc::SyncSender<Result<(), ProviderError>>,
) {
    // llama.cpp keeps the probe's address for the context's life; one small leak per engine
    // (an engine lives as long as its model, the process's in the box).
    let window: &'static AtomicU32 = Box::leak(Box::new(AtomicU32::new(0)));
    let context = {
        let _one_at_a_time = CONTEXT_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let params = context_params(&config).with_attention_window_probe(window);
        inner.model.new_context(backend(), params)
    };
    let mut ctx = match context {
        Ok(ctx) => ctx,
        Err(e) => {
            let _ = ready.send(Err(unavailable(format!(
                "cannot make its context ({} sequences of {} tokens): {e}",
                config.parallel, config.context
            ))));
            return;
        }
    };
    if ready.send(Ok(())).is_err() {
        return;
    }
    drop(ready);
    Worker {
        inner: &inner,
        config,
        counters: &counters,
        batch: LlamaBatch::new(BATCH_TOKENS, 1),
        slots: (0..config.parallel).map(|_| None).collect(),
        queue: VecDeque::new(),
        n_vocab: inner.model.n_vocab(),
        window,
        reference_costs: ReferenceCosts::default(),
        reserved: Vec::new(),
        prefill_turn: false,
        replies: Vec::new(),
    }
    .run(&mut ctx, &rx);
}

struct Worker<'a> {
    inner: &'a Inner,
    config: EngineConfig,
    counters: &'a Counters,
    batch: LlamaBatch<'static>,
    slots: Vec<Option<Slot>>,
    queue: VecDeque<Job>,
    n_vocab: i32,
    /// The widest attention window of the graph computed last (llama-cpp-2's probe).
    window: &'static AtomicU32,
    /// The last reference steps' costs per window cell, per window (R28-1, R30-1).
    reference_costs: ReferenceCosts,
    /// Until when the places of held answers that have finished stay taken (review 30 R30-9):
    /// a place freed at a run's real end would let the next job in then, and that job's
    /// start would tell when the held run really ended.
    reserved: Vec<Instant>,
    /// Whether the last step that had to choose between held runs and prompt chunks took
    /// the chunks: they alternate, so neither starves.
    prefill_turn: bool,
    /// Outcomes of the runs finished in this step, answered once it is paced (R31-1).
    replies: Vec<(Reply, Outcome)>,
}

/// When a place is next free, if none of `places` (those no run is busy in) is free now:
/// the first of the held answers' reservations (review 30 R30-9) to end, once those past are
/// dropped. `None` when a place is free: a job waiting then is admitted, not kept waiting for
/// a held release while another place stands empty (review 31 R31-10).
fn place_free_at(reserved: &mut Vec<Instant>, places: usize, now: Instant) -> Option<Instant> {
    reserved.retain(|&until| until > now);
    if reserved.len() < places {
        return None;
    }
    // No place at all (every one busy) is "free" no sooner than the next step.
    Some(reserved.iter().min().copied().unwrap_or(now))
}

/// How many reference steps the hold's median reads.
const REFERENCE_STEPS_KEPT: usize = 5;

/// The longest the worker waits at once while pacing a step, before it looks at new and
/// cancelled jobs (review 32 R32-1).
const PACE_SLICE: Duration = Duration::from_millis(20);

impl Worker<'_> {
    fn run(&mut self, ctx: &mut LlamaContext<'_>, rx: &Receiver<Vec<Job>>) {
        let mut open = true;
        loop {
            if !self.slots.iter().any(Option::is_some) {
                if self.queue.is_empty() {
                    if !open {
                        return;
                    }
                    match rx.recv() {
                        Ok(jobs) => self.queue.extend(jobs),
                        Err(_) => return,
                    }
                } else if let Some(until) =
                    place_free_at(&mut self.reserved, self.slots.len(), Instant::now())
                {
                    // Every place is a held answer's (R30-9): wait for the first to free, or
                    // for new jobs (a cancelled one is answered then).
                    let wait = until.saturating_duration_since(Instant::now());
                    if open {
                        match rx.recv_timeout(wait) {
                            Ok(jobs) => self.queue.extend(jobs),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => open = false,
                        }
                    } else {
                        std::thread::sleep(wait);
                    }
                }
            }
            while open {
                match rx.try_recv() {
                    Ok(jobs) => self.queue.extend(jobs),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => open = false,
                }
            }
            self.drop_cancelled(ctx);
            self.answer();
            self.admit();
            self.step(ctx, rx, &mut open);
            self.answer();
        }
    }

    fn drop_cancelled(&mut self, ctx: &mut LlamaContext<'_>) {
        let (gone, keep): (Vec<Job>, Vec<Job>) = self.queue.drain(..).partition(Job::cancelled);
        self.queue.extend(keep);
        for job in gone {
            (job.reply)(Err(cancelled()));
        }
        // From the top: a finish moves a higher slot down, into a place already looked at.
        for i in (0..self.slots.len()).rev() {
            if self.slots[i].as_ref().is_some_and(|s| s.job.cancelled()) {
                self.finish(ctx, i, Err(cancelled()));
            }
        }
    }

    fn admit(&mut self) {
        loop {
            let busy = self.slots.iter().flatten().count();
            if place_free_at(&mut self.reserved, self.slots.len() - busy, Instant::now()).is_some()
            {
                return;
            }
            let Some(free) = self.slots.iter().position(Option::is_none) else {
                return;
            };
            let Some(job) = self.queue.pop_front() else {
                return;
            };
            let admitted = Instant::now();
            // What the prompt may be and the answer's budget: see `Inner::admission` (with the
            // owner's allowance neither depends on the body's real length).
            let (prompt, budget, padding) =
                match self.inner.admission(&job.request, self.config.context) {
                    Ok(let_in) => (let_in.prompt, let_in.budget, let_in.padding),
                    Err(e) => {
                        (job.reply)(Err(e));
                        continue;
                    }
                };
            // An empty prompt would never sample (every frame has tokens of its own).
            if prompt.is_empty() {
                (job.reply)(Err(unavailable("its chat frame gave an empty prompt")));
                continue;
            }
            if budget == 0 {
                let usage = Usage {
                    prompt_tokens: (prompt.len() + padding) as u64,
                    completion_tokens: 0,
                    cost: None,
                };
                let completion = Completion {
                    text: String::new(),
                    finish: FinishReason::Length,
                    usage,
                };
                (job.reply)(Ok((completion, Timing::default())));
                continue;
            }
            let seq = i32::try_from(free).unwrap_or(i32::MAX);
            let held = job.request.system_allowance.is_some();
            self.slots[free] = Some(Slot {
                seq,
                sampler: sampler_for(&job.request, self.n_vocab),
                job,
                prompt,
                padding,
                padding_dropped: false,
                dropped_in_step: false,
                held,
                hold: None,
                fed: 0,
                budget,
                generated: Vec::with_capacity(budget.min(4096)),
                next: None,
                admitted,
                first_token: None,
                decode_steps: 0,
            });
        }
    }

    /// Drops the padding's cells of every slot this `turn` carries whose plan but its last
    /// token is in, before that token goes in (an empty padding too: the same operations
    /// whatever the body). Called inside the step's timed part: llama.cpp's removal erases
    /// each cell's position, work linear in the padding (the allowance less the body), so it is
    /// the run's own step's time, which the hold replaces by its public cost (review 31
    /// R31-11); a slot the turn does not carry drops in a later step that does.
    fn drop_padding(&mut self, ctx: &mut LlamaContext<'_>, turn: Turn) {
        let mut failed = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(slot) = slot
                .as_mut()
                .filter(|s| s.padding_to_drop() && s.carried_in(turn))
            else {
                continue;
            };
            let from = u32::try_from(slot.prompt.len() - 1).ok();
            self.counters.memory_ops.fetch_add(1, Ordering::Relaxed);
            match ctx.clear_kv_cache_seq(u32::try_from(slot.seq).ok(), from, None) {
                Ok(true) => {
                    slot.padding_dropped = true;
                    slot.dropped_in_step = true;
                }
                // A model whose memory cannot drop part of a sequence (a recurrent one).
                _ => failed.push(i),
            }
        }
        // Highest first, so compaction never moves a slot that is about to finish.
        for i in failed.into_iter().rev() {
            let error = unavailable(
                "its memory cannot drop part of a sequence, which running under a body \
                 allowance needs",
            );
            self.finish(ctx, i, Err(error));
        }
    }

    /// Which slots the next step carries: a reference step alone; while a held run is past
    /// its reference, its steps (the decoding slots, single tokens all) and prompt chunks
    /// alternate, so a chunk — up to 500 tokens a caller's neighbouring call chooses — never
    /// shares a step the hold must cost (review 30 R30-2).
    fn turn(&mut self) -> Turn {
        let slots = || self.slots.iter().flatten();
        if slots().any(Slot::reference_due) {
            return Turn::Reference;
        }
        let held_running = slots().any(Slot::held_running);
        let chunks_waiting = slots().any(|s| s.next.is_none() && !s.held_running());
        if !(held_running && chunks_waiting) {
            return Turn::Mixed;
        }
        self.prefill_turn = !self.prefill_turn;
        if self.prefill_turn {
            Turn::Chunks
        } else {
            Turn::Held
        }
    }

    /// One decode, in slot order: the next token of every decoding slot, prompt chunks of those
    /// still reading their prompt (as much as fits after the decode tokens), as [`Turn`] lets.
    fn step(&mut self, ctx: &mut LlamaContext<'_>, rx: &Receiver<Vec<Job>>, open: &mut bool) {
        self.batch.clear();
        let turn = self.turn();
        // The step's own time starts before the padding's removal (R31-11).
        let started = Instant::now();
        self.drop_padding(ctx, turn);
        let decoding = self
            .slots
            .iter()
            .flatten()
            .filter(|s| s.next.is_some())
            .count();
        let mut prompt_room = BATCH_TOKENS.saturating_sub(decoding);
        // (slot, batch index) of each slot that samples after this step.
        let mut sampling: Vec<(usize, i32)> = Vec::new();
        // Slots whose reference token (R28-1) is in this step, and its window.
        let mut referencing: Vec<(usize, usize)> = Vec::new();
        // The public cells each slot's tokens in this step attend over (0: not in it).
        let mut cells = vec![0usize; self.slots.len()];
        // Other runs' prompt tokens in this step (R30-2: none beside a held run).
        let mut chunk_tokens = 0;
        let mut sequences = 0;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(slot) = slot else { continue };
            // One reference a step (review 32 R32-1): a step carrying several was charged
            // whole to each, its time over each one's own window, and a narrow run measured
            // beside wide ones set its window's cost per cell at many times a step's.
            if !slot.carried_in(turn) || (turn == Turn::Reference && !referencing.is_empty()) {
                continue;
            }
            if let Some(token) = slot.next {
                let at = self.batch.n_tokens();
                if self
                    .batch
                    .add(token, slot.position(), &[slot.seq], true)
                    .is_ok()
                {
                    slot.decode_steps += 1;
                    cells[i] = slot.public_window();
                    sampling.push((i, at));
                    sequences += 1;
                }
                continue;
            }
            let plan = slot.plan_len();
            let reference = slot.reference_due();
            let end = if reference {
                // One token alone, over the whole span.
                slot.fed + 1
            } else {
                // The prompt's last token waits for the step after the padding's, padding
                // or none; under an allowance the reference token goes alone before it.
                (slot.fed + prompt_room.min(plan - slot.fed)).min(slot.chunk_end())
            };
            if end <= slot.fed || end - slot.fed > prompt_room {
                continue;
            }
            if reference {
                referencing.push((i, window_of(plan - 1)));
            }
            let from = slot.fed;
            while slot.fed < end {
                let last = slot.fed + 1 == plan;
                let (token, pos) = slot.planned(slot.fed);
                let at = self.batch.n_tokens();
                let pos = i32::try_from(pos).unwrap_or(i32::MAX);
                if self.batch.add(token, pos, &[slot.seq], last).is_err() {
                    break;
                }
                slot.fed += 1;
                prompt_room -= 1;
                self.counters
                    .prompt_tokens_fed
                    .fetch_add(1, Ordering::Relaxed);
                if last {
                    sampling.push((i, at));
                }
            }
            cells[i] = (slot.fed - from) * window_of(slot.span().max(slot.fed));
            if slot.fed > from {
                slot.dropped_in_step = false;
            }
            if !slot.held_running() {
                chunk_tokens += slot.fed - from;
            }
            sequences += 1;
        }
        // A drop whose run's token did not make it into this step (no room) was timed in a
        // step not its own.
        for slot in self.slots.iter_mut().flatten() {
            if std::mem::take(&mut slot.dropped_in_step) {
                self.counters
                    .padding_drops_outside_own_step
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        if self.batch.n_tokens() == 0 {
            return;
        }
        // Each carried slot's public cells and, for a held run past its reference, its own
        // window's cost per cell: what the step's public cost is made of (R31-1, R32-1).
        let carried: Vec<(usize, Option<f64>)> = self
            .slots
            .iter()
            .zip(&cells)
            .map(|(slot, &c)| {
                let hold = slot.as_ref().and_then(|s| s.hold).filter(|_| c > 0);
                (c, hold.map(|hold| hold.cost_per_cell))
            })
            .collect();
        let held_in_step = carried.iter().any(|&(_, cost)| cost.is_some());
        // Whose cancellation may cut the step's pace short: every held run in it.
        let held_cancels: Vec<Arc<AtomicBool>> = self
            .slots
            .iter()
            .zip(&carried)
            .filter(|(_, (_, cost))| cost.is_some())
            .filter_map(|(slot, _)| slot.as_ref().map(|s| s.job.cancel.clone()))
            .collect();
        self.counters.steps.fetch_add(1, Ordering::Relaxed);
        if held_in_step {
            self.counters
                .chunk_tokens_beside_held
                .fetch_add(chunk_tokens as u64, Ordering::Relaxed);
        }
        if sequences > 1 {
            self.counters.shared_steps.fetch_add(1, Ordering::Relaxed);
        }
        self.counters
            .max_sequences
            .fetch_max(sequences, Ordering::Relaxed);
        self.counters
            .most_references_in_a_step
            .fetch_max(referencing.len(), Ordering::Relaxed);
        self.window.store(0, Ordering::Relaxed);
        let decode_started = Instant::now();
        let decoded = ctx.decode(&mut self.batch);
        let ended = Instant::now();
        // A step carrying a held run lasts its public cost (review 31 R31-1), or a rung of it
        // (R32-1, R32-2: see `paced`): it is due then, and how far its rung is past its public
        // cost is what its held runs leave on the ladder for.
        let public = if held_in_step {
            step_cost(&carried, self.reference_costs.marginal())
        } else {
            None
        };
        let shown = public.map(|public| (public, paced(public, ended - started)));
        let due = shown.map(|(_, (shown, _))| started + shown);
        let outran = match shown {
            Some((public, (shown, Pace::Past))) => shown.saturating_sub(public),
            _ => Duration::ZERO,
        };
        let step_end = due.map_or(ended, |due| due.max(ended));
        if held_in_step {
            let public_cells: usize = cells.iter().sum();
            self.counters
                .held_public_cells
                .fetch_add(public_cells as u64, Ordering::Relaxed);
        }
        // A held run's own step: its padding's removal, if in it, and the decode, as paced.
        self.note_held_step(&cells, step_end - started, outran);
        // A reference is the decode alone (no drop goes in a reference turn).
        self.note_references(&referencing, ended - decode_started, ended);
        let window = u64::from(self.window.swap(0, Ordering::Relaxed));
        self.counters
            .attended_cells
            .fetch_add(window, Ordering::Relaxed);
        self.counters
            .widest_window
            .fetch_max(window, Ordering::Relaxed);
        if let Err(e) = decoded {
            while let Some(i) = self.slots.iter().rposition(Option::is_some) {
                let error = unavailable(format!("inference failed: {e}"));
                self.finish(ctx, i, Err(error));
            }
            return;
        }
        let mut finished = Vec::new();
        for (i, at) in sampling {
            let Some(slot) = self.slots[i].as_mut() else {
                continue;
            };
            let token = slot.sampler.sample(ctx, at);
            if let Step::Done(finish) = slot.on_token(self.inner, token) {
                finished.push((i, slot.outcome(self.inner, finish, step_end)));
            }
        }
        // Highest first, so compaction never moves a slot that is about to finish.
        finished.sort_by_key(|(i, _)| *i);
        for (i, outcome) in finished.into_iter().rev() {
            self.finish(ctx, i, outcome);
        }
        if let Some((_, (shown, pace))) = shown {
            self.pace_held_step(shown, started, pace, &held_cancels, rx, open);
        }
    }

    /// Paces a step that carried a held run past its reference (review 31 R31-1): the step,
    /// from its start (before the padding's removal) through its sampling and the finished
    /// runs' memory operations, lasts `shown` after `started`: its public cost ([`step_cost`])
    /// or a rung of it ([`paced`]). Every
    /// run's time goes through the worker's steps — a neighbour reading its prompt in the
    /// chunk steps between a held run's steps waits through them, its own hold not begun — so
    /// a held run's step must show everyone its public cost, not its real time, which follows
    /// the body (llama.cpp's flash attention works on the cells a token sees). Answers go out
    /// after it ([`Worker::answer`]), so a finished run's memory operations (linear in its
    /// real cells) are inside the paced step too.
    ///
    /// The wait is in slices (review 32 R32-1): new jobs are taken in and cancelled queued
    /// ones answered meanwhile, and once every held run the step carried is cancelled the
    /// step ends (no one is left whose body its pace hides).
    fn pace_held_step(
        &mut self,
        shown: Duration,
        started: Instant,
        pace: Pace,
        held_cancels: &[Arc<AtomicBool>],
        rx: &Receiver<Vec<Job>>,
        open: &mut bool,
    ) {
        let due = started + shown;
        let mut cut = false;
        loop {
            let now = Instant::now();
            if now >= due {
                break;
            }
            if !held_cancels.is_empty() && held_cancels.iter().all(|c| c.load(Ordering::Relaxed)) {
                cut = true;
                break;
            }
            let wait = (due - now).min(PACE_SLICE);
            if *open {
                match rx.recv_timeout(wait) {
                    Ok(jobs) => self.queue.extend(jobs),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => *open = false,
                }
            } else {
                std::thread::sleep(wait);
            }
            let (gone, keep): (Vec<Job>, Vec<Job>) = self.queue.drain(..).partition(Job::cancelled);
            self.queue.extend(keep);
            for job in gone {
                (job.reply)(Err(cancelled()));
            }
        }
        self.counters.held_steps.fetch_add(1, Ordering::Relaxed);
        if !cut && started.elapsed() < shown {
            self.counters
                .held_steps_under_their_cost
                .fetch_add(1, Ordering::Relaxed);
        }
        let counter = match pace {
            Pace::Public => None,
            Pace::Past => Some(&self.counters.held_steps_past_their_cost),
            Pace::Capped => Some(&self.counters.held_steps_capped),
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hands the finished jobs their outcomes: after the step that finished them, its pacing
    /// included (R31-1).
    fn answer(&mut self) {
        for (reply, outcome) in self.replies.drain(..) {
            reply(outcome);
        }
    }

    /// Adds a step to every held run past its reference that took part in it (R30-2): one of
    /// its steps, its neighbours' public cells, the step's time (paced: its public cost, or
    /// its real time where that outran it) and how far its real time outran its public cost.
    fn note_held_step(&mut self, cells: &[usize], took: Duration, outran: Duration) {
        let all: usize = cells.iter().sum();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(hold) = slot.as_mut().and_then(|s| s.hold.as_mut()) else {
                continue;
            };
            let own = cells.get(i).copied().unwrap_or(0);
            if own > 0 {
                hold.steps += 1;
                hold.neighbour_cells = hold.neighbour_cells.saturating_add(all - own);
                hold.own_time = hold.own_time.saturating_add(took);
                hold.outran = hold.outran.saturating_add(outran);
            }
        }
    }

    /// Records each referencing slot's reference step (R28-1): its cost per window cell is the
    /// median of the last [`REFERENCE_STEPS_KEPT`] reference steps of its window, this one
    /// included (R30-1).
    fn note_references(&mut self, referencing: &[(usize, usize)], took: Duration, ended: Instant) {
        for &(i, window) in referencing {
            let cost_per_cell = self
                .reference_costs
                .record(window, took.as_secs_f64() / window as f64);
            if let Some(slot) = self.slots[i].as_mut() {
                slot.hold = Some(Hold {
                    cost_per_cell,
                    reference_ended: ended,
                    steps: 0,
                    neighbour_cells: 0,
                    own_time: Duration::ZERO,
                    outran: Duration::ZERO,
                });
            }
        }
    }

    /// Frees slot `i`'s cells, answers its job, and keeps the busy slots at the lowest
    /// sequence ids: llama.cpp puts sequences with separate KV streams in one pass only when
    /// their ids are consecutive, so the highest busy slot moves into the hole (its cells are
    /// copied as they are, so its answer does not change).
    fn finish(&mut self, ctx: &mut LlamaContext<'_>, i: usize, outcome: Outcome) {
        let Some(slot) = self.slots[i].take() else {
            return;
        };
        let _ = ctx.clear_kv_cache_seq(u32::try_from(slot.seq).ok(), None, None);
        self.counters.memory_ops.fetch_add(1, Ordering::Relaxed);
        // A held answer keeps its place until it leaves (R30-9).
        if let Ok((
            _,
            Timing {
                hold_until: Some(until),
                ..
            },
        )) = &outcome
            && *until > Instant::now()
        {
            self.reserved.push(*until);
        }
        self.replies.push((slot.job.reply, outcome));
        let Some(last) = self.slots.iter().rposition(Option::is_some) else {
            return;
        };
        if last < i {
            return;
        }
        if let Some(mut moved) = self.slots[last].take() {
            let hole = i32::try_from(i).unwrap_or(i32::MAX);
            let _ = ctx.copy_kv_cache_seq(moved.seq, hole, None, None);
            let _ = ctx.clear_kv_cache_seq(u32::try_from(moved.seq).ok(), None, None);
            self.counters.memory_ops.fetch_add(2, Ordering::Relaxed);
            moved.seq = hole;
            self.slots[i] = Some(moved);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release_after(cost_per_cell: f64, span: usize, steps: usize) -> Duration {
        cells_time(cost_per_cell, span_cells(span, steps))
    }

    /// The hold reads only public values and the measured cost: the same span, steps and cost
    /// give the same time, it grows with each, and a cost that is no number holds nothing
    /// rather than for ever.
    #[test]
    fn the_hold_is_the_spans_steps_at_the_measured_cost() {
        let cost = 30e-3 / 1280.0;
        let one = release_after(cost, 1100, 1);
        assert!(
            (one.as_secs_f64() - 30e-3 * RELEASE_MARGIN).abs() < 1e-9,
            "{one:?}"
        );
        assert_eq!(release_after(cost, 1100, 48), release_after(cost, 1100, 48));
        assert!(release_after(cost, 1100, 48) > release_after(cost, 1100, 47));
        assert!(release_after(cost, 1300, 48) > release_after(cost, 1100, 48));
        // 1,100 + 180 crosses into the next 256 cells: those steps cost a wider window.
        let crossing = release_after(cost, 1100, 200) - release_after(cost, 1100, 180);
        let before = release_after(cost, 1100, 20);
        assert!(crossing > before, "{crossing:?} {before:?}");
        for bad in [f64::NAN, f64::INFINITY, -1.0, 0.0] {
            assert_eq!(release_after(bad, 1100, 48), Duration::ZERO, "{bad}");
        }
        assert_eq!(
            release_after(1.0, 1 << 30, 1 << 20),
            Duration::from_secs(86_400)
        );
    }

    /// One stalled or one quick reference step moves no hold.
    #[test]
    fn the_reference_cost_is_the_median_of_the_last_steps() {
        let mut kept: VecDeque<f64> = [1.0, 1.1, 0.9, 1.0, 60.0].into_iter().collect();
        assert_eq!(median(&kept), 1.0);
        kept.push_back(0.001);
        assert_eq!(median(&kept), 1.0);
        assert_eq!(median(&VecDeque::new()), 0.0);
    }

    /// Review 30 R30-1: a caller's calls with a long user message (a 4,096-cell window) put
    /// reference steps in the one median every run was held by, and their cost per cell —
    /// a step's fixed part spread over more cells — held a 1,280-cell run's steps short of
    /// their real time. Now a run reads only references of its own window.
    #[test]
    fn a_wider_windows_references_do_not_set_a_narrower_runs_cost() {
        // A step costs a + b·W: a = 8.9 ms, b = 4.3 µs a cell (the session's measurements).
        let step = |window: usize| 8.9e-3 + 4.3e-6 * window as f64;
        let mut costs = ReferenceCosts::default();
        for _ in 0..3 {
            costs.record(4096, step(4096) / 4096.0);
        }
        let narrow = costs.record(1280, step(1280) / 1280.0);
        let one_answer_step = cells_time(narrow, window_of(1100));
        assert!(
            one_answer_step.as_secs_f64() >= step(1280),
            "a 1,280-cell run held {one_answer_step:?} a step against {:.4}s real",
            step(1280)
        );
        // Its own window's references, and only those, move it.
        for _ in 0..4 {
            costs.record(1280, 2.0 * step(1280) / 1280.0);
        }
        assert_eq!(costs.record(4096, step(4096) / 4096.0), step(4096) / 4096.0);
        assert!(costs.record(1280, step(1280) / 1280.0) > narrow);
    }

    /// Review 30 R30-2: a run slowed past its hold (the machine's load, neighbours' work) left
    /// at its real end, which carries the body's share of each step. Now it leaves on the first
    /// rung of a ladder of the hold at or after its end: the same for any end inside a rung.
    #[test]
    fn a_run_past_its_hold_leaves_on_the_ladder_not_at_its_end() {
        let reference = Instant::now();
        let held = Duration::from_millis(800);
        let at = |ms: u64| release_at(reference, held, reference + Duration::from_millis(ms)).0;
        assert_eq!(at(500), reference + held, "within the hold");
        assert_eq!(at(800), reference + held);
        // Past it: 1.2 s (1.5x), 1.8 s (2.25x), ... whatever the end inside the rung.
        assert_eq!(at(801), at(1200));
        assert_eq!(at(801), reference + held.mul_f64(LADDER));
        assert_eq!(at(1201), at(1750));
        assert!(at(1201) > at(1200));
        // No hold climbs from a millisecond; nothing past a day.
        assert!(
            release_at(
                reference,
                Duration::ZERO,
                reference + Duration::from_millis(5)
            )
            .0 >= reference + Duration::from_millis(5)
        );
        let late = reference + Duration::from_secs(200_000);
        assert_eq!(release_at(reference, held, late).0, reference + HOLD_MAX);
        assert_eq!(
            release_at(reference, held, reference + Duration::from_millis(1750)).1,
            2
        );
    }

    /// The hold of a run whose own steps were paced (review 31 R31-1): its time after the
    /// reference is its paced steps and others' time, all public, so it leaves at its end;
    /// where its steps' real time outran their public cost, that outrun is taken out and it
    /// leaves on the ladder of the rest, whatever the outrun.
    #[test]
    fn a_hold_replaces_the_runs_own_steps_by_their_cost_and_keeps_the_rest() {
        let reference = Instant::now();
        let paced = Hold {
            cost_per_cell: 10e-3 / 1280.0,
            reference_ended: reference,
            steps: 48,
            neighbour_cells: 48 * 4096,
            own_time: Duration::from_millis(600),
            outran: Duration::ZERO,
        };
        // Its own steps paced to 600 ms (a short or a long body's real 300 or 450 ms), kept
        // out of 2 s of others' steps: it leaves at its end, 2.6 s, on no rung.
        let ended = reference + Duration::from_millis(2600);
        assert_eq!(paced.release(ended), (ended, 0));
        assert_eq!(paced.others(ended), Duration::from_secs(2));
        // Two of its steps outran their cost, by 100 or 150 ms (the load rose, the body's
        // share inside): held for the 2.6 s that were public, it leaves on the ladder of them.
        let outran = |ms: u64| Hold {
            own_time: Duration::from_millis(600 + ms),
            outran: Duration::from_millis(ms),
            ..paced
        };
        let released = |ms: u64| outran(ms).release(ended + Duration::from_millis(ms));
        assert_eq!(released(100), released(150));
        assert_eq!(
            released(100),
            (reference + Duration::from_millis(2600).mul_f64(LADDER), 1)
        );
    }

    /// Review 31 R31-10: two places, one held answer's reserved, the other free (its run
    /// ended unheld in the same step): the engine waited for the held release before taking a
    /// queued job in. Now it waits only when every place not busy is reserved.
    #[test]
    fn a_free_place_is_used_while_another_is_reserved() {
        let now = Instant::now();
        let release = now + Duration::from_secs(1);
        let mut reserved = vec![release];
        assert_eq!(
            place_free_at(&mut reserved, 2, now),
            None,
            "a job waited for a held release with a place free"
        );
        assert_eq!(reserved, vec![release]);
        // Both places reserved: wait for the first release; one past: a place is free.
        let mut both = vec![release + Duration::from_secs(1), release];
        assert_eq!(place_free_at(&mut both, 2, now), Some(release));
        let mut one_past = vec![now - Duration::from_millis(1), release];
        assert_eq!(place_free_at(&mut one_past, 2, now), None);
        assert_eq!(one_past, vec![release]);
        // Every place busy: none free, whatever is reserved.
        assert!(place_free_at(&mut Vec::new(), 0, now).is_some());
    }

    /// A step costs a + b·W: a = 8.9 ms, b = 4.3 µs a cell (review 32's measurements).
    fn real_step(window: usize) -> f64 {
        8.9e-3 + 4.3e-6 * window as f64
    }

    /// Review 32 R32-1: a step carrying a held run was paced at the dearest held run's cost per
    /// cell times every token's cells, so a narrow held run (its step's fixed part over 256
    /// cells) charged a wide neighbour's 8,192 cells at 9× what a cell costs: every step of
    /// the neighbour's answer 9× its real time, for as long as the narrow call answered. Now
    /// each run's own cells cost its window's rate and every other token's the cheapest
    /// measured: the step is paced within a small factor of its real time, and never under it.
    #[test]
    fn pacing_a_step_does_not_charge_neighbours_at_a_narrow_runs_rate() {
        let mut costs = ReferenceCosts::default();
        for _ in 0..3 {
            costs.record(256, real_step(256) / 256.0);
            costs.record(8192, real_step(8192) / 8192.0);
        }
        let narrow = costs.cost_per_cell(256);
        let wide = costs.cost_per_cell(8192);
        let real = real_step(256 + 8192);
        // The wide neighbour held too (its own references), or not held at all.
        for neighbour in [Some(wide), None] {
            let public = step_cost(&[(256, Some(narrow)), (8192, neighbour)], costs.marginal())
                .expect("a held run in the step");
            let factor = public.as_secs_f64() / real;
            eprintln!(
                "neighbour held: {}; paced at {factor:.2}× its real time",
                neighbour.is_some()
            );
            assert!(
                factor <= 1.6,
                "a narrow held run paced its wide neighbour's step at {factor:.2}× its real time"
            );
            // R31-1 kept: the step shows no one its real time, the bodies in it.
            assert!(factor >= RELEASE_MARGIN, "under-costed: {factor:.2}×");
        }
        // Alone, a run is paced at its own window's cost, as before.
        let alone = step_cost(&[(256, Some(narrow)), (0, None)], costs.marginal());
        assert_eq!(alone, Some(cells_time(narrow, 256)));
        assert_eq!(step_cost(&[(8192, None)], costs.marginal()), None);
    }

    /// Review 32 R32-1: a narrow ring inflated — a reference charged a shared step, a stalled
    /// one on a young ring — held its runs' steps at tens of times their cost. A window's step
    /// costs no more than a wider window's median step, and of a young ring's two entries the
    /// lower counts.
    #[test]
    fn a_narrow_windows_cost_is_held_to_what_wider_windows_measured() {
        let mut costs = ReferenceCosts::default();
        // A stalled reference (2 s) on a young ring, then an ordinary one.
        costs.record(512, 2.0 / 512.0);
        let young = costs.record(512, real_step(512) / 512.0);
        assert_eq!(
            young,
            real_step(512) / 512.0,
            "the stalled entry set a young ring"
        );
        // An inflated 256 ring (453 µs a cell, review 32's figure) beside a measured 8,192 one.
        for _ in 0..3 {
            costs.record(256, 453e-6);
            costs.record(8192, real_step(8192) / 8192.0);
        }
        let held = costs.cost_per_cell(256) * 256.0;
        assert!(
            held <= real_step(8192) * 1.000_001,
            "a 256-cell step held at {held:.4}s, over the 8,192-cell step's {:.4}s",
            real_step(8192)
        );
        assert!(
            costs
                .marginal()
                .is_some_and(|m| m <= real_step(8192) / 8192.0 * 1.000_001)
        );
    }

    /// Review 32 R32-1 (the bound): whatever the public cost, no step lasts more than
    /// `STEP_CAP × LADDER` times its real time, and what shows then is a rung of the public
    /// cost's ladder down, not the real time.
    #[test]
    fn no_step_is_paced_past_a_bounded_factor_of_its_real_time() {
        let real = Duration::from_millis(30);
        for times in [3.5, 10.0, 100.0, 2_880_000.0] {
            let public = real.mul_f64(times);
            let (shown, pace) = paced(public, real);
            assert_eq!(pace, Pace::Capped, "{times}");
            assert!(shown >= real.mul_f64(STEP_CAP), "{times}: {shown:?}");
            assert!(
                shown < real.mul_f64(STEP_CAP * LADDER),
                "{times}: {shown:?}"
            );
            let k = (public.as_secs_f64() / shown.as_secs_f64()).ln() / LADDER.ln();
            assert!((k - k.round()).abs() < 1e-6, "{times}: not a rung ({k})");
        }
        // Within the cap: the public cost.
        assert_eq!(paced(real * 2, real), (real * 2, Pace::Public));
    }

    /// Review 32 R32-2: a held step whose real time outran its public cost ended at its real
    /// time, so a neighbour waited through the continuous excess, the body's share in it. Now
    /// it ends on the next rung of its public cost's ladder: the same for any real time inside
    /// a rung.
    #[test]
    fn a_held_step_past_its_cost_ends_on_a_rung() {
        let public = Duration::from_millis(40);
        let (at_1_3, pace) = paced(public, public.mul_f64(1.3));
        assert_eq!(pace, Pace::Past);
        assert_eq!(at_1_3, public.mul_f64(LADDER));
        assert_eq!(paced(public, public.mul_f64(1.01)).0, at_1_3);
        assert_eq!(paced(public, public.mul_f64(1.49)).0, at_1_3);
        assert_eq!(
            paced(public, public.mul_f64(1.6)).0,
            public.mul_f64(LADDER * LADDER)
        );
        assert_eq!(paced(public, public), (public, Pace::Public));
        // No cost measured climbs from a millisecond.
        let (zero, pace) = paced(Duration::ZERO, Duration::from_millis(5));
        assert_eq!(pace, Pace::Past);
        assert!(zero >= Duration::from_millis(5));
    }

    /// A box whose attested configuration names no GPU kept no layer on one, yet llama.cpp's
    /// defaults still moved the KV cache and prompt-batch matrix work to a compiled-in GPU
    /// backend: the whole prompt on a device no one attested.
    #[test]
    fn no_work_goes_to_a_gpu_the_configuration_does_not_name() {
        let config = |offload| EngineConfig {
            threads: 1,
            parallel: 1,
            context: 512,
            offload,
        };
        let none = context_params(&config(false));
        assert!(!none.offload_kqv(), "the KV cache may go to a GPU");
        assert!(!none.op_offload(), "prompt batches may go to a GPU");
        let some = context_params(&config(true));
        assert!(some.offload_kqv() && some.op_offload());
    }
}
