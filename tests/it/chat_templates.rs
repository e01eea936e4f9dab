//! Chat templates rendered by minijinja against Hugging Face transformers' `apply_chat_template`.
//!
//! `tests/fixtures/chat_templates.json` holds the Qwen3, Llama 3 and Llama 3.2 templates and
//! transformers' renderings (made by `tests/fixtures/make_chat_fixtures.py`).

use tableseek::engine::{ChatMessage, ChatTemplate, ChatTemplateError, TemplateOptions};

fn fixture() -> serde_json::Value {
    let path = crate::common::fixtures_dir().join("chat_templates.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn messages(value: &serde_json::Value) -> Vec<ChatMessage> {
    serde_json::from_value(value.clone()).unwrap()
}

fn template(fixture: &serde_json::Value, name: &str) -> ChatTemplate {
    let spec = &fixture["templates"][name];
    ChatTemplate::new(
        spec["source"].as_str().unwrap(),
        spec["bos_token"].as_str(),
        spec["eos_token"].as_str(),
    )
    .unwrap()
}

#[test]
fn renderings_equal_transformers() {
    let fixture = fixture();
    let cases = fixture["cases"].as_array().unwrap();
    let mut checked = std::collections::BTreeMap::<&str, usize>::new();
    for case in cases {
        let name = case["template"].as_str().unwrap();
        let template = template(&fixture, name);
        let set = case["messages"].as_str().unwrap();
        let options = TemplateOptions {
            add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
            enable_thinking: case["enable_thinking"].as_bool(),
        };
        let rendered = template
            .render(&messages(&fixture["message_sets"][set]), &options)
            .unwrap();
        assert_eq!(
            rendered,
            case["expected"].as_str().unwrap(),
            "{name} / {set} / {options:?}"
        );
        *checked.entry(name).or_default() += 1;
    }
    assert_eq!(checked.get("qwen3"), Some(&24));
    assert_eq!(checked.get("llama3"), Some(&8));
    assert_eq!(checked.get("llama3_2"), Some(&8));
}

#[test]
fn qwen3_enable_thinking_false_prefills_an_empty_think_block() {
    let fixture = fixture();
    let template = template(&fixture, "qwen3");
    let question = [ChatMessage::user("Which table?")];
    let render = |enable_thinking| {
        template
            .render(
                &question,
                &TemplateOptions {
                    add_generation_prompt: true,
                    enable_thinking,
                },
            )
            .unwrap()
    };
    let base = "<|im_start|>user\nWhich table?<|im_end|>\n<|im_start|>assistant\n";
    assert_eq!(render(None), base);
    assert_eq!(render(Some(true)), base);
    assert_eq!(
        render(Some(false)),
        format!("{base}<think>\n\n</think>\n\n")
    );
}

#[test]
fn qwen3_drops_reasoning_of_earlier_turns() {
    let fixture = fixture();
    let template = template(&fixture, "qwen3");
    let rendered = template
        .render(
            &[
                ChatMessage::user("2+2?"),
                ChatMessage::assistant("<think>\nadding\n</think>\n\n4"),
                ChatMessage::user("3+3?"),
            ],
            &TemplateOptions::default(),
        )
        .unwrap();
    assert!(!rendered.contains("adding"), "{rendered}");
    assert!(
        rendered.contains("<|im_start|>assistant\n4<|im_end|>"),
        "{rendered}"
    );
}

#[test]
fn template_errors_are_reported_not_panicked() {
    let err = ChatTemplate::new("{% for m in messages %}", None, None).unwrap_err();
    assert!(matches!(err, ChatTemplateError::Compile(_)), "{err}");

    let missing = crate::common::fixtures_dir().join("no-such.json");
    let err = ChatTemplate::from_tokenizer_config(&missing).unwrap_err();
    assert!(err.to_string().contains("no-such.json"), "{err}");
}

#[test]
fn tokenizer_config_without_template_says_so() {
    let dir = crate::common::shared_dir();
    let path = dir.join("reference/tiny-models/tiny-qwen3/tokenizer_config.json");
    if !path.exists() {
        eprintln!("SKIP: {} not found", path.display());
        return;
    }
    let err = ChatTemplate::from_tokenizer_config(&path).unwrap_err();
    assert!(matches!(err, ChatTemplateError::Missing(_)), "{err}");
}

#[test]
fn chatml_fallback_renders_like_qwen3_for_plain_conversations() {
    let fixture = fixture();
    let chatml = ChatTemplate::chatml();
    let mut checked = 0;
    for case in fixture["cases"].as_array().unwrap() {
        let set = case["messages"].as_str().unwrap();
        let plain = matches!(set, "user_only" | "system_user");
        if case["template"] != "qwen3" || !plain || !case["enable_thinking"].is_null() {
            continue;
        }
        let options = TemplateOptions {
            add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
            enable_thinking: None,
        };
        let rendered = chatml
            .render(&messages(&fixture["message_sets"][set]), &options)
            .unwrap();
        assert_eq!(rendered, case["expected"].as_str().unwrap(), "{set}");
        checked += 1;
    }
    assert_eq!(checked, 4);
}
