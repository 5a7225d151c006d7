git_timeout_seconds = 3
repository "default" {
  url = "ssh://git@127.0.0.1:7522/states.git"
}
