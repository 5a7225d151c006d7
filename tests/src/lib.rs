//! Test support: starting real git servers, the gitstate binary and terraform.
