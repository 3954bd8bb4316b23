//! The skills protocol's pure parts (design §7, §9): no sockets, no files, no clocks.
//!
//! - [`machine`]: the caller and owner call state machines, `step(call, event, now) -> (call, actions)`.
//! - [`selection`]: which of the caller's sources a call applies.
//! - [`policy`]: the consent question at `jc.submit`, and the owner's admission.
//! - [`intent`]: the `skill` intent, picking a board skill for a request (BM25), or none.
//! - [`vocabulary`]: the terms a skill is indexed under and a search looks up (the skill index).
//!
//! The node drives these: it persists each new record, then executes the actions.

pub mod intent;
pub mod machine;
pub mod policy;
pub mod selection;
pub mod vocabulary;

pub use machine::{
    Action, Call, Decision, Event, Failure, FailureCode, MAX_MOVES, NewCall, Role, State, Timing,
    Transition, owner_takes_run, start, step, submits_with_stake, tick_due_ms,
};
pub use policy::{
    Admission, Pattern, Policy, RateBuckets, Refusal, Rule, Side, SubmitQuestion, Told,
};
pub use selection::{SelectionError, select_sources};
