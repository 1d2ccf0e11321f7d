//! `--junit FILE`: the run as JUnit XML (one test suite per fixture file,
//! one test case per fixture case), which CI systems read.

use std::path::Path;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::FileReport;
use super::runner::Status;

/// The report of `files` as JUnit XML.
pub fn render(files: &[FileReport]) -> Result<String, quick_junit::SerializeError> {
    let mut report = Report::new("kubewasm test");
    for file in files {
        let mut suite = TestSuite::new(file.path.display().to_string());
        let classname = class_of(&file.path);
        if let Some(error) = &file.error {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status.set_message("the fixture cannot be read");
            status.set_description(error.as_str());
            let mut case = TestCase::new("(fixture)", status);
            case.set_classname(classname.as_str());
            suite.add_test_case(case);
        }
        for c in &file.cases {
            let status = match &c.status {
                Status::Passed => TestCaseStatus::success(),
                Status::Failed(failures) => {
                    let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    let first = failures
                        .first()
                        .and_then(|f| f.lines().next())
                        .unwrap_or("failed");
                    s.set_message(first);
                    s.set_description(format!("{}\n(seed {})", failures.join("\n\n"), c.seed));
                    s
                }
                Status::Error(e) => {
                    let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
                    s.set_message("the case cannot be run as written");
                    s.set_description(e.as_str());
                    s
                }
            };
            let mut case = TestCase::new(c.name.as_str(), status);
            case.set_classname(classname.as_str());
            case.set_time(c.time);
            suite.add_test_case(case);
        }
        suite.set_time(file.cases.iter().map(|c| c.time).sum());
        report.add_test_suite(suite);
    }
    report.set_time(files.iter().flat_map(|f| &f.cases).map(|c| c.time).sum());
    report.to_string()
}

/// The fixture's name without its extension (`replicate` for
/// `tests/replicate.yaml`).
fn class_of(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testing::runner::CaseReport;
    use std::time::Duration;

    fn case(name: &str, status: Status) -> CaseReport {
        CaseReport {
            name: name.into(),
            status,
            time: Duration::from_millis(3),
            calls: 1,
            seed: 42,
            observed: Vec::new(),
            stale: Vec::new(),
        }
    }

    #[test]
    fn failures_and_errors_are_escaped_and_parse_back() {
        let files = vec![
            FileReport {
                path: "tests/a.yaml".into(),
                error: None,
                cases: vec![
                    case("passes", Status::Passed),
                    case(
                        "fails <on> \"quotes\" & such",
                        Status::Failed(vec![
                            "step 1: expect[0].result: expected \"ok\", observed {\"conflict\":\"a < b & c\"}\n--- expected\n+++ observed\n\u{1b}[31m-x".into(),
                        ]),
                    ),
                ],
            },
            FileReport {
                path: "tests/b.yaml".into(),
                error: Some("tests/b.yaml: cases: missing field `cases`".into()),
                cases: Vec::new(),
            },
        ];
        let xml = render(&files).unwrap();
        assert!(
            xml.contains("fails &lt;on&gt; &quot;quotes&quot; &amp; such"),
            "{xml}"
        );
        let back = Report::deserialize_from_str(&xml).unwrap();
        assert_eq!(back.tests, 3);
        assert_eq!(back.failures, 1);
        assert_eq!(back.errors, 1);
        let failed = &back.test_suites[0].test_cases[1];
        assert_eq!(failed.name.as_str(), "fails <on> \"quotes\" & such");
        assert_eq!(failed.classname.as_ref().unwrap().as_str(), "a");
    }
}
