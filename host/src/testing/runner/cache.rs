//! The objects a case's simulated cluster starts with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::object::{KObject, ObjectHandle, StripOptions};
use crate::testing::fixture::Fixture;

use super::{Bad, bad};

/// The case's objects, each with the field it came from: the manifests and
/// objects of the file's cache, then the case's.
pub(super) fn cache_objects(
    base: &Path,
    fixture: &Fixture,
    index: usize,
) -> Result<Vec<(String, Value)>, Bad> {
    let mut out = Vec::new();
    let case_prefix = format!("cases[{index}].cache");
    for (prefix, cache) in [
        ("cache", &fixture.cache),
        (case_prefix.as_str(), &fixture.cases[index].cache),
    ] {
        if let Some(m) = &cache.manifests {
            let path = base.join(m);
            for (file, objects) in
                read_manifests(&path).map_err(|e| bad(format!("{prefix}.manifests"), e))?
            {
                for o in objects {
                    out.push((format!("{prefix}.manifests ({})", file.display()), o));
                }
            }
        }
        for (k, o) in cache.objects.iter().enumerate() {
            out.push((format!("{prefix}.objects[{k}]"), o.clone()));
        }
    }
    Ok(out)
}

/// The manifests of a folder (recursively, `.yaml`, `.yml`, `.json`, dot
/// files skipped) or of one file, as the embedded cluster reads them.
fn read_manifests(path: &Path) -> Result<Vec<(PathBuf, Vec<Value>)>, String> {
    let mut files = Vec::new();
    if path.is_dir() {
        crate::source::local::files::walk(path, &mut files)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        files.sort();
    } else if path.is_file() {
        files.push(path.to_owned());
    } else {
        return Err(format!(
            "{} does not exist (give a folder or file relative to the fixture)",
            path.display()
        ));
    }
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f)
                .map_err(|e| format!("cannot read {}: {e}", f.display()))?;
            let objects = crate::source::local::parse_manifests(&f, &text)
                .map_err(|e| format!("{}: {e}", f.display()))?;
            Ok((f, objects))
        })
        .collect()
}

pub(super) fn kobject(v: Value) -> Result<ObjectHandle, String> {
    KObject::from_value(v, StripOptions::default())
        .map(Arc::new)
        .map_err(|e| e.to_string())
}
