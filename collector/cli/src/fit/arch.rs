//! The architecture of a transformer: what its parameter count and its activations depend on,
//! read from a Hugging Face `config.json`, built from flags, or assumed from the nearest reference
//! model when only a parameter count is known.

use std::path::Path;

use oomlens_schema::memory::Precision;
use serde::Serialize;
use serde_json::Value;

use super::FitError;

/// How the layers are built (decides biases, norms, the MLP and the embeddings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Llama-style decoder: RMSNorm, no biases, gated (SwiGLU) MLP of three matrices, rotary
    /// positions, grouped-query attention (Llama, Mistral, Qwen2, Gemma, …).
    Gated,
    /// GPT-style decoder: LayerNorm, biases, a two-matrix MLP (GPT-2, GPT-NeoX, GPT-J, OPT, BLOOM, …).
    Plain,
    /// BERT-style encoder (`AutoModel`): LayerNorm, biases, learned positions and token types, an
    /// embedding LayerNorm and a pooler, no LM head.
    Encoder,
}

/// A transformer's architecture.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Architecture {
    /// Where it comes from: the config's `model_type`, `flags`, or the reference model assumed.
    pub name: String,
    /// Layer family.
    pub family: Family,
    /// Hidden size `h`.
    pub hidden: u64,
    /// Transformer layers `L`.
    pub layers: u64,
    /// Attention (query) heads `a`.
    pub heads: u64,
    /// Key/value heads (grouped-query attention; `heads` without it).
    pub kv_heads: u64,
    /// Dimension of one head (`hidden / heads` unless the config says otherwise).
    pub head_dim: u64,
    /// Vocabulary `V`.
    pub vocab: u64,
    /// MLP hidden size `f` (4h for GPT-style models without one).
    pub intermediate: u64,
    /// Whether the output head shares the input embedding's matrix.
    pub tied_embeddings: bool,
    /// Learned position embeddings (0 with rotary / ALiBi positions).
    pub learned_positions: u64,
    /// Token-type embeddings (BERT's segment ids).
    pub token_types: u64,
    /// The longest context it was trained for, when known.
    pub max_position: Option<u64>,
    /// The checkpoint's dtype (`torch_dtype`), when the config says.
    #[serde(serialize_with = "serialize_dtype")]
    pub dtype: Option<Precision>,
}

/// `hidden / heads` when the heads divide the hidden size, else 0.
pub(crate) fn head_dim(hidden: u64, heads: u64) -> u64 {
    hidden.checked_div(heads).filter(|_| hidden.is_multiple_of(heads)).unwrap_or(0)
}

fn serialize_dtype<S: serde::Serializer>(v: &Option<Precision>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(p) => s.collect_str(p),
        None => s.serialize_none(),
    }
}

/// A reference model for a bare parameter count: name, published parameter count, hidden,
/// layers, heads, KV heads, vocabulary, MLP size, family, tied head.
type Reference = (&'static str, u64, u64, u64, u64, u64, u64, u64, Family, bool);

/// Public shapes of well-known models, smallest first (their `config.json` values).
const REFERENCES: &[Reference] = &[
    ("gpt2 (124M)", 124_439_808, 768, 12, 12, 12, 50_257, 3_072, Family::Plain, true),
    ("gpt2-medium (355M)", 354_823_168, 1_024, 24, 16, 16, 50_257, 4_096, Family::Plain, true),
    ("gpt2-large (774M)", 774_030_080, 1_280, 36, 20, 20, 50_257, 5_120, Family::Plain, true),
    ("gpt2-xl (1.5B)", 1_557_611_200, 1_600, 48, 25, 25, 50_257, 6_400, Family::Plain, true),
    ("pythia-2.8b", 2_775_208_960, 2_560, 32, 32, 32, 50_304, 10_240, Family::Plain, false),
    ("Llama-2-7b", 6_738_415_616, 4_096, 32, 32, 32, 32_000, 11_008, Family::Gated, false),
    ("Llama-2-13b", 13_015_864_320, 5_120, 40, 40, 40, 32_000, 13_824, Family::Gated, false),
    ("llama-30b", 32_528_943_616, 6_656, 60, 52, 52, 32_000, 17_920, Family::Gated, false),
    ("Llama-2-70b", 68_976_648_192, 8_192, 80, 64, 8, 32_000, 28_672, Family::Gated, false),
    ("GPT-3 175B", 175_000_000_000, 12_288, 96, 96, 96, 50_257, 49_152, Family::Plain, true),
    ("Llama-3.1-405B", 405_853_388_800, 16_384, 126, 128, 8, 128_256, 53_248, Family::Gated, false),
];

impl Architecture {
    /// A GPT-style or Llama-style decoder from its dimensions: gated (three MLP matrices, no
    /// biases, untied head) when `intermediate` is given, else GPT-style with a 4h MLP, biases and
    /// a tied head.
    pub fn from_dims(
        hidden: u64,
        layers: u64,
        heads: u64,
        kv_heads: Option<u64>,
        vocab: u64,
        intermediate: Option<u64>,
    ) -> Result<Architecture, FitError> {
        let family = if intermediate.is_some() { Family::Gated } else { Family::Plain };
        if head_dim(hidden, heads) == 0 && heads > 0 {
            return Err(FitError::BadShape(format!(
                "{heads} attention heads do not divide a hidden size of {hidden}"
            )));
        }
        let arch = Architecture {
            name: "flags".to_owned(),
            family,
            hidden,
            layers,
            heads,
            kv_heads: kv_heads.unwrap_or(heads),
            head_dim: head_dim(hidden, heads),
            vocab,
            intermediate: intermediate.unwrap_or(4 * hidden),
            tied_embeddings: family == Family::Plain,
            learned_positions: 0,
            token_types: 0,
            max_position: None,
            dtype: None,
        };
        arch.check()?;
        Ok(arch)
    }

    /// The reference model whose parameter count is nearest to `params` (on a log scale).
    pub fn reference_for(params: u64) -> Architecture {
        let distance = |r: &Reference| ((r.1 as f64).ln() - (params.max(1) as f64).ln()).abs();
        let r = REFERENCES
            .iter()
            .min_by(|a, b| distance(a).total_cmp(&distance(b)))
            .copied()
            .unwrap_or(REFERENCES[0]);
        let (name, _, hidden, layers, heads, kv_heads, vocab, intermediate, family, tied) = r;
        Architecture {
            name: name.to_owned(),
            family,
            hidden,
            layers,
            heads,
            kv_heads,
            head_dim: hidden / heads,
            vocab,
            intermediate,
            tied_embeddings: tied,
            learned_positions: 0,
            token_types: 0,
            max_position: None,
            dtype: None,
        }
    }

    /// Reads a Hugging Face `config.json`.
    pub fn from_config_file(path: &Path) -> Result<Architecture, FitError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| FitError::ConfigRead { path: path.display().to_string(), reason: e })?;
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| FitError::ConfigJson { path: path.display().to_string(), reason: e })?;
        Architecture::from_config(&doc)
    }

    /// Reads a parsed Hugging Face config: `hidden_size`, `num_hidden_layers`,
    /// `num_attention_heads`, `num_key_value_heads`, `vocab_size`, `intermediate_size`,
    /// `max_position_embeddings`, `tie_word_embeddings`, `torch_dtype` (or GPT-2's `n_embd`,
    /// `n_layer`, `n_head`, `n_inner`, `n_positions`).
    pub fn from_config(doc: &Value) -> Result<Architecture, FitError> {
        let Value::Object(map) = doc else {
            return Err(FitError::ConfigField("the config is not a JSON object".to_owned()));
        };
        // Some configs nest the language model (multimodal models): use `text_config` when the
        // top level has no hidden size.
        if !["hidden_size", "n_embd", "d_model"].iter().any(|k| map.contains_key(*k))
            && let Some(text) = map.get("text_config")
        {
            return Architecture::from_config(text);
        }
        let model_type = map.get("model_type").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
        let int = |keys: &[&str]| -> Result<Option<u64>, FitError> {
            for k in keys {
                match map.get(*k) {
                    None | Some(Value::Null) => continue,
                    Some(v) => {
                        return v.as_u64().map(Some).ok_or_else(|| {
                            FitError::ConfigField(format!("{k} is {v}, expected a positive integer"))
                        });
                    }
                }
            }
            Ok(None)
        };
        let need = |keys: &[&str]| -> Result<u64, FitError> {
            int(keys)?.ok_or_else(|| FitError::ConfigField(format!("the config has no {}", keys.join(" / "))))
        };
        let hidden = need(&["hidden_size", "n_embd", "d_model"])?;
        let layers = need(&["num_hidden_layers", "n_layer", "num_layers"])?;
        let heads = need(&["num_attention_heads", "n_head", "num_heads"])?;
        let vocab = need(&["vocab_size"])?;
        let gpt2 = model_type == "gpt2" || map.contains_key("n_embd");
        let encoder =
            matches!(model_type.as_str(), "bert" | "roberta" | "xlm-roberta" | "camembert" | "electra");
        let plain = gpt2
            || encoder
            || matches!(
                model_type.as_str(),
                "gpt_neox"
                    | "gptj"
                    | "gpt_neo"
                    | "opt"
                    | "bloom"
                    | "falcon"
                    | "phi"
                    | "gpt_bigcode"
                    | "starcoder2"
            );
        let family = if encoder {
            Family::Encoder
        } else if plain {
            Family::Plain
        } else {
            Family::Gated
        };
        let intermediate = int(&["intermediate_size", "n_inner", "ffn_dim"])?.unwrap_or(4 * hidden);
        let kv_heads = int(&["num_key_value_heads", "multi_query_group_num"])?.unwrap_or(heads);
        let head_dim = match int(&["head_dim"])? {
            Some(d) => d,
            None => head_dim(hidden, heads),
        };
        let max_position = int(&["max_position_embeddings", "n_positions", "n_ctx", "seq_length"])?;
        let tied_embeddings = match map.get("tie_word_embeddings") {
            Some(Value::Bool(b)) => *b,
            // The library's default.
            _ => true,
        };
        let dtype = match map.get("torch_dtype").or_else(|| map.get("dtype")).and_then(Value::as_str) {
            Some(name) => Some(Precision::parse(name).ok_or_else(|| {
                FitError::ConfigField(format!("torch_dtype {name:?} is not one of {}", Precision::known()))
            })?),
            None => None,
        };
        let learned_positions = if gpt2 || encoder { max_position.unwrap_or(0) } else { 0 };
        let token_types = if encoder { int(&["type_vocab_size"])?.unwrap_or(2) } else { 0 };
        let arch = Architecture {
            name: if model_type.is_empty() { "config".to_owned() } else { model_type },
            family,
            hidden,
            layers,
            heads,
            kv_heads,
            head_dim,
            vocab,
            intermediate,
            tied_embeddings,
            learned_positions,
            token_types,
            max_position,
            dtype,
        };
        arch.check()?;
        Ok(arch)
    }

    /// Rejects shapes that cannot be.
    pub(crate) fn check(&self) -> Result<(), FitError> {
        let bad = |what: &str| Err(FitError::BadShape(what.to_owned()));
        for (name, v) in [
            ("hidden size", self.hidden),
            ("layers", self.layers),
            ("attention heads", self.heads),
            ("key/value heads", self.kv_heads),
            ("vocabulary", self.vocab),
            ("MLP size", self.intermediate),
        ] {
            if v == 0 {
                return bad(&format!("{name} must be at least 1"));
            }
        }
        // Beyond any model: refused, so that no count overflows.
        for (name, v, max) in [
            ("hidden size", self.hidden, 1u64 << 20),
            ("layers", self.layers, 1 << 16),
            ("attention heads", self.heads, 1 << 14),
            ("head size", self.head_dim, 1 << 14),
            ("vocabulary", self.vocab, 1 << 24),
            ("MLP size", self.intermediate, 1 << 22),
            ("positions", self.learned_positions, 1 << 24),
            ("token types", self.token_types, 1 << 16),
        ] {
            if v > max {
                return bad(&format!("a {name} of {v} is beyond any model (at most {max})"));
            }
        }
        if self.head_dim == 0 {
            return bad(&format!(
                "{} attention heads do not divide a hidden size of {}",
                self.heads, self.hidden
            ));
        }
        if self.kv_heads > self.heads || !self.heads.is_multiple_of(self.kv_heads) {
            return bad(&format!(
                "{} key/value heads must divide {} attention heads (grouped-query attention)",
                self.kv_heads, self.heads
            ));
        }
        Ok(())
    }

    /// Query projection width (`heads × head_dim`, usually the hidden size).
    pub fn q_dim(&self) -> u64 {
        self.heads * self.head_dim
    }

    /// Key (or value) projection width (`kv_heads × head_dim`).
    pub fn kv_dim(&self) -> u64 {
        self.kv_heads * self.head_dim
    }

    fn biases(&self) -> bool {
        self.family != Family::Gated
    }

    /// Parameters of one norm (LayerNorm: scale and bias; RMSNorm: scale).
    fn norm_params(&self) -> u64 {
        if self.biases() { 2 * self.hidden } else { self.hidden }
    }

    /// Whether the MLP has three matrices (gate, up, down).
    pub fn gated(&self) -> bool {
        self.family == Family::Gated
    }

    /// Parameters of one transformer layer.
    pub fn params_per_layer(&self) -> u64 {
        let (h, q, kv, f) = (self.hidden, self.q_dim(), self.kv_dim(), self.intermediate);
        let mut attention = h * q + 2 * h * kv + q * h;
        let mut mlp = if self.gated() { 3 * h * f } else { 2 * h * f };
        if self.biases() {
            attention += q + 2 * kv + h;
            mlp += f + h;
        }
        attention + mlp + 2 * self.norm_params()
    }

    /// Parameters of the embeddings (tokens, positions, token types and their norm).
    pub fn embedding_params(&self) -> u64 {
        let norm = if self.family == Family::Encoder { self.norm_params() } else { 0 };
        (self.vocab + self.learned_positions + self.token_types) * self.hidden + norm
    }

    /// Every parameter: embeddings, layers, the final norm, BERT's pooler, an untied LM head.
    pub fn params(&self) -> u64 {
        let encoder = self.family == Family::Encoder;
        let final_norm = if encoder { 0 } else { self.norm_params() };
        let pooler = if encoder { self.hidden * self.hidden + self.hidden } else { 0 };
        let head = if encoder || self.tied_embeddings { 0 } else { self.vocab * self.hidden };
        let layers = u128::from(self.layers) * u128::from(self.params_per_layer());
        let total = layers + u128::from(self.embedding_params() + final_norm + pooler + head);
        u64::try_from(total).unwrap_or(u64::MAX)
    }

    /// The largest single module's parameters (the token embedding or one MLP matrix): what
    /// DeepSpeed's ZeRO-3 estimator gathers at once.
    pub fn largest_layer_params(&self) -> u64 {
        let bias = u64::from(self.biases());
        (self.vocab * self.hidden).max(self.hidden * self.intermediate + bias * self.intermediate)
    }

    /// One line for people: `llama, h 4096 × 32 layers, 32 heads (8 KV), V 32000, MLP 11008 (gated)`.
    pub fn describe(&self) -> String {
        let kv = if self.kv_heads == self.heads { String::new() } else { format!(" ({} KV)", self.kv_heads) };
        let mlp = if self.gated() { "gated" } else { "2-matrix" };
        format!(
            "{}: hidden {} × {} layers, {} heads{kv}, vocabulary {}, MLP {} ({mlp})",
            self.name, self.hidden, self.layers, self.heads, self.vocab, self.intermediate
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Public config values (Hugging Face hub): the parameter counts are the published ones.
    #[test]
    fn parameter_counts_of_public_configs() {
        let llama2_7b = json!({
            "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
            "vocab_size": 32000, "max_position_embeddings": 4096, "tie_word_embeddings": false,
            "torch_dtype": "float16"
        });
        let a = Architecture::from_config(&llama2_7b).unwrap();
        assert_eq!(a.params(), 6_738_415_616);
        assert_eq!((a.family, a.dtype, a.max_position), (Family::Gated, Some(Precision::Fp16), Some(4096)));
        let gpt2 = json!({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
            "n_positions": 1024, "vocab_size": 50257});
        assert_eq!(Architecture::from_config(&gpt2).unwrap().params(), 124_439_808);
        let bert = json!({"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
            "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512,
            "type_vocab_size": 2, "vocab_size": 28996});
        assert_eq!(Architecture::from_config(&bert).unwrap().params(), 108_310_272, "bert-base-cased");
        let mistral = json!({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "vocab_size": 32000, "tie_word_embeddings": false, "torch_dtype": "bfloat16"});
        assert_eq!(Architecture::from_config(&mistral).unwrap().params(), 7_241_732_096, "Mistral-7B");
        let llama2_70b = json!({"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
            "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
            "vocab_size": 32000, "tie_word_embeddings": false});
        assert_eq!(Architecture::from_config(&llama2_70b).unwrap().params(), 68_976_648_192);
        // Every reference shape's count is what its dimensions give.
        for r in REFERENCES {
            let a = Architecture::reference_for(r.1);
            assert_eq!(a.name, r.0);
            // (Without the learned positions of GPT-2 and GPT-3: within 1 %.)
            let rel = a.params() as f64 / r.1 as f64 - 1.0;
            assert!(rel.abs() < 0.01, "{}: {} vs {}", r.0, a.params(), r.1);
        }
    }

    #[test]
    fn flags_and_references() {
        let a = Architecture::from_dims(4096, 32, 32, None, 32000, Some(11008)).unwrap();
        assert_eq!(a.params(), 6_738_415_616, "gated flags are Llama-style");
        let g = Architecture::from_dims(768, 12, 12, None, 50257, None).unwrap();
        assert_eq!(g.params(), 124_439_808 - 1024 * 768, "GPT-style flags know no learned positions");
        assert_eq!(Architecture::reference_for(7_000_000_000).name, "Llama-2-7b");
        assert_eq!(Architecture::reference_for(1).name, "gpt2 (124M)");
        assert_eq!(Architecture::reference_for(u64::MAX).name, "Llama-3.1-405B");
        assert_eq!(a.largest_layer_params(), 32000 * 4096);
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        let err = |doc: Value| Architecture::from_config(&doc).unwrap_err().to_string();
        assert!(err(json!([1, 2])).contains("not a JSON object"));
        assert!(err(json!({"hidden_size": 64})).contains("num_hidden_layers"));
        assert!(
            err(json!({"hidden_size": 64, "num_hidden_layers": 0, "num_attention_heads": 4,
            "vocab_size": 10}))
            .contains("layers must be at least 1")
        );
        assert!(
            err(json!({"hidden_size": -64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "vocab_size": 10}))
            .contains("hidden_size is -64")
        );
        assert!(
            err(json!({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 3, "vocab_size": 10}))
            .contains("must divide")
        );
        assert!(
            err(json!({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 128,
            "vocab_size": 10}))
            .contains("do not divide")
        );
        assert!(
            err(json!({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "vocab_size": 10, "torch_dtype": "float64"}))
            .contains("torch_dtype")
        );
        // A multimodal config: the text model's values.
        let nested = json!({"model_type": "llava", "text_config": {"model_type": "llama",
            "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
            "num_hidden_layers": 32, "vocab_size": 32000, "tie_word_embeddings": false}});
        assert_eq!(Architecture::from_config(&nested).unwrap().params(), 6_738_415_616);
    }
}
