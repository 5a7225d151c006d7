//! Terraform configurations: a `main.tf` with an `http` backend and `null_resource`s.

use std::fs;
use std::io::Write;
use std::path::Path;

/// The `backend "http"` block of a test configuration.
#[derive(Clone, Debug)]
pub struct HttpBackend {
    pub address: String,
    pub lock_address: Option<String>,
    pub unlock_address: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// Other attributes written as `key = value` (value is HCL: quote strings yourself).
    pub extra: Vec<(String, String)>,
}

impl HttpBackend {
    /// `address`, `lock_address` and `unlock_address` all set to `address` (the documented setup).
    pub fn new(address: &str) -> HttpBackend {
        HttpBackend {
            address: address.to_string(),
            lock_address: Some(address.to_string()),
            unlock_address: Some(address.to_string()),
            username: None,
            password: None,
            extra: Vec::new(),
        }
    }

    /// Adds `username`/`password` (basic auth on every request).
    pub fn with_auth(mut self, username: &str, password: &str) -> HttpBackend {
        self.username = Some(username.to_string());
        self.password = Some(password.to_string());
        self
    }

    pub fn hcl(&self) -> String {
        let mut s = String::from("terraform {\n  backend \"http\" {\n");
        let mut attr = |k: &str, v: &str| s.push_str(&format!("    {k} = {}\n", hcl_string(v)));
        attr("address", &self.address);
        if let Some(v) = &self.lock_address {
            attr("lock_address", v);
        }
        if let Some(v) = &self.unlock_address {
            attr("unlock_address", v);
        }
        if let Some(v) = &self.username {
            attr("username", v);
        }
        if let Some(v) = &self.password {
            attr("password", v);
        }
        for (k, v) in &self.extra {
            s.push_str(&format!("    {k} = {v}\n"));
        }
        s.push_str("  }\n}\n");
        s
    }
}

fn hcl_string(v: &str) -> String {
    serde_json::to_string(v)
        .unwrap()
        .replace("${", "$${")
        .replace("%{", "%%{")
}

/// Writes `dir/main.tf`: the backend block and `count` `null_resource`s `r0…` whose `triggers`
/// hold `generation` (change it to make the next apply replace them, i.e. write a new state).
pub fn write_main_tf(dir: &Path, backend: &HttpBackend, count: usize, generation: &str) {
    let mut tf = backend.hcl();
    for i in 0..count {
        tf.push_str(&format!(
            "\nresource \"null_resource\" \"r{i}\" {{\n  triggers = {{\n    generation = {}\n    index      = \"{i}\"\n  }}\n}}\n",
            hcl_string(generation)
        ));
    }
    let mut f = fs::File::create(dir.join("main.tf")).expect("create main.tf");
    f.write_all(tf.as_bytes()).expect("write main.tf");
}
