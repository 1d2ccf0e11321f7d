//! Field selectors against the real apimachinery: kubewasm's
//! `FieldSelector` must accept and refuse what `fields.ParseSelector`
//! (k8s.io/apimachinery v0.35.8, the version the test cluster pins) does,
//! print the same canonical text, and match the same field sets. The Go side
//! is `tests/controlplane/fieldselprobe`, built by
//! `tests/controlplane/build.sh`; it runs once over every case.
//!
//! The cases: the unit-test table's inputs (`informer/selector.rs`) and a
//! few thousand generated selectors (seed `FIELDSEL_SEED`, fixed by
//! default) mixing fields, operators, commas, escapes, spaces, empty terms
//! and non-ASCII text. Each is matched against the empty set, sets built
//! from its own terms (all of them hold, then each one fails) and random
//! sets. The canonical text kubewasm would send is probed too: the server
//! must read it as the same selector.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use kubewasm::informer::selector::{FieldOp, FieldSelector};

/// Generated selectors per run.
const GENERATED: usize = 4000;
/// Disagreements printed in full (the count is always given).
const SHOWN: usize = 25;

/// The unit-test table's inputs, accepted and refused.
const TABLE: &[&str] = &[
    "",
    ",",
    ",,,",
    "metadata.name=x",
    "metadata.name==x",
    "metadata.name!=x",
    "metadata.name=",
    "metadata.name!=",
    "a==",
    "status.phase=Running,metadata.name=x",
    "b=1,a=2,a=1",
    r"a=b\,c,d!=e",
    ",metadata.name=x,",
    r"metadata.name=a\,b",
    r"metadata.name=a\=b",
    r"metadata.name=a\\b",
    r"x=\\\\",
    r"a=\=",
    r"a\,b=c",
    "a!b=c",
    "metadata.name = x",
    "=",
    "!=",
    "==",
    "=x",
    "metadata.name=héllo✓",
    "metadata.name",
    "a=1,b",
    "metadata.name=x,,y",
    "metadata.name=a,b",
    "z,a",
    "metadata.name=a=b",
    "a=b!=c",
    "a===b",
    "a!==b",
    r"metadata.name=a\b",
    r"x=a\ b",
    r"metadata.name=a\",
    r"b=\,,a=\x",
];

const FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "status.phase",
    "spec.nodeName",
    "a",
    "b",
    "",
    " metadata.name",
    "metadata.name ",
    "x.y.z",
    "é",
    r"a\",
    r"a\\",
    "a!b",
    "ключ",
];
/// Operators and values the server reads, and ones it refuses (or that
/// shift the split): a term takes a refused one now and then, so about half
/// of the generated selectors parse.
const OPERATORS: &[&str] = &["=", "==", "!=", " = "];
const WILD_OPERATORS: &[&str] = &["!", "===", "!==", "=!=", "", "= ="];
const VALUES: &[&str] = &[
    "x",
    "",
    "Running",
    r"a\,b",
    r"a\=b",
    r"a\\b",
    r"\\",
    " x ",
    "héllo✓",
    r"\,",
    r"\=",
    "日本",
    r"a\\\,b",
];
const WILD_VALUES: &[&str] = &[r"a\b", r"\", r"\\\", "a=b", "a,b", r"\ ", "=", "!="];
const SEPARATORS: &[&str] = &[",", ",", ",", ",,", ", ", " ,", r"\,"];
/// Characters of wholly random selectors.
const ALPHABET: &[char] = &[
    'a', 'b', 'x', '.', '=', '=', '!', ',', ',', '\\', '\\', ' ', 'é', '✓', '日',
];
/// Unescaped values for random field sets.
const SET_VALUES: &[&str] = &[
    "x",
    "",
    "Running",
    "a,b",
    "a=b",
    r"a\b",
    r"\",
    " x ",
    "héllo✓",
    ",",
    "=",
    "y",
];

/// splitmix64: small, seedable, and the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T: ?Sized>(&mut self, items: &'a [&'a T]) -> &'a T {
        items[self.below(items.len())]
    }
}

fn random_selector(rng: &mut Rng) -> String {
    if rng.below(4) == 0 {
        let len = rng.below(16);
        return (0..len)
            .map(|_| ALPHABET[rng.below(ALPHABET.len())])
            .collect();
    }
    let mut s = String::new();
    if rng.below(8) == 0 {
        s.push_str(rng.pick(SEPARATORS));
    }
    for i in 0..rng.below(4) + 1 {
        if i > 0 {
            s.push_str(rng.pick(SEPARATORS));
        }
        let wild = rng.below(10) == 0;
        s.push_str(rng.pick(FIELDS));
        s.push_str(rng.pick(if wild { WILD_OPERATORS } else { OPERATORS }));
        s.push_str(rng.pick(VALUES));
        if rng.below(6) == 0 {
            let values = if rng.below(2) == 0 {
                WILD_VALUES
            } else {
                VALUES
            };
            s.push_str(rng.pick(values));
        }
    }
    if rng.below(8) == 0 {
        s.push_str(rng.pick(SEPARATORS));
    }
    s
}

type Set = BTreeMap<String, String>;

/// Field sets to match `input` against: empty, built from kubewasm's
/// reading of it (so that a misreading shows as a different match), and
/// random.
fn field_sets(rng: &mut Rng, ours: &Result<FieldSelector, String>) -> Vec<Set> {
    let mut sets = vec![Set::new()];
    if let Ok(sel) = ours {
        let holding = |skip: Option<usize>| -> Set {
            sel.requirements()
                .enumerate()
                .map(|(i, (field, op, value))| {
                    let holds = Some(i) != skip;
                    let value = match (op, holds) {
                        (FieldOp::Equals, true) | (FieldOp::NotEquals, false) => value.to_owned(),
                        _ => format!("{value}~"),
                    };
                    (field.to_owned(), value)
                })
                .collect()
        };
        sets.push(holding(None));
        for i in 0..sel.requirements().count().min(3) {
            sets.push(holding(Some(i)));
        }
    }
    for _ in 0..2 {
        let set = (0..rng.below(4))
            .map(|_| (rng.pick(FIELDS).to_owned(), rng.pick(SET_VALUES).to_owned()))
            .collect();
        sets.push(set);
    }
    sets
}

/// One answer, kubewasm's or apimachinery's, in the probe's shape.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default)]
    error: String,
    string: String,
    matches: Vec<bool>,
}

fn ours(sel: &Result<FieldSelector, String>, sets: &[Set]) -> Answer {
    match sel {
        Ok(sel) => Answer {
            ok: true,
            error: String::new(),
            string: sel.to_string(),
            matches: sets
                .iter()
                .map(|set| sel.matches_fields(|f| set.get(f)))
                .collect(),
        },
        Err(e) => Answer {
            ok: false,
            error: e.clone(),
            string: String::new(),
            matches: Vec::new(),
        },
    }
}

/// Whether the answers agree: the verdict, and then the canonical text and
/// matches, or the server's error text at the start of ours.
fn agree(ours: &Answer, theirs: &Answer) -> bool {
    match (ours.ok, theirs.ok) {
        (true, true) => ours.string == theirs.string && ours.matches == theirs.matches,
        (false, false) => ours.error.starts_with(&theirs.error),
        _ => false,
    }
}

/// Runs the probe once over `questions` (JSON lines) and returns its
/// answers, one per question.
fn ask_apimachinery(questions: &[serde_json::Value]) -> Vec<Answer> {
    let input: String = questions.iter().map(|q| format!("{q}\n")).collect();
    let answers: Vec<Answer> = kubewasm_tests::probe::ask("fieldselprobe", &[], input);
    assert_eq!(
        answers.len(),
        questions.len(),
        "one probe answer per question"
    );
    answers
}

#[test]
fn field_selectors_agree_with_apimachinery() {
    let seed = std::env::var("FIELDSEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6b75_6265_7761_736d);
    let mut rng = Rng(seed);
    let mut inputs: Vec<String> = TABLE.iter().map(|s| (*s).to_owned()).collect();
    inputs.extend((0..GENERATED).map(|_| random_selector(&mut rng)));

    let mut cases = Vec::new();
    for input in inputs {
        let parsed = FieldSelector::parse(&input).map_err(|e| e.to_string());
        let sets = field_sets(&mut rng, &parsed);
        cases.push((input, parsed, sets));
    }
    // The inputs, then the canonical text of each that kubewasm accepts.
    let mut questions: Vec<serde_json::Value> = cases
        .iter()
        .map(|(input, _, sets)| serde_json::json!({"selector": input, "sets": sets}))
        .collect();
    let canonical: Vec<usize> = (0..cases.len()).filter(|&i| cases[i].1.is_ok()).collect();
    for &i in &canonical {
        let (_, parsed, sets) = &cases[i];
        let text = parsed.as_ref().unwrap().to_string();
        questions.push(serde_json::json!({"selector": text, "sets": sets}));
    }
    let answers = ask_apimachinery(&questions);

    let mut disagreements = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for ((input, parsed, sets), theirs) in cases.iter().zip(&answers) {
        let ours = ours(parsed, sets);
        if theirs.ok {
            accepted += 1;
        } else {
            refused += 1;
        }
        if !agree(&ours, theirs) {
            disagreements.push(format!(
                "input {input:?}\n  sets       {sets:?}\n  kubewasm   {ours:?}\n  apimachinery {theirs:?}"
            ));
        }
    }
    // What kubewasm sends must mean the same selector to the server.
    for (&i, theirs) in canonical.iter().zip(&answers[cases.len()..]) {
        let (input, parsed, sets) = &cases[i];
        let ours = ours(parsed, sets);
        if !theirs.ok || theirs.matches != ours.matches {
            disagreements.push(format!(
                "canonical text {:?} of input {input:?}\n  sets       {sets:?}\n  kubewasm   {ours:?}\n  apimachinery {theirs:?}",
                ours.string
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} cases disagree with apimachinery (seed {seed:#x}); the first {}:\n{}",
        disagreements.len(),
        cases.len(),
        SHOWN.min(disagreements.len()),
        disagreements[..SHOWN.min(disagreements.len())].join("\n")
    );
    // The generator must reach both sides of the grammar.
    assert!(
        accepted > cases.len() / 5 && refused > cases.len() / 5,
        "generated cases are lopsided: {accepted} accepted, {refused} refused"
    );
}
