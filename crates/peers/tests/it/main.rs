//! skillbox-peers' integration tests, one binary (`cargo test --test it`; a module's tests with
//! `-- <module>::`): the board as data, hostile input against adverts and payloads, real nodes on
//! 127.0.0.1, payload envelopes with the memory transport, and reachability (QUIC, relay,
//! AutoNAT, connection limits).

mod board;
mod hostile;
mod index;
mod nat;
mod network;
mod payload;
mod reach;
mod support;
