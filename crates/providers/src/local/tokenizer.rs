//! The embedded model's tokenizer: llama.cpp's own, over the GGUF's vocabulary (so any model
//! llama.cpp runs tokenizes as it was trained), in two modes. [`encode`](GgufTokenizer::encode)
//! recognises control tokens (for the chat frame, which comes from the model file);
//! [`encode_plain`](GgufTokenizer::encode_plain) does not (for request text), so text that spells
//! `<|im_end|>` stays those characters.

use std::sync::Arc;

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token_type::LlamaTokenAttr;

use crate::ProviderError;

/// llama.cpp takes text lengths as `i32`; beyond this a request is refused, not truncated.
const MAX_TEXT_BYTES: usize = 1 << 30;

pub struct GgufTokenizer {
    model: Arc<LlamaModel>,
    /// Tokens that must never come out of request text: the frame's own non-plain tokens and
    /// every end-of-generation token (sorted, for binary search).
    forbidden: Vec<i32>,
}

impl GgufTokenizer {
    pub(crate) fn new(model: Arc<LlamaModel>) -> Self {
        let vocab = model.vocab();
        let forbidden = vocab
            .tokens()
            .filter(|t| vocab.is_eog(*t))
            .map(|t| t.0)
            .collect();
        GgufTokenizer { model, forbidden }
    }

    /// Also refuse these (the frame's turn tokens) in request text.
    pub(crate) fn forbid(&mut self, tokens: impl IntoIterator<Item = LlamaToken>) {
        self.forbidden.extend(tokens.into_iter().map(|t| t.0));
        self.forbidden.sort_unstable();
        self.forbidden.dedup();
    }

    fn tokenize(&self, text: &str, parse_special: bool) -> Result<Vec<LlamaToken>, ProviderError> {
        if text.len() > MAX_TEXT_BYTES {
            return Err(ProviderError::InvalidRequest(format!(
                "text of {} bytes is too long to tokenize",
                text.len()
            )));
        }
        Ok(self
            .model
            .vocab()
            .tokenize(text.as_bytes(), false, parse_special))
    }

    /// Trusted text (the chat frame): control-token spellings become their ids.
    pub(crate) fn encode_frame(
        &self,
        text: &str,
        add_bos: bool,
    ) -> Result<Vec<LlamaToken>, ProviderError> {
        if add_bos && self.model.vocab().should_add_bos() {
            let mut ids = vec![self.model.vocab().bos()];
            ids.extend(self.tokenize(text, true)?);
            Ok(ids)
        } else {
            self.tokenize(text, true)
        }
    }

    /// Untrusted text: never a control, turn or end-of-generation token.
    pub(crate) fn encode_untrusted(&self, text: &str) -> Result<Vec<LlamaToken>, ProviderError> {
        let ids = self.tokenize(text, false)?;
        // With special parsing off llama.cpp yields no control tokens; checked anyway (also for
        // user-defined turn tokens, which it still matches) because the frame depends on it.
        if ids
            .iter()
            .any(|t| self.is_special(t.0 as u32) || self.forbidden.binary_search(&t.0).is_ok())
        {
            return Err(ProviderError::InvalidRequest(
                "request text tokenized to a control token".into(),
            ));
        }
        Ok(ids)
    }

    /// Encodes text with control tokens recognised (`<|im_end|>` becomes its one id).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ProviderError> {
        Ok(ids(self.tokenize(text, true)?))
    }

    /// Encodes untrusted text: control-token spellings stay ordinary characters.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>, ProviderError> {
        Ok(ids(self.encode_untrusted(text)?))
    }

    /// Text of `ids`; control tokens are left out when `skip_special`. Invalid UTF-8 (a cut
    /// multi-byte character) becomes U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, ProviderError> {
        let tokens = ids
            .iter()
            .map(|&id| self.token(id))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.decode_tokens(&tokens, skip_special))
    }

    pub(crate) fn decode_tokens(&self, tokens: &[LlamaToken], skip_special: bool) -> String {
        if tokens.is_empty() {
            return String::new();
        }
        let bytes = self.model.vocab().detokenize(tokens, false, !skip_special);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The id of a single-token text (a control token's spelling, or a word that is one token).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        match self.tokenize(token, true).ok()?.as_slice() {
            [one] if self.decode_tokens(&[*one], false) == token => Some(one.0 as u32),
            _ => None,
        }
    }

    /// Is `id` a control token (the chat frame's kind)?
    pub fn is_special(&self, id: u32) -> bool {
        self.token(id)
            .is_ok_and(|t| self.model.vocab().attr(t).contains(LlamaTokenAttr::Control))
    }

    pub fn vocab_size(&self) -> usize {
        usize::try_from(self.model.vocab().n_tokens()).unwrap_or(0)
    }

    /// A valid token of this vocabulary (llama.cpp aborts on ids out of range).
    fn token(&self, id: u32) -> Result<LlamaToken, ProviderError> {
        match i32::try_from(id) {
            Ok(id) if id < self.model.vocab().n_tokens() => Ok(LlamaToken(id)),
            _ => Err(ProviderError::InvalidRequest(format!(
                "token id {id} is not in the vocabulary"
            ))),
        }
    }
}

fn ids(tokens: Vec<LlamaToken>) -> Vec<u32> {
    tokens.into_iter().map(|t| t.0 as u32).collect()
}
