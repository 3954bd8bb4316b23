//! Property: any sequence of events, at any times, keeps the machine's invariants.

use proptest::prelude::*;
use skillbox_calls::*;

/// A few run ids, so runs repeat (a replayed session, a left run named again) and differ (a
/// move).
fn run() -> impl Strategy<Value = String> {
    (0u8..6).prop_map(|i| format!("r{i}"))
}

/// Events of a call's way to its stake and of moves, weighted so that sequences reach and
/// pass the bound on moves (the full mix above rarely leaves three runs).
fn move_event() -> impl Strategy<Value = Event> {
    let run = || (0u8..10).prop_map(|i| format!("r{i}"));
    prop_oneof![
        4 => run().prop_map(|run_id| Event::PeerSession { run_id, box_url: "http://b".into() }),
        4 => run().prop_map(|run_id| Event::RunOpened { run_id }),
        3 => Just(Event::BoxLost),
        2 => Just(Event::Staked),
        1 => Just(Event::Admitted),
        1 => Just(Event::PeerAccepted),
        1 => Just(Event::SessionDelivered),
        1 => Just(Event::Policy(Decision::Allow)),
        1 => Just(Event::Policy(Decision::Ask)),
        1 => Just(Event::Consent { allow: true }),
        1 => Just(Event::Submitted),
        1 => Just(Event::Tick),
        1 => Just(Event::Resume),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        Just(Event::Resume),
        Just(Event::Tick),
        Just(Event::PeerAccepted),
        run().prop_map(|run_id| Event::PeerSession {
            run_id,
            box_url: "http://b".into()
        }),
        Just(Event::PeerFailed { code: None }),
        Just(Event::PeerFailed {
            code: Some(FailureCode::Stalled)
        }),
        Just(Event::SessionDelivered),
        Just(Event::Admitted),
        Just(Event::NotAdmitted {
            code: FailureCode::NotAdmitted,
            message: "no".into()
        }),
        run().prop_map(|run_id| Event::RunOpened { run_id }),
        Just(Event::BoxLost),
        Just(Event::BoxFailed {
            code: FailureCode::BoxFailed,
            message: "b".into()
        }),
        Just(Event::Staked),
        Just(Event::Policy(Decision::Allow)),
        Just(Event::Policy(Decision::Deny)),
        Just(Event::Policy(Decision::Ask)),
        Just(Event::Consent { allow: true }),
        Just(Event::Consent { allow: false }),
        Just(Event::Submitted),
        Just(Event::Answered),
        Just(Event::ReceiptStored),
        Just(Event::RunFailed {
            message: "f".into()
        }),
        Just(Event::Cancel),
    ]
}

proptest! {
    #[test]
    fn invariants_hold(owner in any::<bool>(), events in proptest::collection::vec((event(), 0u64..200_000), 0..60)) {
        let timing = Timing::default();
        let role = if owner { Role::Owner } else { Role::Caller };
        let new = NewCall { id: "c".into(), peer: "p".into(), skill: "s".into(), program_hash: "sha256:00".into(), expires_at_ms: 1_000_000 };
        let mut t = start(role, new, 0, &timing);
        let mut now = 0;
        let mut terminal_transitions = 0;
        for (e, dt) in events {
            now += dt;
            let before = t.call.clone();
            t = step(&before, e, now, &timing);
            prop_assert_eq!(t.call.role, role);
            prop_assert_eq!(&t.call.id, &before.id);
            if before.state.is_terminal() {
                prop_assert!(!t.changed && t.actions.is_empty());
                prop_assert_eq!(&t.call, &before);
            }
            if !before.state.is_terminal() && t.call.state.is_terminal() {
                terminal_transitions += 1;
            }
            prop_assert_eq!(t.call.state == State::Failed, t.call.failure.is_some());
            // Each side reaches only its own success state.
            match role {
                Role::Caller => prop_assert!(t.call.state != State::Ran && t.call.state != State::Received),
                Role::Owner => prop_assert!(t.call.state != State::Answered && t.call.state != State::Requested),
            }
            prop_assert!(t.call.progressed_at_ms <= now);
            // Either side's material leaves only after its policy or human said yes: the
            // caller's request and sources, the owner's body, model and key (review 23 F4).
            if !t.call.consented {
                prop_assert!(!t.actions.contains(&Action::Stake), "{:?} staked unconsented", t.call.state);
                prop_assert!(!t.actions.contains(&Action::Submit), "{:?} submitted unconsented", t.call.state);
                prop_assert!(!matches!(t.call.state, State::Submitting | State::Submitted | State::Answered | State::Ran));
            }
            // Consent, once given, is never taken back — but a new run on another box is
            // asked about again.
            if before.consented && t.call.run_id == before.run_id {
                prop_assert!(t.call.consented);
            }
        }
        prop_assert!(terminal_transitions <= 1);
    }

    /// Moves (issue 33 item 4): whatever the peer sends and the boxes do, a call leaves at most
    /// `MAX_MOVES` runs, never enters a run again once it left it, and stakes into each run at
    /// most once: the owner's body goes into at most `MAX_MOVES + 1` runs of one call, and no
    /// stake of a run it left is ever taken for the run it has now.
    #[test]
    fn each_run_is_staked_once_and_moves_are_bounded(
        owner in any::<bool>(),
        events in proptest::collection::vec((move_event(), 0u64..20_000), 0..80),
    ) {
        let timing = Timing::default();
        let role = if owner { Role::Owner } else { Role::Caller };
        let new = NewCall { id: "c".into(), peer: "p".into(), skill: "s".into(), program_hash: "sha256:00".into(), expires_at_ms: 10_000_000 };
        let mut t = start(role, new, 0, &timing);
        let mut now = 0;
        let mut staked: Vec<String> = Vec::new();
        for (e, dt) in events {
            now += dt;
            let before = t.call.clone();
            // A caller's `Submitted` in `opened` is its stake's outcome too: the box took its
            // submit with the stake.
            let took_stake = e == Event::Staked
                || (e == Event::Submitted && before.state == State::Opened);
            // `Staked` is the outcome of a `Stake` the state owes: the driver feeds it no other
            // way (an unconsented caller's `staked` is a record from before consent moved).
            if took_stake && !step(&before, Event::Resume, now, &timing).actions.contains(&Action::Stake) {
                continue;
            }
            t = step(&before, e, now, &timing);
            if t.actions.contains(&Action::Stake) {
                let run = t.call.run_id.clone();
                prop_assert!(run.is_some(), "a stake owed with no run");
                prop_assert!(!staked.contains(run.as_ref().unwrap_or(&String::new())), "a stake owed again into {:?}", run);
            }
            if took_stake && t.changed && before.state == State::Opened {
                let run = before.run_id.clone().unwrap_or_default();
                prop_assert!(!staked.contains(&run), "staked twice into {}", run);
                staked.push(run);
            }
            prop_assert!(t.call.left_runs.len() <= MAX_MOVES, "{} runs left", t.call.left_runs.len());
            // A left run is left for good: never the call's run again, never left twice.
            if let Some(r) = &t.call.run_id {
                prop_assert!(!t.call.left_runs.contains(r), "back in the left run {}", r);
            }
            let mut left = t.call.left_runs.clone();
            left.sort();
            left.dedup();
            prop_assert_eq!(left.len(), t.call.left_runs.len());
            prop_assert!(t.call.left_runs.starts_with(&before.left_runs), "history rewritten");
            // A move leaves the run this side had; the new one is staked afresh.
            if t.call.left_runs.len() > before.left_runs.len() {
                prop_assert_eq!(t.call.left_runs.last(), before.run_id.as_ref());
                prop_assert!(!t.call.consented, "consent carried to another box");
            }
            if t.call.failure.as_ref().is_some_and(|f| f.code == FailureCode::TooManyMoves) {
                prop_assert_eq!(t.call.left_runs.len(), MAX_MOVES);
            }
            // The owner never leaves a run it submitted (the box took that submit with both
            // stakes in: the run may be running).
            if role == Role::Owner && before.state == State::Submitted {
                prop_assert_eq!(&t.call.left_runs, &before.left_runs);
            }
        }
    }

    /// A driver skips an open call's `Tick` until `tick_due_ms`: the skip must be exact — any
    /// earlier tick changes nothing and owes nothing, and a tick at the due time does act
    /// (retry, stall or expiry), so nothing waits longer than it did when every call was ticked.
    #[test]
    fn a_tick_before_its_due_time_does_nothing_and_one_at_it_acts(
        owner in any::<bool>(),
        events in proptest::collection::vec((event(), 0u64..200_000), 0..40),
        early in 1u64..500_000,
    ) {
        let timing = Timing::default();
        let role = if owner { Role::Owner } else { Role::Caller };
        let new = NewCall { id: "c".into(), peer: "p".into(), skill: "s".into(), program_hash: "sha256:00".into(), expires_at_ms: 1_000_000 };
        let mut t = start(role, new, 0, &timing);
        let mut now = 0;
        for (e, dt) in events {
            now += dt;
            t = step(&t.call, e, now, &timing);
            if t.call.state.is_terminal() {
                break;
            }
            let due = tick_due_ms(&t.call, &timing);
            if due > now {
                // The last ms before the due time, and one earlier at random.
                for before in [due - 1, due.saturating_sub(early).max(now)] {
                    let ticked = step(&t.call, Event::Tick, before, &timing);
                    prop_assert!(!ticked.changed && ticked.actions.is_empty(), "ticked at {} before due {}: {:?}", before, due, t.call.state);
                }
            }
            let at = due.max(now);
            let ticked = step(&t.call, Event::Tick, at, &timing);
            prop_assert!(ticked.changed, "a tick at the due time {} did nothing in {:?}", at, t.call.state);
        }
    }

    /// `owner_takes_run`, which a driver asks before checking a run the caller vouches for, says
    /// what the machine does: the owner enters a run it says yes to (or fails the call, past
    /// the bound on moves), and never one it says no to.
    #[test]
    fn owner_takes_run_is_what_the_machine_does(
        events in proptest::collection::vec((move_event(), 0u64..20_000), 0..60),
        offered in run(),
    ) {
        let timing = Timing::default();
        let new = NewCall { id: "c".into(), peer: "p".into(), skill: "s".into(), program_hash: "sha256:00".into(), expires_at_ms: 10_000_000 };
        let mut t = start(Role::Owner, new, 0, &timing);
        let mut now = 0;
        for (e, dt) in events {
            now += dt;
            t = step(&t.call, e, now, &timing);
            let opened = step(&t.call, Event::RunOpened { run_id: offered.clone() }, now, &timing);
            let entered = opened.call.run_id.as_deref() == Some(offered.as_str())
                && t.call.run_id.as_deref() != Some(offered.as_str());
            if owner_takes_run(&t.call, &offered) {
                prop_assert!(entered || opened.call.state == State::Failed, "{:?} took no {}", t.call.state, offered);
            } else {
                prop_assert!(!entered, "{:?} entered {} it does not take", t.call.state, offered);
            }
        }
    }
}
