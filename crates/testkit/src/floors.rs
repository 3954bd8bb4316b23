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

/// dcap-qvl's TDX sample quote: its MRTD (the firmware), RTMR0 (the ACPI tables and other
/// configuration the host hands the firmware) and RTMR1, RTMR2 (kernel, initrd and command
/// line), which every TDX pin must name.
pub const DCAPQVL_TDX_MR_TD: &str = "91eb2b44d141d4ece09f0c75c2c53d247a3c68edd7fafe8a3520c942a604a407de03ae6dc5f87f27428b2538873118b7";
pub const DCAPQVL_TDX_RTMR0: &str = "44c0197b39157fdd7a4dcc44767f9d6b0bb3977c7a8e347b8492f827fe9d9e5c48aca29b220b80b6a540cf994b9bc9c0";
pub const DCAPQVL_TDX_RTMR1: &str = "0084452c01668329d4bc06acdf58a7205c26743304509973949e5619bf81a6a7aea8c323c173019b3093d54e579e9378";
pub const DCAPQVL_TDX_RTMR2: &str = "d833feef2cd945148aa38ead2c53e9b7f138190aaaebfc551dccd829fc207aa3ba80b70870d7330733642e01d48c3132";

/// dcap-qvl's TDX sample quote's box identity: SHA-384("skillbox/tdx-identity/2" ‖ MRTD ‖
/// RTMR0 ‖ RTMR1 ‖ RTMR2), what its box's statements, adverts and a program name it by.
pub const DCAPQVL_TDX_IDENTITY: &str = "5933b649c898e199b2262ee7ceae81dc9640dbd76e550614c06313e3ddb3405bfb34b79ca6136b15059286cfa3df54cf";

/// The same sample's retired identity, SHA-384("skillbox/tdx-identity/1" ‖ MRTD ‖ RTMR1 ‖
/// RTMR2), without RTMR0: what a pin or release manifest written before review 26 V2 names.
pub const DCAPQVL_TDX_IDENTITY_V1: &str = "7521170e7ab8dd5f6408ddbcc7e7db3ffba483038b6b4a52a0503d77102ddb90cfc1f2f4f415e08381eb7ab4de9348d6";

/// The TDX sample's TD as one `accepted` entry of a pin's policy table.
pub fn dcapqvl_tdx_td() -> serde_json::Value {
    serde_json::json!({
        "mr_td": DCAPQVL_TDX_MR_TD,
        "rtmr0": DCAPQVL_TDX_RTMR0,
        "rtmr1": DCAPQVL_TDX_RTMR1,
        "rtmr2": DCAPQVL_TDX_RTMR2,
    })
}
