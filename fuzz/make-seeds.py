#!/usr/bin/env python3
"""Seed inputs for the fuzz targets in fuzz/src/bin/.

    fuzz/make-seeds.py committed        # (re)writes the small seeds kept in git, fuzz/seeds/<target>/
    fuzz/make-seeds.py runtime OUT_DIR  # writes the large seeds scripts/fuzz.sh adds at run time,
                                        # OUT_DIR/<target>/ (never committed)

Sources: the bundled sample corpus (samples/), test fixtures (tests/fixtures, tests/it) and the
shared data (../shared or $TABLESEEK_SHARED); a source that is missing is skipped with a note.
Committed seeds stay small (a few KiB each, ~200 KiB in all); real GGUF files only go in as their
first 64 KiB, and only at run time.

Input layouts (see each target's doc comment): corpus_delimited and corpus_json start with one
selector byte (even: .csv / .json, odd: .tsv / .jsonl); agent_parse starts with one byte
(low nibble: candidates shown, high nibble: selection cap); chat_template is
`source NUL role<TAB>content lines`.
"""

import json
import os
import re
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "fuzz" / "seeds"
SHARED = Path(os.environ.get("TABLESEEK_SHARED", ROOT.parent / "shared"))
# One seed never exceeds this many bytes (committed seeds).
MAX_SEED = 8 * 1024


def note(msg):
    print(f"make-seeds: {msg}", file=sys.stderr)


def read(path, limit=None):
    path = Path(path)
    if not path.is_file():
        note(f"missing {path}; skipped")
        return None
    data = path.read_bytes()
    return data if limit is None else data[:limit]


def cut_lines(data, limit=MAX_SEED):
    """At most `limit` bytes, cut at a line end so a table keeps whole rows."""
    if len(data) <= limit:
        return data
    end = data.rfind(b"\n", 0, limit)
    return data[: end + 1] if end > 0 else data[:limit]


class Writer:
    def __init__(self, base):
        self.base = Path(base)

    def put(self, target, name, data):
        if data is None:
            return
        d = self.base / target
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)


# ---------------------------------------------------------------------------------------- GGUF

GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class GgufReader:
    def __init__(self, data):
        self.d, self.o = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.o)
        self.o += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.d[self.o : self.o + n]
        self.o += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            it, n = self.take("I"), self.take("Q")
            return (it, [self.value(it) for _ in range(n)])
        return self.take(GGUF_SCALARS[t])


def gguf_metadata(data):
    """The (key, type, value) list of a GGUF file's header."""
    r = GgufReader(data)
    assert r.d[:4] == b"GGUF"
    r.o = 4
    r.take("I")
    r.take("Q")
    n_kv = r.take("Q")
    out = []
    for _ in range(n_kv):
        k = r.string()
        t = r.take("I")
        out.append((k, t, r.value(t)))
    return out


def gguf_value(t, v):
    if t == 8:
        return struct.pack("<Q", len(v)) + v
    if t == 9:
        it, items = v
        return struct.pack("<IQ", it, len(items)) + b"".join(gguf_value(it, x) for x in items)
    return struct.pack("<" + GGUF_SCALARS[t], v)


def gguf_file(metadata, tensors):
    """A GGUF v3 file: metadata [(key, type, value)], tensors [(name, dims, ggml_type, data)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for k, t, v in metadata:
        out += struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + gguf_value(t, v)
    offset, blobs = 0, []
    for name, dims, ggml_type, data in tensors:
        name = name.encode()
        out += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
        pad = (-len(data)) % 32
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    out += b"\0" * ((-len(out)) % 32)
    return out + b"".join(blobs)


def s(text):
    return text.encode()


def gguf_seeds(w):
    tiny = read(ROOT / "tests/fixtures/tiny-qwen3-moe-gguf/tiny-qwen3-moe-gguf-q8_0.gguf")
    templates = chat_templates()
    if tiny is not None:
        meta = gguf_metadata(tiny)
        # The whole header, no tensors: read_gguf accepts it, so the config, tokenizer and
        # template readers behind it run.
        with_template = meta + [(b"tokenizer.chat_template", 8, s(templates.get("qwen3", "")))]
        w.put("gguf", "tiny-qwen3moe-header.gguf", gguf_file(with_template, []))
        # Two small tensors with their data: the tensor-index checks run too.
        f32 = struct.pack("<8f", *range(8))
        q8 = struct.pack("<e", 0.5) + bytes(range(32))
        w.put(
            "gguf",
            "tiny-qwen3moe-2-tensors.gguf",
            gguf_file(meta, [("output_norm.weight", [8], 0, f32), ("blk.0.attn_q.weight", [32, 1], 8, q8)]),
        )
        # The real file cut inside its tensor index.
        w.put("gguf", "tiny-qwen3moe-q8_0-first-12k.gguf", tiny[: 12 * 1024])
    # A Llama header with a tiny BPE vocabulary and a Llama 3 template.
    vocab = ["<s>", "</s>", "a", "b", "ab", "Ġ", "Ġa", "<|eot_id|>"]
    llama = [
        (b"general.architecture", 8, b"llama"),
        (b"llama.block_count", 4, 1),
        (b"llama.context_length", 4, 64),
        (b"llama.embedding_length", 4, 8),
        (b"llama.feed_forward_length", 4, 16),
        (b"llama.attention.head_count", 4, 2),
        (b"llama.attention.head_count_kv", 4, 1),
        (b"llama.rope.freq_base", 6, 10000.0),
        (b"llama.attention.layer_norm_rms_epsilon", 6, 1e-5),
        (b"tokenizer.ggml.model", 8, b"gpt2"),
        (b"tokenizer.ggml.pre", 8, b"llama-bpe"),
        (b"tokenizer.ggml.tokens", 9, (8, [s(t) for t in vocab])),
        (b"tokenizer.ggml.token_type", 9, (5, [3, 3, 1, 1, 1, 1, 1, 3])),
        (b"tokenizer.ggml.merges", 9, (8, [b"a b", b"\xc4\xa0 a"])),
        (b"tokenizer.ggml.bos_token_id", 4, 0),
        (b"tokenizer.ggml.eos_token_id", 4, 7),
        (b"tokenizer.chat_template", 8, s(templates.get("llama3", "{{ messages }}"))),
    ]
    w.put("gguf", "llama-tiny-vocab.gguf", gguf_file(llama, [("token_embd.weight", [8, 8], 0, bytes(256))]))


# -------------------------------------------------------------------------------- chat templates


def chat_templates():
    data = read(ROOT / "tests/fixtures/chat_templates.json")
    if data is None:
        return {}
    fixture = json.loads(data)
    out = {}
    for name, t in fixture["templates"].items():
        out[name] = t["source"] if isinstance(t, dict) and "source" in t else next(
            (v for v in t.values() if isinstance(v, str) and "{%" in v), ""
        )
    return out


def chat_template_seeds(w):
    data = read(ROOT / "tests/fixtures/chat_templates.json")
    sets = json.loads(data)["message_sets"] if data else {}
    convs = list(sets.values()) or [[{"role": "user", "content": "Hi"}]]
    for i, (name, source) in enumerate(sorted(chat_templates().items())):
        conv = convs[i % len(convs)]
        lines = "\n".join(f"{m['role']}\t{m['content']}".replace("\n", "\\n") for m in conv)
        w.put("chat_template", f"{name}.jinja", s(source) + b"\0" + s(lines))
    chatml = (
        "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content"
        " + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
        "{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    w.put("chat_template", "chatml.jinja", s(chatml))
    w.put(
        "chat_template",
        "features.jinja",
        s(
            "{{ bos_token }}{% set ns = namespace(n=0) %}{% for m in messages %}"
            "{% if m.role == 'system' %}{{ m.content | trim }}{% elif loop.last %}{{ m.content.split('\\n')[0] | upper }}"
            "{% else %}{{ raise_exception('bad role ' ~ m.role) if m.role not in ['user', 'assistant'] }}"
            "{{ m.content.strip() | replace('<think>', '') }}{% endif %}{% set ns.n = ns.n + 1 %}{% endfor %}"
            "{{ strftime_now('%d %b %Y') }}{% if enable_thinking is defined and not enable_thinking %}"
            "<think>\\n\\n</think>{% endif %}{{ ns.n }}{{ eos_token }}"
        )
        + b"\0system\t  sys  \nuser\ta\\nb\nassistant\t<think>x</think>y\nuser\tlast",
    )


# ---------------------------------------------------------------------------------------- tables


def table_seeds(w):
    corpus = ROOT / "samples/corpus"
    for path in sorted(p for p in corpus.rglob("*") if p.is_file()) if corpus.is_dir() else []:
        data = cut_lines(path.read_bytes())
        name = path.name
        if name.endswith(".html.csv"):
            w.put("corpus_tabfact", name, data)
        elif name.endswith(".csv"):
            w.put("corpus_delimited", name, b"\0" + data)
        elif name.endswith(".tsv"):
            w.put("corpus_delimited", name, b"\1" + data)
        elif name.endswith(".md"):
            w.put("corpus_markdown", name, data)
        elif name.endswith(".html"):
            w.put("corpus_html", name, data)
        elif name.endswith(".jsonl"):
            w.put("corpus_json", name, b"\1" + data)
        elif name.endswith(".json"):
            w.put("corpus_json", name, b"\0" + data)
    tabfact = SHARED / "data/tabfact/tables"
    for name in ["1-10121127-1.html.csv", "2-10773616-7.html.csv", "2-17684663-3.html.csv"]:
        data = read(tabfact / name)
        if data is not None:
            w.put("corpus_tabfact", name, cut_lines(data, 4096))
    spider = SHARED / "data/spider/tables"
    for name in ["battle_death__ship.csv", "concert_singer__singer.csv"]:
        data = read(spider / name)
        if data is not None:
            w.put("corpus_delimited", name, b"\0" + cut_lines(data, 4096))
    # Dialects and damage the loader must tolerate.
    w.put("corpus_delimited", "semicolon.csv", b"\0a;b;c\n1;\"x;y\";3\n4;5;6\n")
    w.put("corpus_delimited", "quoted-newline-bom.csv", b"\0\xef\xbb\xbfname,note\n\"A\",\"line1\nline2\"\n\"B\",\"say \"\"hi\"\"\"\n")
    w.put("corpus_delimited", "ragged.tsv", b"\1a\tb\n1\n1\t2\t3\n\n\t\n")
    w.put("corpus_delimited", "utf16.csv", b"\0" + "a,b\r\nä,ß\r\n".encode("utf-16"))
    w.put("corpus_delimited", "latin1.csv", b"\0city,pop\nS\xe3o Paulo,12\nZ\xfcrich,0.4\n")
    w.put("corpus_tabfact", "tabfact-small.html.csv", b"year#team#wins\n1998#raiders#8\n1999#raiders#8\n")
    w.put("corpus_markdown", "two-tables.md", b"# A\n\n| a | b |\n|---|:-:|\n| 1 | x \\| y |\n\ntext\n\n| c |\n| --- |\n| `|` |\n")
    w.put(
        "corpus_html",
        "spans.html",
        b"<html><body><table><caption>C</caption><thead><tr><th colspan=2>a</th><th>b</th></tr></thead>"
        b"<tbody><tr><td rowspan=2>1</td><td>2</td><td>3</td></tr><tr><td>4</td><td>5</td></tr>"
        b"<tr><td><table><tr><td>nested</td></tr></table></td></tr></tbody></table>"
        b"<table id=t2><tr><td>&amp;&lt;x&gt;</td></tr></table></body></html>",
    )
    w.put("corpus_json", "records.json", b'\0[{"a": 1, "b": "x"}, {"a": 2.5, "c": null, "b": [1, 2]}]')
    w.put("corpus_json", "columns.json", b'\0{"header": ["a", "b"], "rows": [[1, "x"], [2, true]]}')
    w.put("corpus_json", "lines.jsonl", b'\1{"a": 1}\n\n{"a": 2, "b": {"c": 3}}\nnot json\n')


# ------------------------------------------------------------------------------------- tokenizer


def tokenizer_seeds(w):
    data = read(ROOT / "tests/fixtures/tiny-qwen3-moe-gguf/tokenizer.json")
    if data is not None:
        w.put("tokenizer_json", "tiny-qwen3-moe-bpe.json", data)
    w.put(
        "tokenizer_json",
        "wordlevel.json",
        s(
            json.dumps(
                {
                    "version": "1.0",
                    "added_tokens": [
                        {"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
                        {"id": 4, "content": "<|im_start|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
                    ],
                    "normalizer": {"type": "Lowercase"},
                    "pre_tokenizer": {"type": "Whitespace"},
                    "post_processor": None,
                    "decoder": None,
                    "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 1, "world": 2, "42": 3, "<|im_start|>": 4}, "unk_token": "[UNK]"},
                }
            )
        ),
    )
    w.put(
        "tokenizer_json",
        "wordpiece.json",
        s(
            json.dumps(
                {
                    "version": "1.0",
                    "truncation": {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0},
                    "padding": {"strategy": {"Fixed": 8}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
                    "added_tokens": [],
                    "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None, "lowercase": True},
                    "pre_tokenizer": {"type": "BertPreTokenizer"},
                    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]}}},
                    "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
                    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": {"[PAD]": 0, "[CLS]": 1, "[UNK]": 2, "hello": 3, "##lo": 4, "hel": 5}},
                }
            )
        ),
    )


# ----------------------------------------------------------------------------------- agent parse

RUST_STR = re.compile(r'r#"(.*?)"#|"((?:[^"\\]|\\.)*)"', re.S)


def rust_unescape(text):
    def one(m):
        e = m.group(1)
        if e.startswith("u{"):
            return chr(int(e[2:-1], 16))
        return {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'"}.get(e, e)

    return re.sub(r"\\(u\{[0-9a-fA-F]+\}|.)", one, text)


def agent_parse_seeds(w):
    data = read(ROOT / "tests/it/agent_parse.rs")
    texts = []
    if data is not None:
        for m in RUST_STR.finditer(data.decode()):
            text = m.group(1) if m.group(1) is not None else rust_unescape(m.group(2))
            if len(text) >= 6 and any(c in text for c in "{[:<") and text not in texts:
                texts.append(text)
    texts += [
        '<think>maybe {"action": "select"}</think>\n```json\n{"action": "select", "tables": ["T1", "t2", 3]}\n```',
        '{"action": "regenerate", "patterns": ["canberra", "19\\\\d{2}", ]}',
        "Reasoning...\nAnswer: Canberra\n",
        '{"label": "SUPPORTED"}',
        "</think>The table does not contain enough information.",
        "[\"a\", 'b', 3, null, [\"nested\"]] {'patterns': ['x']}",
    ]
    for i, text in enumerate(texts[:40]):
        w.put("agent_parse", f"{i:02}.txt", bytes([0x35]) + s(text))


# ----------------------------------------------------------------------------------- grep, eval, sql


def grep_seeds(w):
    w.put("grep_pattern", "basic.txt", b"CANBERRA\n19[0-9]{2}\naustralia\nyear\n")
    w.put("grep_pattern", "invalid.txt", b"f(x\n\n[unclosed\n   \nf(x\n")
    w.put("grep_pattern", "anchors.txt", b"^Lyon\n\\d+$\n\\bS\\w+o\\b\n(?i)s\\u00e3o\n\\| --- \\|\n")
    w.put("grep_pattern", "unicode.txt", "São\n\\p{Greek}+\n[[:alpha:]]{3,}\nß\n\\x{1F680}\n".encode())
    w.put("grep_pattern", "big.txt", b"(a|b|c|d){1,50}\n\\w{100}\n(?:x{2,20}y){3}\n")


def dataset_seeds(w):
    w.put("eval_dataset", "samples.jsonl", cut_lines(read(ROOT / "samples/queries.jsonl") or b"", 4096))
    for name, path in [
        ("tabfact.jsonl", SHARED / "data/tabfact/test-1k.jsonl"),
        ("spider.jsonl", SHARED / "data/spider/spider_single_table.jsonl"),
    ]:
        data = read(path)
        if data is not None:
            w.put("eval_dataset", name, b"".join(data.splitlines(keepends=True)[:4]))
    w.put(
        "eval_dataset",
        "ranking-only.jsonl",
        b'{"qid": 7, "question": "q?", "gold_table": "a.csv"}\n\n{"qid": "x", "claim": "c", "gold_tables": ["b.csv"]}\n',
    )
    w.put(
        "eval_dataset",
        "spider-empty-answer.jsonl",
        b'{"qid": "s", "db_id": "d", "question": "q", "sql": "SELECT 1", "table": "t", "answer": [], "answer_empty": true}\n'
        b'{"qid": "f", "query": "q", "task": "fact_verification", "label": 1, "gold_tables": ["a"]}\n',
    )


def sql_seeds(w):
    queries = [
        "SELECT name FROM cities WHERE population > 500000",
        "select count(*) from cities;",
        "WITH big AS (SELECT * FROM cities WHERE founded < 1900) SELECT name, country FROM big ORDER BY name",
        "SELECT c.name, o.y FROM cities c JOIN other o ON 1 = 1 LIMIT 3",
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x FROM n",
        "SELECT sum(population), avg(founded), max(length(name)) FROM cities GROUP BY country HAVING count(*) > 0",
        "WITH x AS (SELECT 1) DELETE FROM cities",
        "SELECT 1; DROP TABLE cities",
        "SELECT * FROM cities UNION SELECT * FROM other",
        "SELECT printf('%.3f', population / 7.0), upper(name), substr(country, 2) FROM cities",
        "SELECT name FROM cities WHERE name LIKE 'S%' COLLATE NOCASE",
        "select \"name\" from `cities` where [country] = 'France' -- comment\n",
        "SELECT * FROM pragma_table_info('cities')",
        "SELECT json_group_array(name) FROM cities",
        "SELECT CAST(population AS INTEGER) FROM cities",
    ]
    for i, q in enumerate(queries):
        w.put("sql_guard", f"{i:02}.sql", s(q))


def committed():
    w = Writer(SEEDS)
    table_seeds(w)
    gguf_seeds(w)
    tokenizer_seeds(w)
    chat_template_seeds(w)
    agent_parse_seeds(w)
    grep_seeds(w)
    dataset_seeds(w)
    sql_seeds(w)
    total = sum(p.stat().st_size for p in SEEDS.rglob("*") if p.is_file())
    note(f"{total} bytes of committed seeds under {SEEDS}")


def runtime(out):
    """Large seeds that are not committed: real GGUF headers and the whole tiny test GGUF."""
    w = Writer(out)
    for path in sorted((ROOT / "models").glob("*.gguf")):
        w.put("gguf", f"{path.stem}-first-64k.gguf", read(path, 64 * 1024))
    tiny = read(ROOT / "tests/fixtures/tiny-qwen3-moe-gguf/tiny-qwen3-moe-gguf-q8_0.gguf")
    w.put("gguf", "tiny-qwen3-moe-q8_0.gguf", tiny)
    minilm = ROOT / "models/all-MiniLM-L6-v2/tokenizer.json"
    if minilm.is_file():
        w.put("tokenizer_json", "minilm-first-64k.json", read(minilm, 64 * 1024))


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "committed":
        committed()
    elif len(sys.argv) == 3 and sys.argv[1] == "runtime":
        runtime(sys.argv[2])
    else:
        sys.exit(__doc__)
