//! Dataset JSONL reading (`eval::dataset::load_queries` and `load_ranking_queries`, path-only, so
//! through a scratch file). Their documented rule is asserted: every query `load_queries` reads is
//! read by `load_ranking_queries` with the same qid, query text and gold tables.
use tableseek::eval::dataset::{load_queries, load_ranking_queries};

fn main() {
    tableseek_fuzz::single_threaded();
    afl::fuzz!(|data: &[u8]| {
        let path = tableseek_fuzz::write_input("eval_dataset", "queries.jsonl", data);
        let queries = load_queries(&path);
        let ranking = load_ranking_queries(&path);
        if let (Ok(queries), Ok(ranking)) = (queries, ranking) {
            for q in &queries {
                let r = ranking
                    .iter()
                    .find(|r| r.qid == q.qid)
                    .unwrap_or_else(|| panic!("qid {:?} lost by load_ranking_queries", q.qid));
                assert_eq!(r.query, q.query);
                assert_eq!(r.gold_tables, q.gold_tables);
            }
        }
    });
}
