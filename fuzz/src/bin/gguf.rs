//! The GGUF header and metadata reader (`engine::read_gguf`, candle's parser plus our checks), and
//! what is built from a header alone: the model config, the model facts (`plan`), the tokenizer
//! rebuilt from GGUF metadata and the chat template stored there.
use tableseek::engine::config::Config;
use tableseek::engine::plan::ModelFacts;
use tableseek::engine::{
    read_gguf, ChatMessage, ChatTemplate, ModelSpec, TemplateOptions, Tokenizer,
};

fn main() {
    tableseek_fuzz::single_threaded();
    afl::fuzz!(|data: &[u8]| {
        let path = tableseek_fuzz::write_input("gguf", "model.gguf", data);
        let Ok(content) = read_gguf(&path) else {
            return;
        };
        let _ = Config::from_gguf_content(&content, "fuzz");
        let _ = ModelFacts::read(&ModelSpec::Path(path.clone()));
        if let Ok(tokenizer) = Tokenizer::from_gguf(&content) {
            if let Ok(ids) = tokenizer.encode("Hello, <|im_start|> world 123", true) {
                let _ = tokenizer.decode(&ids, false);
            }
        }
        if let Ok(template) = ChatTemplate::from_gguf(&content) {
            let messages = [ChatMessage::system("s"), ChatMessage::user("u")];
            let _ = template.render(&messages, &TemplateOptions::default());
        }
    });
}
