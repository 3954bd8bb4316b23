//! skillbox-providers' integration tests, one binary (`cargo test --test it`; a module's tests
//! with `-- <module>::`): the remote adapters against a loopback server (`context`: the declared context held against
//! what each server's API reports), `model fetch` without
//! the network, and the embedded model for real (`gguf_edit` rewrites a GGUF's metadata for it), and which
//! weights it runs (`weights`); a loopback provider's port another user holds gets nothing
//! (`loopback_owner`).

mod adapters;
mod context;
mod fetch;
mod gguf_edit;
mod local_model;
mod loopback_owner;
mod weights;
