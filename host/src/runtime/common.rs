//! What is written the same in every WIT version (kind references, field
//! values, cache reads, log, clock): one body, expanded in each version's
//! module over that version's generated types (`cache`, `log`, `clock`,
//! `types`, and its `read_error` in scope there).

/// Defines `kind_ref` and `wit_field`, and implements `cache::Host`,
/// `log::Host` and `clock::Host` for `HostState`, in the invoking module.
macro_rules! same_in_every_version {
    () => {
        pub fn kind_ref(k: &types::KindRef) -> KindRef {
            match k {
                types::KindRef::Gvk(g) => KindRef::Gvk(Gvk::new(&g.group, &g.version, &g.kind)),
                types::KindRef::ResourceName(r) => KindRef::Resource(r.clone()),
            }
        }

        fn wit_field(v: FieldValue) -> types::FieldValue {
            match v {
                FieldValue::Null => types::FieldValue::Null,
                FieldValue::Boolean(b) => types::FieldValue::Boolean(b),
                FieldValue::Integer(i) => types::FieldValue::Integer(i),
                FieldValue::Float(f) => types::FieldValue::Float(f),
                FieldValue::Text(s) => types::FieldValue::Text(s),
                FieldValue::Json(s) => types::FieldValue::Json(s),
            }
        }

        impl cache::Host for HostState {
            fn get(
                &mut self,
                kind: types::KindRef,
                namespace: Option<String>,
                name: String,
            ) -> wasmtime::Result<Result<Option<Resource<ObjectHandle>>, cache::CacheError>> {
                Ok(self
                    .cache_get(&kind_ref(&kind), namespace.as_deref(), &name)?
                    .map_err(read_error))
            }

            fn list(
                &mut self,
                kind: types::KindRef,
                namespace: Option<String>,
                label_selector: Option<String>,
            ) -> wasmtime::Result<Result<Vec<Resource<ObjectHandle>>, cache::CacheError>> {
                Ok(self
                    .cache_list(
                        &kind_ref(&kind),
                        namespace.as_deref(),
                        label_selector.as_deref(),
                    )?
                    .map_err(read_error))
            }

            fn by_index(
                &mut self,
                index: String,
                value: String,
            ) -> wasmtime::Result<Result<Vec<Resource<ObjectHandle>>, cache::CacheError>> {
                Ok(self.cache_by_index(&index, &value)?.map_err(read_error))
            }
        }

        fn level(l: log::Level) -> tracing::Level {
            match l {
                log::Level::Trace => tracing::Level::TRACE,
                log::Level::Debug => tracing::Level::DEBUG,
                log::Level::Info => tracing::Level::INFO,
                log::Level::Warn => tracing::Level::WARN,
                log::Level::Error => tracing::Level::ERROR,
            }
        }

        impl log::Host for HostState {
            fn enabled(&mut self, l: log::Level) -> wasmtime::Result<bool> {
                Ok(self.log_enabled(level(l)))
            }

            fn write(
                &mut self,
                l: log::Level,
                message: String,
                fields: Vec<(String, String)>,
            ) -> wasmtime::Result<()> {
                self.log_write(level(l), &message, &fields);
                Ok(())
            }
        }

        impl clock::Host for HostState {
            fn now(&mut self) -> wasmtime::Result<clock::Instant> {
                let (seconds, nanoseconds) = self.clock_parts();
                Ok(clock::Instant {
                    seconds,
                    nanoseconds,
                })
            }

            fn now_rfc3339(&mut self) -> wasmtime::Result<String> {
                Ok(self.clock_rfc3339())
            }
        }
    };
}

pub(super) use same_in_every_version;
