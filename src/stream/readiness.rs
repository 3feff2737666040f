//! Which components are connected, for `/ready` and the `connected` gauge.

use std::collections::BTreeMap;

use parking_lot::RwLock;

#[derive(Default)]
pub struct Readiness {
    components: RwLock<BTreeMap<String, bool>>,
}

impl Readiness {
    /// Registers a component as not yet connected.
    pub fn register(&self, id: &str) {
        self.components.write().insert(id.to_owned(), false);
    }

    pub fn set(&self, id: &str, connected: bool) {
        if let Some(flag) = self.components.write().get_mut(id) {
            *flag = connected;
        }
    }

    pub fn remove_prefix(&self, prefix: &str) {
        self.components
            .write()
            .retain(|k, _| !k.starts_with(prefix));
    }

    /// The components whose ids start with `prefix` (a stream's: `<stream>/`).
    pub fn ids(&self, prefix: &str) -> Vec<String> {
        self.components
            .read()
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// The components not connected yet; empty means ready.
    pub fn not_ready(&self) -> Vec<String> {
        self.components
            .read()
            .iter()
            .filter(|(_, up)| !**up)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_all_connected() {
        let r = Readiness::default();
        r.register("s/input");
        r.register("s/output");
        r.set("s/input", true);
        assert_eq!(r.not_ready(), vec!["s/output".to_string()]);
        r.set("s/output", true);
        assert!(r.not_ready().is_empty());
        r.set("s/output", false);
        r.remove_prefix("s/");
        assert!(r.not_ready().is_empty());
    }
}
