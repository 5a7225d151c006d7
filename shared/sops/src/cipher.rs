//! The sops value cipher: `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]`, AES-256-GCM with a
//! 32-byte IV and the key path as additional data.

use aes_gcm::aead::consts::U32;
use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::aes::Aes256;
use aes_gcm::{AesGcm, Nonce, Tag};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use rand::RngCore;

use crate::SopsError;

type Gcm = AesGcm<Aes256, U32>;

/// The type tag of an encrypted value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// `type:str`
    Str,
    /// `type:int`
    Int,
    /// `type:float`
    Float,
    /// `type:bool`
    Bool,
    /// `type:bytes`
    Bytes,
    /// `type:time` (YAML only)
    Time,
    /// `type:comment` (YAML only)
    Comment,
}

impl ValueType {
    fn name(self) -> &'static str {
        match self {
            ValueType::Str => "str",
            ValueType::Int => "int",
            ValueType::Float => "float",
            ValueType::Bool => "bool",
            ValueType::Bytes => "bytes",
            ValueType::Time => "time",
            ValueType::Comment => "comment",
        }
    }
    fn parse(s: &str) -> Option<ValueType> {
        Some(match s {
            "str" => ValueType::Str,
            "int" => ValueType::Int,
            "float" => ValueType::Float,
            "bool" => ValueType::Bool,
            "bytes" => ValueType::Bytes,
            "time" => ValueType::Time,
            "comment" => ValueType::Comment,
            _ => return None,
        })
    }
}

/// AES-256-GCM keyed with a sops data key.
pub struct ValueCipher {
    gcm: Gcm,
}

impl ValueCipher {
    /// A cipher for a 32-byte data key.
    pub fn new(data_key: &[u8]) -> Result<ValueCipher, SopsError> {
        let gcm = Gcm::new_from_slice(data_key).map_err(|_| {
            SopsError::Metadata(format!(
                "the data key must be 32 bytes, got {}",
                data_key.len()
            ))
        })?;
        Ok(ValueCipher { gcm })
    }

    /// Encrypts `plain` with a random 32-byte IV; `aad` is the key path (`a:b:`).
    pub fn encrypt(&self, plain: &[u8], ty: ValueType, aad: &str) -> Result<String, SopsError> {
        let mut out = String::with_capacity(plain.len() * 4 / 3 + 110);
        self.encrypt_into(plain, ty, aad, &mut out)?;
        Ok(out)
    }

    /// Like [`ValueCipher::encrypt`], appending the `ENC[...]` text to `out`.
    pub fn encrypt_into(
        &self,
        plain: &[u8],
        ty: ValueType,
        aad: &str,
        out: &mut String,
    ) -> Result<(), SopsError> {
        let mut iv = [0u8; 32];
        rand::rng().fill_bytes(&mut iv);
        let mut buf = plain.to_vec();
        let tag = self
            .gcm
            .encrypt_in_place_detached(Nonce::<U32>::from_slice(&iv), aad.as_bytes(), &mut buf)
            .map_err(|_| SopsError::Value {
                path: aad.to_owned(),
                reason: "AES-GCM encryption failed".into(),
            })?;
        out.push_str("ENC[AES256_GCM,data:");
        B64.encode_string(&buf, out);
        out.push_str(",iv:");
        B64.encode_string(iv, out);
        out.push_str(",tag:");
        B64.encode_string(tag, out);
        out.push_str(",type:");
        out.push_str(ty.name());
        out.push(']');
        Ok(())
    }

    /// Decrypts an `ENC[...]` string; `aad` is the key path (`a:b:`).
    pub fn decrypt(&self, enc: &str, aad: &str) -> Result<(Vec<u8>, ValueType), SopsError> {
        let bad = |reason: &str| SopsError::Value {
            path: aad.to_owned(),
            reason: reason.to_owned(),
        };
        let inner = enc
            .strip_prefix("ENC[AES256_GCM,")
            .and_then(|s| s.strip_suffix(']'))
            .ok_or_else(|| bad("not an ENC[AES256_GCM,...] value"))?;
        let (mut data, mut iv, mut tag, mut ty) = (None, None, None, None);
        for part in inner.split(',') {
            let (k, v) = part
                .split_once(':')
                .ok_or_else(|| bad("field without ':'"))?;
            match k {
                "data" => data = Some(v),
                "iv" => iv = Some(v),
                "tag" => tag = Some(v),
                "type" => ty = Some(v),
                _ => return Err(bad("unknown field")),
            }
        }
        let b64 = |v: Option<&str>, what: &str| -> Result<Vec<u8>, SopsError> {
            let v = v.ok_or_else(|| bad(&format!("missing {what}")))?;
            B64.decode(v)
                .map_err(|_| bad(&format!("{what} is not base64")))
        };
        let mut buf = b64(data, "data")?;
        let iv = b64(iv, "iv")?;
        let tag = b64(tag, "tag")?;
        let ty = ty.ok_or_else(|| bad("missing type"))?;
        let ty = ValueType::parse(ty).ok_or_else(|| bad(&format!("unknown type {ty:?}")))?;
        if iv.len() != 32 {
            return Err(bad(&format!("iv must be 32 bytes, got {}", iv.len())));
        }
        if tag.len() != 16 {
            return Err(bad(&format!("tag must be 16 bytes, got {}", tag.len())));
        }
        self.gcm
            .decrypt_in_place_detached(
                Nonce::<U32>::from_slice(&iv),
                aad.as_bytes(),
                &mut buf,
                Tag::from_slice(&tag),
            )
            .map_err(|_| SopsError::Decrypt {
                path: aad.to_owned(),
            })?;
        Ok((buf, ty))
    }
}
