//! Crash safety of runs: `eval` killed with SIGKILL at seeded random points, 20 times, under
//! `--concurrency`, then resumed to the end, leaves the `queries.jsonl` and `summary.json` of a
//! run that was never interrupted, byte for byte.

use std::time::{Duration, Instant};

use tableseek::eval::rundir::{QUERIES_FILE, SUMMARY_FILE};

use crate::eval_run::{read, repeated_dataset, succeed, tableseek, write_corpus};

const KILLS: usize = 20;
/// Queries in the dataset.
const QUERIES: usize = 24;

/// A fixed sequence of extra pauses (a 64-bit LCG), so a failure can be replayed.
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
    std::fs::write(&dataset, repeated_dataset(QUERIES)).unwrap();
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
    succeed(&mut eval(&whole));

    // Kill points follow the run's progress, not a clock: the i-th kill waits until about
    // i/KILLS of the records are written, then a seeded random pause of up to 60 ms, so kills
    // land at startup, between records and in the middle of a write on a fast or a loaded
    // machine alike. (Delays scaled from the uninterrupted run's time all fell after the end
    // when that run happened to be slower than the later ones.)
    let killed = tmp.path().join("killed");
    let records_in = |dir: &std::path::Path| {
        std::fs::read_to_string(dir.join(QUERIES_FILE))
            .map(|text| text.lines().count())
            .unwrap_or(0)
    };
    let mut delays = Delays(0x7ab1e5ee);
    let mut finished_after_kill = Vec::new();
    for kill in 0..KILLS {
        let target = (kill * QUERIES) / KILLS;
        let mut child = eval(&killed)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(600);
        while records_in(&killed) < target && child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "no progress towards {target} records"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(
            (delays.next_fraction() * 60.0) as u64,
        ));
        let _ = child.kill();
        child.wait().unwrap();
        finished_after_kill.push(records_in(&killed));
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
        finished_after_kill.iter().any(|&n| n > 0 && n < QUERIES),
        "records after each kill: {finished_after_kill:?}"
    );
}
