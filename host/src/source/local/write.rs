//! Writing objects back to their manifests: where a new object goes, the
//! text a file should hold, edits read before a write, and what was written.

use super::*;

impl LocalCluster {
    /// Records what the cluster wrote to `file`.
    pub(super) fn wrote(&self, state: &mut State, file: &Path, text: Option<&str>) {
        match text {
            Some(t) => {
                state
                    .seen
                    .insert(file.to_owned(), files::fingerprint(t.as_bytes()));
            }
            None => {
                state.seen.remove(file);
            }
        }
    }

    /// The text `file` should hold: the documents of the objects living in
    /// it, with `overlay` (an object's next state) applied; `None` when no
    /// object is left.
    pub(super) fn render(
        &self,
        state: &State,
        file: &Path,
        overlay: Option<(&Id, &Next)>,
    ) -> Result<Option<String>, String> {
        let mut docs: BTreeMap<&Id, &Value> = state
            .objects
            .iter()
            .filter(|(_, e)| e.file == file && !e.detached)
            .map(|(id, e)| (id, &e.value))
            .collect();
        match overlay {
            Some((id, Next::Put(v))) => {
                docs.insert(id, v);
            }
            Some((id, Next::Gone(_))) => {
                docs.remove(id);
            }
            Some((_, Next::Unchanged)) | None => {}
        }
        if docs.is_empty() {
            return Ok(None);
        }
        let docs: Vec<&Value> = docs.into_values().collect();
        files::render(file, &docs).map(Some)
    }

    pub(super) fn file_for_new(&self, id: &Id, plural: &str) -> Result<PathBuf, ActionError> {
        let ns = id.1.namespace.as_deref().unwrap_or("_cluster");
        let group = if id.0.group.is_empty() {
            String::new()
        } else {
            format!(".{}", id.0.group)
        };
        let ns_dir = Path::new(ns);
        let file = PathBuf::from(format!("{plural}{group}-{}.yaml", id.1.name));
        // Names are validated before this; refuse anything that is not one
        // plain component anyway, so nothing is ever written outside the folder.
        let plain = |p: &Path| {
            let mut c = p.components();
            matches!(
                (c.next(), c.next()),
                (Some(std::path::Component::Normal(_)), None)
            )
        };
        if !plain(ns_dir) || !plain(&file) {
            return Err(ActionError::Invalid(format!(
                "{ns}/{}: not a plain file name",
                id.1.name
            )));
        }
        Ok(self.dir.join(ns_dir).join(file))
    }

    /// Whether `file` changed since the cluster last read it; if so, reads
    /// it (a rescan: its edits become deltas before the write is decided
    /// again). A file the rescan could not take whole is not written over.
    pub(super) fn read_edit(&self, state: &mut State, file: &Path) -> Result<bool, ActionError> {
        let now = files::fingerprint_file(file).map_err(|e| transient(file, e))?;
        if now == state.seen.get(file).copied() && !state.unreadable.contains(file) {
            return Ok(false);
        }
        tracing::info!(file = %file.display(), found = "before-write", "a manifest changed since the local cluster read it: reading the edit first, the write is decided again on top of it");
        self.rescan_locked(state)
            .map_err(|e| ActionError::Transient(e.to_string()))?;
        if state.unreadable.contains(file) {
            return Err(ActionError::Transient(format!(
                "{} holds an edit the local cluster cannot read (its error is logged); not written, so the edit is kept: fix the file",
                file.display()
            )));
        }
        Ok(true)
    }

    /// One object's write, as the API server's storage makes it: `decide`
    /// computes its next state from its current one (`None`: it does not
    /// exist); the file it lives in (`new_file` for a new object) is
    /// written over only the content the cluster last read, and an edit
    /// found there is read first and `decide` asked again.
    pub(super) fn write_object(
        &self,
        state: &mut State,
        id: &Id,
        new_file: Option<&Path>,
        mut decide: impl FnMut(Option<&Value>) -> Result<Next, ActionError>,
    ) -> Result<(), ActionError> {
        for attempt in 1..=WRITE_ATTEMPTS {
            let (file, detached) = match state.objects.get(id) {
                Some(e) => (Some(e.file.clone()), e.detached),
                None => (new_file.map(Path::to_owned), false),
            };
            let file = file.filter(|_| !detached);
            if let Some(f) = &file
                && self.read_edit(state, f)?
            {
                continue;
            }
            let next = decide(state.objects.get(id).map(|e| &e.value))?;
            if matches!(next, Next::Unchanged) {
                return Ok(());
            }
            if let Some(f) = &file {
                // The file gets the resourceVersion `store` gives next.
                let preview = match &next {
                    Next::Put(v) => {
                        let mut v = v.clone();
                        set_rv(&mut v, state.rv + 1);
                        Next::Put(v)
                    }
                    Next::Gone(_) | Next::Unchanged => Next::Unchanged,
                };
                let overlay = match &next {
                    Next::Gone(_) => &next,
                    _ => &preview,
                };
                let text = self
                    .render(state, f, Some((id, overlay)))
                    .map_err(|e| ActionError::Invalid(format!("{}: {e}", f.display())))?;
                #[cfg(test)]
                if let Some(hook) = self.before_swap.lock().as_mut() {
                    hook(f);
                }
                let expected = state.seen.get(f).copied();
                match files::replace(f, expected, text.as_deref().map(str::as_bytes)) {
                    Ok(Swap::Written) => self.wrote(state, f, text.as_deref()),
                    Ok(Swap::Edited) => {
                        tracing::info!(file = %f.display(), found = "at-swap", attempt, "a manifest was edited while the local cluster wrote it: the edit stays, is read first, and the write is decided again on top of it");
                        self.rescan_locked(state)
                            .map_err(|e| ActionError::Transient(e.to_string()))?;
                        continue;
                    }
                    Err(e) => return Err(transient(f, e)),
                }
            }
            self.store(state, id, file.as_deref(), next);
            return Ok(());
        }
        Err(ActionError::Transient(format!(
            "{id_kind} {key}: its manifest was edited at each of {WRITE_ATTEMPTS} attempts to write it; retried",
            id_kind = id.0.kind,
            key = id.1
        )))
    }
}
