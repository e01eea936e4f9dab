//! Chat templates: turning a conversation into the prompt text a model was trained on.
//!
//! Models ship their template as Jinja source (`tokenizer.chat_template` in GGUF metadata,
//! `chat_template` in `tokenizer_config.json`). [`ChatTemplate`] renders it with minijinja set up
//! the way Hugging Face transformers sets up Jinja2 (`trim_blocks`, `lstrip_blocks`, Python string
//! methods via minijinja-contrib's pycompat, `raise_exception`, `strftime_now`), so the prompt is
//! byte-identical to `apply_chat_template`'s.
//!
//! `strftime_now` formats a fixed date, 26 July 2024 00:00:00 (the default date Llama 3.1+ templates
//! fall back to), not the clock: the same conversation must always give the same prompt, or
//! prompt caches and recorded runs stop matching.
//!
//! [`strip_thinking`] separates a reasoning model's `<think>…</think>` block from its answer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file;
use minijinja::{Environment, ErrorKind, Value};
use serde::{Deserialize, Serialize};

/// Errors from loading or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    #[error("the model has no chat template ({0})")]
    Missing(String),
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("GGUF metadata `{key}`: {reason}")]
    BadKey { key: &'static str, reason: String },
    #[error("compiling the chat template: {0:#}")]
    Compile(#[source] minijinja::Error),
    #[error("rendering the chat template: {0:#}")]
    Render(#[source] minijinja::Error),
    #[error("the chat template is refused: {0}; a namespace that can reach itself would overflow the stack when printed")]
    NestedNamespace(String),
}

pub type Result<T> = std::result::Result<T, ChatTemplateError>;

const TEMPLATE_NAME: &str = "chat";
const CHATML_SOURCE: &str = "{%- for message in messages %}\
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\
{%- endfor %}\
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
/// The date `strftime_now` reports; see the module docs for why it is fixed.
const FIXED_DATE: FixedDate = FixedDate {
    year: 2024,
    month: 7,
    day: 26,
};

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// How to render a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateOptions {
    /// End with the header of an assistant turn, so the model writes the reply next.
    pub add_generation_prompt: bool,
    /// For templates that read it (Qwen3): `Some(false)` asks for no reasoning, `Some(true)`
    /// allows it, `None` leaves the variable undefined, the template's own default.
    pub enable_thinking: Option<bool>,
}

impl Default for TemplateOptions {
    /// A generation prompt, thinking left to the template.
    fn default() -> Self {
        Self {
            add_generation_prompt: true,
            enable_thinking: None,
        }
    }
}

/// A compiled chat template with the BOS/EOS texts it may refer to.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// Compiles Jinja `source`; `bos_token`/`eos_token` are the texts the template sees under
    /// those names (empty when the model has none).
    pub fn new(
        source: impl Into<String>,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<Self> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(ChatTemplateError::Compile)?;
        let source = source.into();
        if let Some(why) = super::chat_namespace::nesting_violation(&source, syntax.clone()) {
            return Err(ChatTemplateError::NestedNamespace(why));
        }
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(ChatTemplateError::Compile)?;
        Ok(Self {
            env,
            bos_token: bos_token.unwrap_or_default().to_string(),
            eos_token: eos_token.unwrap_or_default().to_string(),
        })
    }

    /// A plain ChatML template (`<|im_start|>role\ncontent<|im_end|>`), for models whose files
    /// carry none. It renders what Qwen's templates render for conversations without tools or
    /// reasoning.
    pub fn chatml() -> Self {
        // The source is a constant that compiles; a failure here is a bug in this file.
        Self::new(CHATML_SOURCE, None, Some("<|im_end|>")).expect("the ChatML template compiles")
    }

    /// The template in GGUF metadata (`tokenizer.chat_template`), with BOS/EOS texts looked up in
    /// the file's vocabulary.
    pub fn from_gguf(content: &gguf_file::Content) -> Result<Self> {
        const KEY: &str = "tokenizer.chat_template";
        let source = match content.metadata.get(KEY) {
            Some(gguf_file::Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(ChatTemplateError::BadKey {
                    key: KEY,
                    reason: format!("expected a string, found {:?}", other.value_type()),
                })
            }
            None => return Err(ChatTemplateError::Missing(format!("no `{KEY}` in GGUF"))),
        };
        let token_text = |key: &str| -> Option<String> {
            let id = content.metadata.get(key)?.to_u32().ok()?;
            match content.metadata.get("tokenizer.ggml.tokens")? {
                gguf_file::Value::Array(tokens) => {
                    tokens.get(id as usize)?.to_string().ok().cloned()
                }
                _ => None,
            }
        };
        let bos = token_text("tokenizer.ggml.bos_token_id");
        let eos = token_text("tokenizer.ggml.eos_token_id");
        Self::new(source, bos.as_deref(), eos.as_deref())
    }

    /// The template in a Hugging Face `tokenizer_config.json` (`chat_template`, either a string or
    /// a list of named templates, of which `default` is used).
    pub fn from_tokenizer_config(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| ChatTemplateError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let config: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|source| ChatTemplateError::Json {
                path: path.to_path_buf(),
                source,
            })?;
        let source = match config.get("chat_template") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Array(named)) => named
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template")?.as_str())
                .map(str::to_string)
                .ok_or_else(|| {
                    ChatTemplateError::Missing(format!(
                        "{} lists chat templates but none named `default`",
                        path.display()
                    ))
                })?,
            _ => {
                return Err(ChatTemplateError::Missing(format!(
                    "no `chat_template` in {}",
                    path.display()
                )))
            }
        };
        let special = |key: &str| config.get(key).and_then(super::tokenizer::token_content);
        Self::new(source, special("bos_token"), special("eos_token"))
    }

    /// Whether the template knows about reasoning blocks (Qwen3 and other thinking models), which
    /// need a large new-token budget.
    pub fn supports_thinking(&self) -> bool {
        self.env
            .get_template(TEMPLATE_NAME)
            .map(|t| t.source().contains("<think>") || t.source().contains("enable_thinking"))
            .unwrap_or(false)
    }

    /// Renders `messages` into prompt text.
    pub fn render(&self, messages: &[ChatMessage], options: &TemplateOptions) -> Result<String> {
        let mut context: BTreeMap<&str, Value> = BTreeMap::new();
        let messages: Vec<Value> = messages
            .iter()
            .map(|message| {
                Value::from(BTreeMap::from([
                    ("role", Value::from(message.role.as_str())),
                    ("content", Value::from(message.content.as_str())),
                ]))
            })
            .collect();
        context.insert("messages", Value::from(messages));
        context.insert(
            "add_generation_prompt",
            Value::from(options.add_generation_prompt),
        );
        context.insert("bos_token", Value::from(self.bos_token.as_str()));
        context.insert("eos_token", Value::from(self.eos_token.as_str()));
        // Left out rather than set to none: templates test `enable_thinking is defined`.
        if let Some(enable_thinking) = options.enable_thinking {
            context.insert("enable_thinking", Value::from(enable_thinking));
        }
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(ChatTemplateError::Render)?;
        template.render(context).map_err(ChatTemplateError::Render)
    }

    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }
}

/// Splits a reasoning model's reply into its `<think>` content and the answer after `</think>`.
///
/// Qwen3's generation prompt can already contain the opening `<think>`, so a reply with only a
/// closing tag counts as thinking up to that tag. A reply whose thinking never closed (cut off by a
/// token limit) has no answer. Both parts are trimmed of surrounding whitespace.
pub fn strip_thinking(text: &str) -> (Option<String>, String) {
    const OPEN: &str = "<think>";
    const CLOSE: &str = "</think>";
    let trimmed = text.trim_start();
    let after_open = trimmed.strip_prefix(OPEN);
    match text.find(CLOSE) {
        Some(close) => {
            let before = &text[..close];
            let thinking = before
                .find(OPEN)
                .map_or(before, |open| &before[open + OPEN.len()..]);
            let answer = &text[close + CLOSE.len()..];
            (Some(thinking.trim().to_string()), answer.trim().to_string())
        }
        None => match after_open {
            Some(unfinished) => (Some(unfinished.trim().to_string()), String::new()),
            None => (None, text.trim().to_string()),
        },
    }
}

fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

fn strftime_now(format: String) -> std::result::Result<Value, minijinja::Error> {
    FIXED_DATE.strftime(&format).map(Value::from)
}

/// A calendar date at midnight, enough for the `strftime` formats chat templates use.
struct FixedDate {
    year: i32,
    month: u32,
    day: u32,
}

impl FixedDate {
    const MONTHS: [&'static str; 12] = crate::calendar::MONTH_NAMES;
    const WEEKDAYS: [&'static str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];

    /// Monday = 0, by Sakamoto's method.
    fn weekday(&self) -> usize {
        const OFFSETS: [i32; 12] = [0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4];
        let year = if self.month < 3 {
            self.year - 1
        } else {
            self.year
        };
        let sunday_based = (year + year / 4 - year / 100
            + year / 400
            + OFFSETS[self.month as usize - 1]
            + self.day as i32)
            .rem_euclid(7);
        ((sunday_based + 6) % 7) as usize
    }

    fn strftime(&self, format: &str) -> std::result::Result<String, minijinja::Error> {
        let month = Self::MONTHS[self.month as usize - 1];
        let weekday = Self::WEEKDAYS[self.weekday()];
        let mut out = String::new();
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('d') => out.push_str(&format!("{:02}", self.day)),
                Some('m') => out.push_str(&format!("{:02}", self.month)),
                Some('Y') => out.push_str(&self.year.to_string()),
                Some('y') => out.push_str(&format!("{:02}", self.year.rem_euclid(100))),
                Some('b') => out.push_str(&month[..3]),
                Some('B') => out.push_str(month),
                Some('a') => out.push_str(&weekday[..3]),
                Some('A') => out.push_str(weekday),
                Some('H' | 'M' | 'S') => out.push_str("00"),
                Some('%') => out.push('%'),
                other => {
                    return Err(minijinja::Error::new(
                        ErrorKind::InvalidOperation,
                        format!(
                            "strftime_now: unsupported directive %{}",
                            other.unwrap_or(' ')
                        ),
                    ))
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_template_can_be_shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<ChatTemplate>();
    }

    #[test]
    fn strftime_formats_the_fixed_date() {
        assert_eq!(FIXED_DATE.strftime("%d %b %Y").unwrap(), "26 Jul 2024");
        assert_eq!(
            FIXED_DATE.strftime("%A, %B %d, %y %H:%M:%S 100%%").unwrap(),
            "Friday, July 26, 24 00:00:00 100%"
        );
        assert!(FIXED_DATE.strftime("%Q").is_err());
    }

    #[test]
    fn weekday_matches_known_dates() {
        let date = |year, month, day| FixedDate { year, month, day };
        assert_eq!(FixedDate::WEEKDAYS[date(2000, 1, 1).weekday()], "Saturday");
        assert_eq!(FixedDate::WEEKDAYS[date(2024, 2, 29).weekday()], "Thursday");
        assert_eq!(
            FixedDate::WEEKDAYS[date(2026, 12, 2).weekday()],
            "Wednesday"
        );
    }

    #[test]
    fn raise_exception_aborts_rendering_with_its_message() {
        let template = ChatTemplate::new(
            "{% if messages|length == 0 %}{{ raise_exception('need a message') }}{% endif %}",
            None,
            None,
        )
        .unwrap();
        let err = template
            .render(&[], &TemplateOptions::default())
            .unwrap_err();
        assert!(err.to_string().contains("need a message"), "{err}");
    }

    #[test]
    fn enable_thinking_is_undefined_unless_set() {
        let template = ChatTemplate::new(
            "{% if enable_thinking is defined %}{{ enable_thinking }}{% else %}unset{% endif %}",
            None,
            None,
        )
        .unwrap();
        let render = |enable_thinking| {
            template
                .render(
                    &[],
                    &TemplateOptions {
                        add_generation_prompt: true,
                        enable_thinking,
                    },
                )
                .unwrap()
        };
        assert_eq!(render(None), "unset");
        // Printed the way Jinja2 prints Python booleans.
        assert_eq!(render(Some(false)), "False");
        assert_eq!(render(Some(true)), "True");
    }

    #[test]
    fn strip_thinking_separates_reasoning_from_answer() {
        assert_eq!(
            strip_thinking("<think>\nadd them\n</think>\n\n4"),
            (Some("add them".to_string()), "4".to_string())
        );
        // The opening tag was part of the prompt.
        assert_eq!(
            strip_thinking("add them\n</think>\n\n4"),
            (Some("add them".to_string()), "4".to_string())
        );
        assert_eq!(
            strip_thinking("<think>\n\n</think>\n\n4"),
            (Some(String::new()), "4".to_string())
        );
        assert_eq!(strip_thinking(" 4 "), (None, "4".to_string()));
        // Cut off while thinking: no answer yet.
        assert_eq!(
            strip_thinking("<think>\nstill going"),
            (Some("still going".to_string()), String::new())
        );
    }
}
