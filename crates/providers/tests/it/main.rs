//! skillbox-providers' integration tests, one binary (`cargo test --test it`; a module's tests
//! with `-- <module>::`): the remote adapters against a loopback server (`context`: the declared context held against
//! what each server's API reports), `model fetch` without
//! the network, and the embedded model for real (`gguf_edit` rewrites a GGUF's metadata for it), and which
//! weights it runs (`weights`).

mod adapters;
mod context;
mod fetch;
mod gguf_edit;
mod local_model;
mod weights;
