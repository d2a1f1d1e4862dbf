//! [`Env`]: the explicitly built environment of a host program.
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

/// The whole environment a host program starts with: nothing of the launching process is inherited, every
/// variable is one the caller put here.
///
/// `Debug` prints the names only: values are often credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Env {
    vars: BTreeMap<OsString, OsString>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

impl Env {
    /// An empty environment.
    pub fn new() -> Env {
        Env::default()
    }

    /// Every entry of `map`: the caller vouches that the whole map is meant for the program (an environment it
    /// built itself, or the operator's own environment for a program the operator runs on the host).
    pub fn from_map<K: AsRef<OsStr>, V: AsRef<OsStr>>(map: impl IntoIterator<Item = (K, V)>) -> Env {
        let mut env = Env::new();
        env.extend(map);
        env
    }

    /// Only the entries of `map` whose names are in `names`, in that map's spelling.
    pub fn pick<'a>(map: &BTreeMap<String, String>, names: impl IntoIterator<Item = &'a str>) -> Env {
        let mut env = Env::new();
        for name in names {
            if let Some(v) = map.get(name) {
                env.set(name, v);
            }
        }
        env
    }

    /// Sets `name` to `value`.
    pub fn set(&mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Env {
        self.vars
            .insert(name.as_ref().to_os_string(), value.as_ref().to_os_string());
        self
    }

    /// [`Env::set`] by value, for chaining.
    #[must_use]
    pub fn with(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Env {
        self.set(name, value);
        self
    }

    /// Adds every entry of `vars` (a later entry wins).
    pub fn extend<K: AsRef<OsStr>, V: AsRef<OsStr>>(&mut self, vars: impl IntoIterator<Item = (K, V)>) {
        for (k, v) in vars {
            self.set(k, v);
        }
    }

    /// Removes `name`.
    pub fn remove(&mut self, name: impl AsRef<OsStr>) -> &mut Env {
        self.vars.remove(name.as_ref());
        self
    }

    /// The value of `name`.
    pub fn get(&self, name: impl AsRef<OsStr>) -> Option<&OsStr> {
        self.vars.get(name.as_ref()).map(OsString::as_os_str)
    }

    /// Every entry, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.vars.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }

    /// Whether the environment is empty.
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_names_only() {
        let env = Env::new().with("TOKEN", "s3cr3t").with("PATH", "/bin");
        assert_eq!(format!("{env:?}"), r#"{"PATH", "TOKEN"}"#);
    }

    #[test]
    fn pick_takes_only_the_named_entries() {
        let map = BTreeMap::from([
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), "2".to_string()),
        ]);
        let env = Env::pick(&map, ["A", "C"]);
        assert_eq!(env.get("A"), Some(OsStr::new("1")));
        assert_eq!(env.get("B"), None);
        assert_eq!(env.iter().count(), 1);
    }
}
