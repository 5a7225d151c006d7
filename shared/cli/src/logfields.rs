//! The text log format's fields, with control characters escaped: a value that came from a
//! caller or a git server (a lock ID, an error a remote sent) can never start a new log line,
//! forge one, or send escape sequences to a terminal. The JSON format escapes them already.

use std::fmt;

use gitstate_core::text::escape_controls;
use tracing::field::Field;
use tracing_subscriber::field::{MakeExt, RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::FormatFields;

/// `message` as is (after escaping), every other field as `name=value`, separated by spaces,
/// like the default format.
pub fn escaping_fields() -> impl for<'writer> FormatFields<'writer> + Send + Sync + 'static {
    EscapingFields
}

struct EscapingFields;

impl<'writer> FormatFields<'writer> for EscapingFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let make = tracing_subscriber::fmt::format::debug_fn(write_field).delimited(" ");
        let mut visitor = tracing_subscriber::field::MakeVisitor::make_visitor(&make, writer);
        fields.record(&mut visitor);
        visitor.finish()
    }

    fn add_fields(
        &self,
        current: &'writer mut tracing_subscriber::fmt::FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let empty = current.fields.is_empty();
        let mut writer = current.as_writer();
        if !empty {
            writer.write_char(' ')?;
        }
        self.format_fields(writer, fields)
    }
}

fn write_field(writer: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug) -> fmt::Result {
    let text = format!("{value:?}");
    let text = escape_controls(&text);
    if field.name() == "message" {
        write!(writer, "{text}")
    } else {
        write!(writer, "{}={text}", field.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_field_cannot_start_a_new_log_line() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .fmt_fields(escaping_fields())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request", path = %"a\nb");
            let _entered = span.enter();
            tracing::info!(lock_id = %"id\nFORGED 2099-01-01 INFO admin logged in", who = ?"x\u{1b}[2J", "lock acquired");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("lock_id=id\\nFORGED"), "{text}");
        assert!(text.contains("\\u{1b}[2J"), "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains("path=a\\nb"), "{text}");
        assert!(text.contains("lock acquired"), "{text}");
    }
}
