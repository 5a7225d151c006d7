//! Encrypting and decrypting the leaves a walk queued, on several threads when there are many.

use super::walker::{Job, Mode};
use crate::cipher::{ValueCipher, ValueType};
use crate::tree::{go_format_float, Node};
use crate::SopsError;

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn typed_value(plain: Vec<u8>, ty: ValueType, path: &str) -> Result<Node, SopsError> {
    let bad = |what: &str| SopsError::Value {
        path: path.to_owned(),
        reason: format!("decrypted value is not a valid {what}"),
    };
    let text = || String::from_utf8(plain.clone()).map_err(|_| bad("UTF-8 string"));
    Ok(match ty {
        ValueType::Str | ValueType::Bytes | ValueType::Time | ValueType::Comment => {
            Node::Str(String::from_utf8_lossy(&plain).into_owned())
        }
        ValueType::Int => {
            let t = text()?;
            match t.parse::<i64>() {
                Ok(i) => Node::Int(i),
                Err(_) => Node::UInt(t.parse::<u64>().map_err(|_| bad("int"))?),
            }
        }
        ValueType::Float => Node::Float(text()?.parse::<f64>().map_err(|_| bad("float"))?),
        ValueType::Bool => Node::Bool(parse_go_bool(&text()?).ok_or_else(|| bad("bool"))?),
    })
}

fn encrypt_leaf(cipher: &ValueCipher, leaf: &mut Node, aad: &str) -> Result<(), SopsError> {
    let (ty, plain): (ValueType, std::borrow::Cow<[u8]>) = match &*leaf {
        Node::Str(s) if s.is_empty() => return Ok(()),
        Node::Str(s) => (ValueType::Str, s.as_bytes().into()),
        Node::Int(i) => (ValueType::Int, i.to_string().into_bytes().into()),
        Node::UInt(u) => (
            ValueType::Float,
            go_format_float(*u as f64).into_bytes().into(),
        ),
        Node::Float(f) => (ValueType::Float, go_format_float(*f).into_bytes().into()),
        Node::Bool(b) => (
            ValueType::Bool,
            (if *b { &b"true"[..] } else { &b"false"[..] }).into(),
        ),
        _ => return Ok(()),
    };
    let enc = cipher.encrypt(&plain, ty, aad)?;
    *leaf = Node::Str(enc);
    Ok(())
}

fn decrypt_leaf(cipher: &ValueCipher, leaf: &mut Node, aad: &str) -> Result<(), SopsError> {
    let Node::Str(enc) = &*leaf else {
        return Err(SopsError::Value {
            path: aad.to_owned(),
            reason: "expected an encrypted string value".into(),
        });
    };
    let (plain, ty) = cipher.decrypt(enc, aad)?;
    *leaf = typed_value(plain, ty, aad)?;
    Ok(())
}

/// Runs the queued jobs, on several threads when there are many.
pub(super) fn run_jobs(
    cipher: &ValueCipher,
    aads: &[String],
    jobs: &mut [Job<'_>],
    mode: &Mode,
) -> Result<(), SopsError> {
    let run = |chunk: &mut [Job<'_>]| -> Result<(), SopsError> {
        for job in chunk {
            let aad = &aads[job.aad as usize];
            match mode {
                Mode::Encrypt => encrypt_leaf(cipher, job.leaf, aad)?,
                Mode::Decrypt => decrypt_leaf(cipher, job.leaf, aad)?,
                Mode::Hash => {}
            }
        }
        Ok(())
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    if threads < 2 || jobs.len() < 4096 {
        return run(jobs);
    }
    let per = jobs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .chunks_mut(per)
            .map(|c| scope.spawn(move || run(c)))
            .collect();
        let mut first_err = None;
        for h in handles {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(SopsError::Options("a worker thread panicked".into())));
            if let (Err(e), None) = (r, &first_err) {
                first_err = Some(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    })
}
