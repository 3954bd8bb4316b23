//! The TCB floors of the hardware test vectors, as a pin names them: an SEV-SNP or TDX pin is
//! refused without one (the box operator chooses firmware and collateral), so every test pin of
//! these vectors carries the floor its evidence meets.

/// virtee's Milan report (the jc crate's `tests/data/sev-snp/`): its reported TCB, bootloader 3,
/// tee 0, snp 8, microcode 115, as a pin's policy table names it.
pub const VIRTEE_SNP_MIN_TCB: &str =
    "min_tcb = { bootloader = 3, tee = 0, snp = 8, microcode = 115 }";

/// [`VIRTEE_SNP_MIN_TCB`] as the policy table a pin holds (its measurements fill the rest).
pub fn virtee_snp_floor() -> serde_json::Value {
    serde_json::json!({"min_tcb": {"bootloader": 3, "tee": 0, "snp": 8, "microcode": 115}})
}

/// dcap-qvl's TDX sample collateral (`tests/data/tdx/`): TCB evaluation data number 17 (its
/// TCB info's and QE identity's).
pub const DCAPQVL_TDX_EVAL: u32 = 17;
