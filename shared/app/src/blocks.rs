//! HCL blocks that may appear once or several times (`token { … }`, `oidc { … }`, `rule { … }`),
//! read into a list either way: one reader for every such block of the configuration file.

use serde::Deserialize;

/// Blocks of one name: HCL gives one block as an object and several as a list of them. Each is
/// read as `T` itself, so its errors (an unknown key) keep their sentence.
pub(crate) fn one_or_more<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};

    struct Blocks<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Blocks<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("one block or several")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Vec<T>, A::Error> {
            Ok(vec![T::deserialize(MapAccessDeserializer::new(map))?])
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Vec<T>, A::Error> {
            Vec::deserialize(SeqAccessDeserializer::new(seq))
        }
    }
    deserializer.deserialize_any(Blocks(std::marker::PhantomData))
}
