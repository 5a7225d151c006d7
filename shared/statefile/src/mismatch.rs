//! What a JSON value was ([`Seen`]) and the first place where it did not meet its Go type
//! ([`Mismatch`], with the path to it): what the walk reports and the messages say.

use super::shape::Shape;

/// What a JSON value is, as far as the rules and the messages need.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Seen {
    Null,
    Bool,
    /// An integer literal from 0 to 2^64−1.
    Whole(u64),
    /// A negative integer literal from −2^63.
    Negative,
    /// A number with a fraction or an exponent, `-0`, or an integer out of those ranges.
    OtherNumber,
    /// A string; its text when the field keeps it.
    Str {
        text: Option<String>,
        empty: bool,
    },
    Array,
    Object,
}

impl Seen {
    /// How a message names it.
    pub(crate) fn describe(&self) -> String {
        match self {
            Seen::Null => "null".into(),
            Seen::Bool => "true or false".into(),
            Seen::Whole(n) => format!("the number {n}"),
            Seen::Negative => "a negative number".into(),
            Seen::OtherNumber => {
                "a number that is not a whole number from 0 to 18446744073709551615".into()
            }
            Seen::Str { .. } => "a string".into(),
            Seen::Array => "an array".into(),
            Seen::Object => "an object".into(),
        }
    }
}

/// One step of a path into the document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    Field(&'static str),
    Key(String),
    Index(usize),
}

/// The first place in a top-level value whose JSON type its Go type does not take.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mismatch {
    /// Innermost step first (built while the walk returns).
    steps: Vec<Step>,
    pub expected: &'static str,
    pub found: String,
}

impl Mismatch {
    pub(crate) fn new(shape: &Shape, found: &Seen) -> Box<Mismatch> {
        Box::new(Mismatch {
            steps: Vec::new(),
            expected: expected(shape),
            found: found.describe(),
        })
    }

    pub(crate) fn within(mut self: Box<Self>, step: Step) -> Box<Mismatch> {
        self.steps.push(step);
        self
    }

    /// Where it is, e.g. `resources[2].instances[0].schema_version`, from the top-level field
    /// named `top`.
    pub(crate) fn place(&self, top: &str) -> String {
        let mut place = top.to_owned();
        for step in self.steps.iter().rev() {
            match step {
                Step::Field(name) => {
                    place.push('.');
                    place.push_str(name);
                }
                Step::Key(key) => {
                    place.push('[');
                    place.push_str(&serde_json::Value::String(key.clone()).to_string());
                    place.push(']');
                }
                Step::Index(i) => place.push_str(&format!("[{i}]")),
            }
        }
        place
    }
}

/// How a message names what a shape takes.
fn expected(shape: &Shape) -> &'static str {
    match shape {
        Shape::Any | Shape::Attributes => "any JSON value",
        Shape::Kept(_, inner) => expected(inner),
        Shape::Str => "a string",
        Shape::U64 => "a whole number from 0 to 18446744073709551615",
        Shape::U8 => "a whole number from 0 to 255",
        Shape::Bool => "true or false",
        Shape::Bytes => "a base64 string",
        Shape::List(_) => "an array",
        Shape::Map(_) | Shape::Struct(..) => "an object",
    }
}
