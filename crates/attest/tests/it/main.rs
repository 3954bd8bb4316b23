//! skillbox-attest's integration tests, one binary (`cargo test --test it`; a module's tests with
//! `-- <module>::`): one module per platform on the real vectors, and the verdict table.
//! `support` loads the vectors and holds the times each is valid at.

mod nitro;
mod nvidia;
mod release_log;
mod sev_snp;
mod support;
mod tdx;
mod verdicts;
