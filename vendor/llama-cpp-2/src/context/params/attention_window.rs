//! A probe of the attention window each graph computes over (added for skillbox, see
//! `PATCHED.md`): llama.cpp exposes no count of the KV cells a decode step attends over, and a
//! caller that must keep that window independent of secret prompt lengths needs to measure
//! the real one, not a model of llama.cpp's allocator.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

use super::LlamaContextParams;

impl LlamaContextParams {
    /// Records into `widest` (with `fetch_max`) the largest number of KV cells any attention
    /// operation of a computed graph spans: the K view's rows of a flash-attention node, or the
    /// row length of a masked softmax (attention without flash attention). Read and reset it
    /// around a `decode` to get that step's window. It is llama.cpp's graph evaluation
    /// callback, so the context computes each graph split as one piece, as it does without a
    /// callback (the callback never asks for a tensor's data). The probe is `'static` because
    /// llama.cpp keeps its pointer for the context's life.
    #[must_use]
    pub fn with_attention_window_probe(mut self, widest: &'static AtomicU32) -> Self {
        self.context_params.cb_eval = Some(attention_window);
        self.context_params.cb_eval_user_data = std::ptr::from_ref(widest).cast_mut().cast();
        self
    }
}

/// llama.cpp's `ggml_backend_sched_eval_callback`: asked for every node of a graph before it is
/// computed (`ask` true); answering false never asks for the node's data.
extern "C" fn attention_window(
    tensor: *mut llama_cpp_sys_2::ggml_tensor,
    ask: bool,
    user_data: *mut c_void,
) -> bool {
    if !ask || tensor.is_null() || user_data.is_null() {
        return false;
    }
    // SAFETY: llama.cpp passes a node of the graph being computed, alive for this call; its
    // `src` pointers are null or nodes/leaves of the same graph.
    let node = unsafe { &*tensor };
    let cells = match node.op {
        llama_cpp_sys_2::GGML_OP_FLASH_ATTN_EXT => {
            let k = node.src[1];
            if k.is_null() {
                return false;
            }
            // SAFETY: as above.
            unsafe { (*k).ne[1] }
        }
        // Attention's softmax is the masked one (its second source is the KQ mask).
        llama_cpp_sys_2::GGML_OP_SOFT_MAX if !node.src[1].is_null() => node.ne[0],
        _ => return false,
    };
    // SAFETY: `user_data` is the `&'static AtomicU32` given to `with_attention_window_probe`.
    let widest = unsafe { &*user_data.cast::<AtomicU32>() };
    widest.fetch_max(u32::try_from(cells).unwrap_or(u32::MAX), Ordering::Relaxed);
    false
}
