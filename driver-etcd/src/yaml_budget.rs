//! A YAML document's size once its aliases are expanded, counted without building it.
//!
//! YAML anchors and aliases let a few kilobytes describe gigabytes ("billion laughs"):
//! deserializing such a config would exhaust memory before validation could refuse it.
//! [`check`] walks the document with a visitor that only counts nodes, borrowing every
//! scalar, so it allocates nothing per node and stops at the budget.

use serde::de::{DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, Visitor};
use std::cell::Cell;
use std::fmt;

/// Refuses `text` when it expands to more than `max_nodes` nodes; the message says why.
pub fn check(text: &str, max_nodes: usize) -> Result<(), String> {
    let budget = Budget {
        left: Cell::new(max_nodes),
        max: max_nodes,
    };
    for doc in serde_yaml::Deserializer::from_str(text) {
        Node(&budget).deserialize(doc).map_err(|e| e.to_string())?;
    }
    Ok(())
}

struct Budget {
    left: Cell<usize>,
    max: usize,
}

impl Budget {
    fn charge<E: serde::de::Error>(&self) -> Result<(), E> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(E::custom(format!(
                "expands to more than {} YAML nodes (anchors and aliases repeat their \
                 content); write the config out without aliases",
                self.max
            ))),
        }
    }
}

#[derive(Clone, Copy)]
struct Node<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

macro_rules! scalar {
    ($($name:ident: $t:ty),*) => {$(
        fn $name<E: serde::de::Error>(self, _: $t) -> Result<(), E> {
            self.0.charge()
        }
    )*};
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    scalar!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64,
            visit_str: &str, visit_bytes: &[u8]);

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.charge()
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.charge()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.0.charge()?;
        d.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.0.charge()?;
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.charge()?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.charge()?;
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }

    fn visit_enum<A: EnumAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(serde::de::Error::custom(
            "YAML tags (`!name`) are not part of the config format; remove them",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small file whose nine levels of aliases expand to 10^9 scalars.
    fn laughs() -> String {
        let mut s = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            s.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        s
    }

    #[test]
    fn alias_bombs_stop_at_the_budget() {
        let text = laughs();
        assert!(text.len() < 1000);
        let e = check(&text, 100_000).unwrap_err();
        assert!(e.contains("aliases"), "{e}");
    }

    #[test]
    fn ordinary_documents_fit() {
        let text = "source: {endpointList: [\"http://a:1\"], prefix: /a/}\n\
                    sync: {excludePrefixes: [a, b, c]}\n";
        check(text, 100).unwrap();
        // The count is exact enough to be a bound: 1 root map + 2 keys + 2 maps + ...
        assert!(check(text, 5).is_err());
    }

    #[test]
    fn tags_are_refused() {
        assert!(check("a: !Custom 1\n", 100).unwrap_err().contains("tags"));
    }
}
