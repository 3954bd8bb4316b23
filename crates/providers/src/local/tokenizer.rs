//! The tokenizer of the embedded model, built from the GGUF's own metadata: a byte-level BPE over
//! `tokenizer.ggml.tokens` and `tokenizer.ggml.merges`, digits split one by one before the
//! byte-level step (as SmolLM2's `tokenizer.json` does), and the control tokens
//! (`token_type == 3`) as special tokens.

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, DecoderWrapper, PreTokenizerWrapper, Tokenizer};

use crate::ProviderError;

/// `token_type` of a control token in GGUF (llama.cpp's `LLAMA_TOKEN_TYPE_CONTROL`).
const CONTROL: i32 = 3;

/// Two views of one vocabulary: `full` knows the special tokens (for decoding and for the
/// chat frame), `plain` does not, so text from a request can never turn into a control token.
pub struct GgufTokenizer {
    full: Tokenizer,
    plain: Tokenizer,
    special: Vec<u32>,
}

fn bad(what: impl std::fmt::Display) -> ProviderError {
    ProviderError::Unavailable(format!("model tokenizer: {what}"))
}

fn strings<'a>(content: &'a Content, key: &str) -> Result<Vec<&'a String>, ProviderError> {
    let values = content
        .metadata
        .get(key)
        .ok_or_else(|| bad(format!("GGUF metadata has no {key}")))?
        .to_vec()
        .map_err(|_| bad(format!("{key} is not an array")))?;
    values
        .iter()
        .map(|v| {
            v.to_string()
                .map_err(|_| bad(format!("{key} holds a non-string")))
        })
        .collect()
}

impl GgufTokenizer {
    pub fn from_gguf(content: &Content) -> Result<Self, ProviderError> {
        let tokens = strings(content, "tokenizer.ggml.tokens")?;
        let merges = strings(content, "tokenizer.ggml.merges")?;
        let types: Vec<i32> = match content.metadata.get("tokenizer.ggml.token_type") {
            Some(Value::Array(values)) => values
                .iter()
                .map(|v| v.to_i32().map_err(|_| bad("token_type holds a non-i32")))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(bad("tokenizer.ggml.token_type is not an array")),
            None => vec![1; tokens.len()],
        };
        if types.len() != tokens.len() {
            return Err(bad("token_type and tokens differ in length"));
        }
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(id, t)| ((*t).clone(), id as u32))
            .collect();
        let merges = merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .ok_or_else(|| bad(format!("merge {m:?} has no space")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let build = || -> Result<Tokenizer, ProviderError> {
            let bpe = BPE::builder()
                .vocab_and_merges(vocab.clone(), merges.clone())
                .build()
                .map_err(bad)?;
            let mut tokenizer = Tokenizer::new(bpe);
            let pre = Sequence::new(vec![
                PreTokenizerWrapper::Digits(Digits::new(true)),
                PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
            ]);
            tokenizer.with_pre_tokenizer(Some(pre));
            tokenizer.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())));
            Ok(tokenizer)
        };
        let plain = build()?;
        let mut full = build()?;
        let special_tokens: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|(_, t)| **t == CONTROL)
            .map(|(tok, _)| AddedToken::from((*tok).clone(), true))
            .collect();
        full.add_special_tokens(special_tokens).map_err(bad)?;
        let special = types
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == CONTROL)
            .map(|(id, _)| id as u32)
            .collect();
        Ok(GgufTokenizer {
            full,
            plain,
            special,
        })
    }

    /// Encodes text with special tokens recognised (`<|im_end|>` becomes its one id).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ProviderError> {
        let encoding = self
            .full
            .encode(text, false)
            .map_err(|e| ProviderError::InvalidRequest(format!("tokenizing: {e}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Encodes untrusted text: special-token spellings stay ordinary characters.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>, ProviderError> {
        let encoding = self
            .plain
            .encode(text, false)
            .map_err(|e| ProviderError::InvalidRequest(format!("tokenizing: {e}")))?;
        let ids = encoding.get_ids().to_vec();
        // The BPE has no merges that build a control token, so this holds; checked because the
        // chat frame's integrity depends on it.
        if ids.iter().any(|id| self.is_special(*id)) {
            return Err(ProviderError::InvalidRequest(
                "request text tokenized to a control token".into(),
            ));
        }
        Ok(ids)
    }

    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, ProviderError> {
        self.full
            .decode(ids, skip_special)
            .map_err(|e| ProviderError::Protocol(format!("decoding model output: {e}")))
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.full.token_to_id(token)
    }

    pub fn is_special(&self, id: u32) -> bool {
        self.special.binary_search(&id).is_ok()
    }

    pub fn vocab_size(&self) -> usize {
        self.full.get_vocab_size(true)
    }
}
