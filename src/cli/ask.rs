//! `tableseek ask`: one query through the TableSeek loop over a corpus, with the real engine.

use std::path::PathBuf;

use anyhow::Context;
use tableseek::agent::{
    Ablations, Agent, AgentConfig, Candidates, CorpusSpace, EngineLlm, Evidence, History, QaMode,
    SqlAnswer, Strategy, TaskType, Trajectory,
};
use tableseek::corpus::{Corpus, LoadOptions};

use super::model_args::ModelArgs;

/// The agent's settings, shared by `ask` and `eval`.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    #[arg(long, default_value = "tableqa")]
    pub task: TaskType,
    /// Budget of LLM calls per query (pattern generation, refine rounds, QA and fallback QA).
    #[arg(long, default_value_t = 5)]
    pub steps: usize,
    /// nSm: show n candidates, select up to m (5s1, 5s3, 10s1, 10s3, 10s5); rN: rerank N (r3, r5, r10).
    #[arg(long, default_value = "5s1")]
    pub strategy: Strategy,
    /// How much of each candidate refine sees: small, medium, big, full.
    #[arg(long, default_value = "small")]
    pub evidence: Evidence,
    /// Tables QA reads when refinement selected none.
    #[arg(long, default_value_t = 1)]
    pub fallback_tables: usize,
    /// `full` keeps refine rounds in one conversation (more KV reuse); `none` is the paper's.
    #[arg(long, default_value = "none")]
    pub history: History,
    /// New tokens per call; default 8192 for thinking models (Qwen3), 1024 for others.
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
    /// For thinking models (Qwen3): true or false; default is the template's.
    #[arg(long)]
    pub enable_thinking: Option<bool>,
    /// Structured decoding: pattern-generation and refine outputs (and fact-verification labels)
    /// are decoded under their JSON schema / grammar, so they always parse; thinking stays free.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub constrain: OnOff,
    /// When a round's patterns match no table, add the query's words and search again (`off`:
    /// the empty result goes back to the model, as in the paper).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub widen_empty: OnOff,
    /// How table questions are answered: `text` (the model reads the table and writes the answer),
    /// `sql` (it writes one SQLite query over the table, under a grammar of SELECTs over its
    /// columns with --constrain on; the answer is the result; one retry on an error; an empty
    /// result falls back to the next table) or `auto` (SQL if the model answers 3 of 4 built-in
    /// SQL probe questions, measured at start-up; else text). Under SQL a claim is tested by a
    /// query that returns 1 when it holds.
    #[arg(long, value_enum, default_value_t = QaMode::Text)]
    pub qa: QaMode,
    /// Under SQL QA: the answer is the result rows' values (`rows`), or one more call words it
    /// from the question, the SQL and the rows (`phrased`).
    #[arg(long, value_enum, default_value_t = SqlAnswer::Rows)]
    pub sql_answer: SqlAnswer,
    /// The ranking behind refine's candidate pool: `grep` (share of patterns, the paper's),
    /// `bm25` (the query's and the patterns' words), or `hybrid` (reciprocal rank fusion of the
    /// two). Previews show the patterns' matched rows either way.
    #[arg(long, value_enum, default_value_t = Candidates::Grep)]
    pub candidates: Candidates,
    /// Ablation: from the first ranking straight to QA.
    #[arg(long)]
    pub no_refine: bool,
    /// Ablation: QA once, no fallback to later tables.
    #[arg(long)]
    pub no_fallback: bool,
    /// Ablation: refinement may only select from the first pool.
    #[arg(long)]
    pub no_regenerate: bool,
    /// Ablation: refinement may only regenerate patterns.
    #[arg(long)]
    pub no_select: bool,
    /// Ablation: previews show matched rows only (no head, no schema).
    #[arg(long)]
    pub match_only: bool,
    /// Ablation: QA also sees matched rows only.
    #[arg(long)]
    pub match_only_qa: bool,
}

impl AgentArgs {
    /// `default_max_new_tokens` comes from the loaded model (see `ChatModel::default_max_new_tokens`).
    pub fn config(&self, default_max_new_tokens: usize) -> anyhow::Result<AgentConfig> {
        let ablations = Ablations {
            no_refine: self.no_refine,
            no_fallback: self.no_fallback,
            no_regenerate: self.no_regenerate,
            no_select: self.no_select,
            match_only: self.match_only,
            match_only_qa: self.match_only_qa,
        };
        Ok(AgentConfig::builder()
            .task(self.task)
            .max_steps(self.steps)
            .strategy(self.strategy)
            .evidence(self.evidence)
            .fallback_tables(self.fallback_tables)
            .history(self.history)
            .max_new_tokens(self.max_new_tokens.unwrap_or(default_max_new_tokens))
            .ablations(ablations)
            .widen_empty(self.widen_empty.is_on())
            .qa(self.qa)
            .sql_answer(self.sql_answer)
            .candidates(self.candidates)
            .build()?)
    }
}

/// A switch written `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    pub fn is_on(self) -> bool {
        self == OnOff::On
    }
}

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
    let (corpus, report) = Corpus::load(&args.corpus, &LoadOptions::default())
        .with_context(|| format!("loading corpus {}", args.corpus.display()))?;
    for skipped in &report.skipped {
        tracing::warn!(path = %skipped.path.display(), reason = %skipped.reason, "skipped");
    }
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
