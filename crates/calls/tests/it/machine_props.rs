//! Property: any sequence of events, at any times, keeps the machine's invariants.

use proptest::prelude::*;
use skillbox_calls::*;

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        Just(Event::Resume),
        Just(Event::Tick),
        Just(Event::PeerAccepted),
        Just(Event::PeerSession { run_id: "r".into() }),
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
        Just(Event::RunOpened { run_id: "r".into() }),
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
            // The caller's material leaves only after its policy or human said yes.
            if role == Role::Caller && !t.call.consented {
                prop_assert!(!t.actions.contains(&Action::Stake), "{:?} staked unconsented", t.call.state);
                prop_assert!(!t.actions.contains(&Action::Submit), "{:?} submitted unconsented", t.call.state);
                prop_assert!(t.call.state != State::Submitting && t.call.state != State::Submitted && t.call.state != State::Answered);
            }
            // Consent, once given, is never taken back.
            if role == Role::Caller && before.consented {
                prop_assert!(t.call.consented);
            }
        }
        prop_assert!(terminal_transitions <= 1);
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
}
