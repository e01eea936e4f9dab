//! Chat templates (`engine::ChatTemplate`, minijinja set up as transformers does): the input is
//! `template source NUL messages`, messages one per line as `role<TAB>content` (a line without a
//! tab is a user message). Without a NUL the whole input is the source and a fixed conversation is
//! rendered. Also `strip_thinking` on the rendered prompt.
use tableseek::engine::{strip_thinking, ChatMessage, ChatTemplate, TemplateOptions};

fn main() {
    tableseek_fuzz::single_threaded();
    afl::fuzz!(|data: &[u8]| {
        let (source, messages) = tableseek_fuzz::split_nul(data);
        let Ok(source) = std::str::from_utf8(source) else {
            return;
        };
        let messages: Vec<ChatMessage> = match messages {
            Some(bytes) => String::from_utf8_lossy(bytes)
                .lines()
                .map(|line| match line.split_once('\t') {
                    Some((role, content)) => ChatMessage::new(role, content.replace("\\n", "\n")),
                    None => ChatMessage::user(line),
                })
                .collect(),
            None => vec![
                ChatMessage::system("You are terse."),
                ChatMessage::user("Which table?"),
                ChatMessage::assistant("<think>hmm</think>T1"),
                ChatMessage::user("Why?"),
            ],
        };
        let Ok(template) = ChatTemplate::new(source, Some("<s>"), Some("</s>")) else {
            return;
        };
        let _ = template.supports_thinking();
        for enable_thinking in [None, Some(false)] {
            let options = TemplateOptions {
                add_generation_prompt: true,
                enable_thinking,
            };
            if let Ok(prompt) = template.render(&messages, &options) {
                let _ = strip_thinking(&prompt);
            }
        }
    });
}
