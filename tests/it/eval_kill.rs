//! Crash safety of runs: `eval` killed with SIGKILL at seeded random points, 20 times, under
//! `--concurrency`, then resumed to the end, leaves the `queries.jsonl` and `summary.json` of a
//! run that was never interrupted, byte for byte.

use std::time::{Duration, Instant};

use tableseek::eval::rundir::{QUERIES_FILE, SUMMARY_FILE};

use crate::eval_run::{read, repeated_dataset, succeed, tableseek, write_corpus};

const KILLS: usize = 20;

/// A fixed sequence of kill delays (a 64-bit LCG), so a failure can be replayed.
struct Delays(u64);

impl Delays {
    fn next_fraction(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn eval_killed_twenty_times_resumes_to_the_uninterrupted_records() {
    let Some(model) = crate::common::existing(crate::common::smollm2_gguf()) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let corpus = write_corpus(tmp.path());
    let dataset = tmp.path().join("dataset.jsonl");
    // The six queries four times over, under their own ids.
    std::fs::write(&dataset, repeated_dataset(24)).unwrap();
    let eval = |out: &std::path::Path| {
        let mut command = tableseek();
        command
            .args(["eval", "--method", "bm25", "--no-timings", "--resume"])
            .args([
                "--max-new-tokens",
                "16",
                "--concurrency",
                "3",
                "--threads",
                "1",
            ])
            .arg("--dataset")
            .arg(&dataset)
            .arg("--corpus")
            .arg(&corpus)
            .arg("--model")
            .arg(&model)
            .arg("--out")
            .arg(out);
        command
    };

    let whole = tmp.path().join("whole");
    let started = Instant::now();
    succeed(&mut eval(&whole));
    let whole_time = started.elapsed();

    let killed = tmp.path().join("killed");
    let mut delays = Delays(0x7ab1e5ee);
    let mut finished_after_kill = Vec::new();
    for _ in 0..KILLS {
        let mut child = eval(&killed)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Anywhere from the start to the end of an uninterrupted run: model loading, the
        // first queries, the middle, the last record and the summary.
        let delay = whole_time.mul_f64(delays.next_fraction());
        std::thread::sleep(delay.max(Duration::from_millis(20)));
        // SIGKILL on Unix: no destructor, no flush, nothing but what is already on disk.
        let _ = child.kill();
        child.wait().unwrap();
        let records = std::fs::read_to_string(killed.join(QUERIES_FILE))
            .map(|text| text.lines().count())
            .unwrap_or(0);
        finished_after_kill.push(records);
    }
    succeed(&mut eval(&killed));
    assert_eq!(
        read(&killed.join(QUERIES_FILE)),
        read(&whole.join(QUERIES_FILE)),
        "records after kills at {finished_after_kill:?}"
    );
    assert_eq!(
        read(&killed.join(SUMMARY_FILE)),
        read(&whole.join(SUMMARY_FILE))
    );
    // The kills did land mid-run, not only before the first record or after the last.
    assert!(
        finished_after_kill.iter().any(|&n| n > 0 && n < 24),
        "records after each kill: {finished_after_kill:?}"
    );
}
