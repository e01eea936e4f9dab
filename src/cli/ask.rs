//! `tableseek ask`: one query through the TableSeek loop over a corpus, with the real engine.

use std::path::PathBuf;

use anyhow::Context;
use tableseek::agent::{Agent, CorpusSpace, EngineLlm, QaMode, Trajectory};
use tableseek::corpus::Corpus;

use super::agent_args::AgentArgs;
use super::model_args::ModelArgs;

#[derive(Debug, clap::Args)]
pub struct AskArgs {
    /// Directory of tables (CSV/TSV, Markdown, HTML, JSON/JSONL, TabFact).
    #[arg(long)]
    pub corpus: PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Print the trajectory as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Zero the timings and prefix-cache hit counts in the JSON so two runs compare byte for byte.
    #[arg(long)]
    pub no_timings: bool,
    /// The question or claim.
    pub query: String,
}

pub fn run(args: AskArgs) -> anyhow::Result<()> {
    // Bad flags should fail before the slow parts (corpus and model loading).
    args.agent.config(1)?;
    let (corpus, _report) = super::corpus::load(&args.corpus)?;
    anyhow::ensure!(!corpus.is_empty(), "no tables in {}", args.corpus.display());
    let mut model = args.model.load()?;
    let mut config = args.agent.config(model.default_max_new_tokens())?;
    let space = CorpusSpace::new(&corpus).candidates(config.candidates)?;
    let mut llm = EngineLlm::new(&mut model)
        .enable_thinking(args.agent.enable_thinking)
        .constrain(args.agent.constrain.is_on());
    config.qa = resolve_qa(args.agent.qa, &mut llm)?;
    let agent = Agent::new(config)?;
    let mut trajectory = agent.run(&mut llm, &space, &args.query)?;
    if args.no_timings {
        trajectory.zero_timings();
    }
    if args.json {
        println!("{}", serde_json::to_string(&trajectory)?);
    } else {
        print_for_people(&trajectory, &corpus);
    }
    Ok(())
}

/// `--qa auto` measured on the loaded model ([`QaMode::resolve`]), and said on stderr.
pub fn resolve_qa(qa: QaMode, llm: &mut EngineLlm<'_>) -> anyhow::Result<QaMode> {
    let (resolved, score) = qa.resolve(llm).context("running the --qa auto SQL probe")?;
    if let Some(score) = score {
        eprintln!(
            "--qa auto: the model's SQL answered {} of {} probe questions; answering by {}",
            score.correct,
            score.total,
            if resolved == QaMode::Sql {
                "SQL"
            } else {
                "reading the table"
            }
        );
    }
    Ok(resolved)
}

fn print_for_people(trajectory: &Trajectory, corpus: &Corpus) {
    println!("answer: {}", trajectory.answer);
    match trajectory.final_table.as_deref() {
        Some(id) => {
            println!("evidence table: {id}");
            if let Some(index) = corpus.index_of(id) {
                let text = corpus.text(index);
                let shown: String = text.lines().take(25).collect::<Vec<_>>().join("\n");
                println!("{shown}");
                if text.lines().count() > 25 {
                    println!("[...]");
                }
            }
        }
        None => println!("evidence table: none"),
    }
    println!();
    println!(
        "trajectory: {} steps, {} prompt tokens ({} from cache), {:.1} s",
        trajectory.totals.steps,
        trajectory.totals.prompt_tokens,
        trajectory.totals.cached_tokens,
        trajectory.totals.ms / 1e3
    );
    for (round, record) in trajectory.rounds.iter().enumerate() {
        let top: Vec<String> = record
            .candidates
            .iter()
            .take(3)
            .map(|c| format!("{}={} ({:.2})", c.shown_id, c.table_id, c.score))
            .collect();
        println!(
            "  round {round}: patterns {:?} → {}",
            record.patterns,
            top.join(", ")
        );
    }
    for call in &trajectory.calls {
        let output: String = call.output.chars().take(160).collect();
        println!(
            "  {:<18} {:>5} tok ({:>5} cached) {:>7.0} ms  {}",
            call.kind.to_string(),
            call.prompt_tokens,
            call.cached_tokens,
            call.ms,
            output.replace('\n', " ")
        );
    }
}
