//! Reading the folder into the cluster: one pass over its manifests.

use super::*;

impl LocalCluster {
    /// One pass over the folder. `false` when a file it had to rewrite
    /// was edited meanwhile (the folder must be read again).
    pub(super) fn scan(&self, state: &mut State) -> Result<bool, LocalError> {
        let mut files = Vec::new();
        files::walk(&self.dir, &mut files).map_err(|source| LocalError::Read {
            path: self.dir.clone(),
            source,
        })?;
        files.sort();
        let mut found: BTreeMap<Id, (Value, PathBuf)> = BTreeMap::new();
        // Files whose objects are kept as they were when missing from the
        // rescan: what cannot be read might still hold them, and a
        // deletion made up from a read error is what a garbage-collecting
        // plugin acts on.
        let mut broken = BTreeSet::new();
        // Files read whole, and those with a document the cluster did not
        // take (never written over, so nothing of them is lost).
        let mut read: BTreeMap<PathBuf, Fingerprint> = BTreeMap::new();
        let mut refused = BTreeSet::new();
        for file in &files {
            let bytes = match std::fs::read(file) {
                Ok(b) => b,
                // Gone since the walk: its objects went with it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    let message = format!("cannot read: {e}");
                    if state.reported.get(file) != Some(&message) {
                        tracing::error!(file = %file.display(), error = %e, "cannot read manifest; keeping its objects as they were until it reads");
                        state.reported.insert(file.clone(), message);
                    }
                    broken.insert(file.clone());
                    continue;
                }
            };
            let parsed = std::str::from_utf8(&bytes)
                .map_err(|e| format!("not UTF-8: {e}"))
                .and_then(|text| parse_manifests(file, text));
            match parsed {
                Ok(objs) => {
                    state.reported.remove(file);
                    read.insert(file.clone(), files::fingerprint(&bytes));
                    for v in objs {
                        let (Some(av), Some(kind), Some(name)) = (
                            v["apiVersion"].as_str(),
                            v["kind"].as_str(),
                            v["metadata"]["name"].as_str(),
                        ) else {
                            // It may be an object of this file being edited:
                            // the file's other objects are read, and those
                            // missing kept.
                            tracing::warn!(file = %file.display(), "skipping a document without apiVersion, kind and metadata.name; keeping the objects this file held that it no longer shows");
                            broken.insert(file.clone());
                            refused.insert(file.clone());
                            continue;
                        };
                        let gvk = Gvk::from_api_version(av, kind);
                        if gvk.kind == "CustomResourceDefinition" {
                            self.kinds.learn_crd(&v);
                        }
                        let namespaced = self.kinds.by_gvk(&gvk).is_none_or(|k| k.namespaced);
                        let ns = if namespaced {
                            Some(v["metadata"]["namespace"].as_str().unwrap_or("default"))
                        } else {
                            None
                        };
                        // The API server would refuse it; so does the local one.
                        if let Err(e) = crate::names::validate_object(&gvk.kind, ns, name) {
                            let object = format!(
                                "{} {}{name}",
                                gvk.kind,
                                ns.map(|n| format!("{n}/")).unwrap_or_default()
                            );
                            if state.reported_names.insert((file.clone(), e.to_string())) {
                                tracing::error!(file = %file.display(), object = %object, error = %e, "skipping an object the API server would refuse");
                            }
                            refused.insert(file.clone());
                            continue;
                        }
                        found.insert((gvk, ObjectKey::new(ns, name)), (v, file.clone()));
                    }
                }
                Err(message) => {
                    // A broken file keeps its objects as they were: an editor's
                    // half-saved state must not look like a mass deletion.
                    if state.reported.get(file) != Some(&message) {
                        tracing::error!(file = %file.display(), error = %message, "cannot parse manifest; keeping its objects as they were until it parses");
                        state.reported.insert(file.clone(), message);
                    }
                    broken.insert(file.clone());
                }
            }
        }
        // Documents gone from the folder: deleted as a plugin's delete is
        // (finalizers hold them, detached from their file).
        let existing: Vec<Id> = state.objects.keys().cloned().collect();
        for id in existing {
            let Some(e) = state.objects.get(&id) else {
                continue;
            };
            if found.contains_key(&id) || broken.contains(&e.file) {
                continue;
            }
            let next = deletion(&e.value, Propagation::Background);
            if let Some(e) = state.objects.get_mut(&id) {
                e.detached = true;
            }
            self.store(state, &id, None, next);
        }
        // Files to write again: a document whose object went (its last
        // finalizer removed by hand) leaves the file, or the next read
        // would create the object anew.
        let mut rewrite = BTreeSet::new();
        for (id, (mut value, file)) in found {
            if let Some(ns) = &id.1.namespace {
                value["metadata"]["namespace"] = json!(&**ns);
            }
            let next = match state.objects.get_mut(&id) {
                Some(e) if lifecycle::user_view(&e.value) == lifecycle::user_view(&value) => {
                    e.file = file;
                    e.detached = false;
                    continue;
                }
                Some(e) => {
                    let stored = e.value.clone();
                    if let Err(err) = crate::sim::deletion::check_no_new_finalizers(
                        &file.display().to_string(),
                        &stored,
                        &value,
                    ) {
                        if state.reported_names.insert((file.clone(), err.to_string())) {
                            tracing::error!(file = %file.display(), object = %id.1, error = %err, "cannot take an edit the API server would refuse; keeping the object's last good state until it reads");
                        }
                        refused.insert(file);
                        continue;
                    }
                    settle_next(&stored, value)
                }
                None => {
                    lifecycle::create(&mut value, || lifecycle::new_uid().unwrap_or_default());
                    if lifecycle::uid(&value).is_none() {
                        tracing::error!(file = %file.display(), object = %id.1, "cannot draw a random uid; the object is read at the next change");
                        refused.insert(file);
                        continue;
                    }
                    Next::Put(value)
                }
            };
            // What no informer can cache (a label value that is not a
            // string, say) would reach none of them: the object keeps its
            // last good state.
            if let Next::Put(v) | Next::Gone(v) = &next
                && let Err(e) = KObject::from_value(v.clone(), self.strip)
            {
                if state.reported_names.insert((file.clone(), e.to_string())) {
                    tracing::error!(file = %file.display(), object = %id.1, error = %e, "cannot read an object; keeping its last good state until it reads");
                }
                refused.insert(file);
                continue;
            }
            if matches!(next, Next::Gone(_)) {
                rewrite.insert(file.clone());
            }
            self.store(state, &id, Some(&file), next);
            if let Some(e) = state.objects.get_mut(&id) {
                e.file = file;
                e.detached = false;
            }
        }
        state
            .seen
            .retain(|f, _| read.contains_key(f) || broken.contains(f));
        for (file, fp) in read {
            if !refused.contains(&file) {
                state.seen.insert(file, fp);
            }
        }
        state.unreadable = broken.union(&refused).cloned().collect();
        for file in rewrite {
            if refused.contains(&file) {
                continue;
            }
            let text = self
                .render(state, &file, None)
                .map_err(|message| LocalError::Parse {
                    path: file.clone(),
                    message,
                })?;
            let expected = state.seen.get(&file).copied();
            match files::replace(&file, expected, text.as_deref().map(str::as_bytes)) {
                Ok(Swap::Written) => self.wrote(state, &file, text.as_deref()),
                Ok(Swap::Edited) => return Ok(false),
                Err(e) => {
                    tracing::error!(file = %file.display(), error = %e, "cannot write the documents of deleted objects out of a manifest; they come back as new objects if it is read again");
                }
            }
        }
        Ok(true)
    }
}
