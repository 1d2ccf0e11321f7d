//! Which source each plugin name belongs to. The plugin folder and Plugin
//! objects both name plugins; a name belongs to one of them from the start
//! of its first load until its unload, so a folder file and a Plugin object
//! of the same name never replace each other's plugin: the later one is
//! refused (`NameTaken`) and tries again once the name is free.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tokio::sync::watch;

/// Where a plugin comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A file of the plugin folder.
    File(PathBuf),
    /// A Plugin or NamespacedPlugin object, as messages name it
    /// (`plugins.kubewasm.io/x`).
    Object(String),
    /// [`crate::manager::PluginHost::install`]: a program or test
    /// embedding the host.
    Direct,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::File(path) => write!(f, "the plugin folder's file {}", path.display()),
            Origin::Object(object) => write!(f, "the object {object}"),
            Origin::Direct => f.write_str("a plugin installed by the embedding program"),
        }
    }
}

/// The origin holding each name, and a counter of names given back.
#[derive(Debug)]
pub struct Origins {
    held: parking_lot::Mutex<BTreeMap<String, Origin>>,
    freed: watch::Sender<u64>,
}

impl Default for Origins {
    fn default() -> Self {
        Self {
            held: parking_lot::Mutex::new(BTreeMap::new()),
            freed: watch::Sender::new(0),
        }
    }
}

impl Origins {
    /// Who holds `name`, if anyone.
    pub fn holder(&self, name: &str) -> Option<Origin> {
        self.held.lock().get(name).cloned()
    }

    /// Takes `name` for `origin`: `Ok(true)` if it was free, `Ok(false)` if
    /// `origin` held it already, else the holder.
    pub fn claim(&self, name: &str, origin: &Origin) -> Result<bool, Origin> {
        let mut held = self.held.lock();
        match held.get(name) {
            Some(holder) if holder != origin => Err(holder.clone()),
            Some(_) => Ok(false),
            None => {
                held.insert(name.to_owned(), origin.clone());
                Ok(true)
            }
        }
    }

    /// Gives `name` back if `origin` holds it; returns whether it did.
    pub fn release(&self, name: &str, origin: &Origin) -> bool {
        let mut held = self.held.lock();
        if held.get(name) != Some(origin) {
            return false;
        }
        held.remove(name);
        drop(held);
        self.freed.send_modify(|n| *n += 1);
        true
    }

    /// Changes whenever a name is given back: a source refused for a taken
    /// name tries again then.
    pub fn freed(&self) -> watch::Receiver<u64> {
        self.freed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_held_by_one_origin_until_it_gives_it_back() {
        let origins = Origins::default();
        let file = Origin::File("/plugins/x.wasm".into());
        let object = Origin::Object("plugins.kubewasm.io/x".into());
        let mut freed = origins.freed();
        assert_eq!(origins.claim("x", &file), Ok(true));
        // Its own next version keeps the name; another origin is refused,
        // told who holds it.
        assert_eq!(origins.claim("x", &file), Ok(false));
        assert_eq!(origins.claim("x", &object), Err(file.clone()));
        assert_eq!(origins.holder("x"), Some(file.clone()));
        // Only the holder gives it back.
        assert!(!origins.release("x", &object));
        assert!(!freed.has_changed().unwrap());
        assert!(origins.release("x", &file));
        assert!(freed.has_changed().unwrap());
        freed.mark_unchanged();
        assert_eq!(origins.holder("x"), None);
        assert_eq!(origins.claim("x", &object), Ok(true));
        assert_eq!(origins.claim("x", &file), Err(object.clone()));
        // Other names are independent.
        assert_eq!(origins.claim("y", &file), Ok(true));
        assert!(
            origins
                .claim("x", &file)
                .unwrap_err()
                .to_string()
                .contains("plugins.kubewasm.io/x")
        );
    }
}
