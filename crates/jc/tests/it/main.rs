//! skillbox-jc's integration tests, one binary (`cargo test --test it`; a module's tests with
//! `-- <module>::`): a real box on loopback through its HTTP API and client, canonical programs,
//! the guard in the box, hardening against hostile parties, hardware attestation on real
//! evidence, GPU evidence bound into the CPU statement, pinned boxes, the configfs-tsm attester, the Nitro attester against an NSM double, a box restarted on its run store, and the sealed wire form byte for byte.
//! `support` starts the box with a provider double and holds the two parties' keys.

mod body_length;
mod box_api;
mod box_tls;
mod canonical_props;
mod coverage;
mod gpu;
mod guard;
mod hardening;
mod hardware;
mod nitro;
mod pins;
mod restart;
mod seal_bytes;
mod support;
mod tsm;
