//! Placeholder for the Lambda entrypoint (issue 4): it will serve the shared router through
//! `lambda_http::run`. It builds so the workspace layout is complete.

fn main() {
    eprintln!("gitstate-lambda: the Lambda entrypoint is not built yet; use `gitstate serve`");
    std::process::exit(2);
}
