//! Weight handles by role, as a forward pass picks them up.

use std::collections::BTreeMap;

use super::spec::Role;

/// The handles (or tensor infos) of one layer, or of the whole-model
/// tensors, by role. Built from a table that [`super::Model`] checked
/// against the architecture's spec, so every role the spec lists is there.
#[derive(Clone, Debug)]
pub struct RoleMap<T> {
    /// "layer 3", "model": for messages.
    what: String,
    map: BTreeMap<Role, T>,
}

impl<T: Clone> RoleMap<T> {
    pub fn new(what: impl Into<String>, map: BTreeMap<Role, T>) -> RoleMap<T> {
        RoleMap {
            what: what.into(),
            map,
        }
    }

    /// The handle for `role`, when the map has one.
    pub fn get_opt(&self, role: Role) -> Option<T> {
        self.map.get(&role).cloned()
    }

    /// The handle for `role`.
    ///
    /// # Panics
    /// If the architecture's table does not list `role`: the forward pass
    /// and its spec disagree, a bug caught by loading any real model.
    pub fn get(&self, role: Role) -> T {
        match self.map.get(&role) {
            Some(t) => t.clone(),
            None => panic!(
                "{}: no {role} tensor (the arch spec table must list it)",
                self.what
            ),
        }
    }
}
