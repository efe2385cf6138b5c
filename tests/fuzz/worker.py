"""A long-lived process that runs moeprof commands in-process, one request per line on stdin.

Running each case through ``typer.testing.CliRunner`` in one process saves the ~1 s start of
``python -m moeprof``; running that process apart from pytest keeps a crash, a hang or a memory blow-up
of one case from taking the test session with it. File descriptors 1 and 2 are pointed at files for every
case, so what native code (jaxlib, SQLite, Arrow) writes there is seen too.

Request: ``{"argv": [...], "cwd": str, "env": {name: value}, "stdout": path, "stderr": path}``.
Reply (on the descriptor that was stdout at start): ``{"rc": int, "stdout": str, "stderr": str, "escaped": str}``
where ``escaped`` names an exception that left the command (a traceback for a user).
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main() -> None:
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    requests = os.fdopen(os.dup(0), "r")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.environ.pop("MOEPROF_DEBUG", None)

    from typer.testing import CliRunner

    from moeprof.cli import app

    runner = CliRunner()
    home = os.getcwd()
    reply.write("ready\n")
    for line in requests:
        req = json.loads(line)
        out_fd = os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err_fd = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        saved = os.dup(1), os.dup(2)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        escaped = ""
        saved_env = {k: os.environ.get(k) for k in req.get("env", {})}
        try:
            os.environ.update(req.get("env", {}))
            os.chdir(req["cwd"])
            result = runner.invoke(app, req["argv"], catch_exceptions=True)
            rc = result.exit_code
            stdout, stderr = result.stdout, result.stderr
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                exc = result.exception
                escaped = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        except BaseException as exc:  # the runner itself failed: report it as an escape
            rc, stdout, stderr = 1, "", ""
            escaped = f"{type(exc).__name__}: {exc}"
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (*saved, out_fd, err_fd):
                os.close(fd)
            os.chdir(home)
            for k, old in saved_env.items():
                if old is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = old
        reply.write(json.dumps({"rc": rc, "stdout": stdout, "stderr": stderr, "escaped": escaped}) + "\n")


if __name__ == "__main__":
    main()
